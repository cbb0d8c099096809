package controllers

import (
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// SetupWithManagerWrapped registers r with a manager as SetupWithManager does, except that the
// controller calls wrap(r) instead of r. It is the seam of the integration suite
// (internal/testenv/harness), which holds a project's reconciles back through it so that tests
// can act before a project's first reconcile; wrap's reconciler must end up calling r's.
func (r *Reconciler) SetupWithManagerWrapped(mgr manager.Manager, wrap func(reconcile.Reconciler) reconcile.Reconciler) error {
	return r.setupWithManager(mgr, wrap(r))
}
