package controllers

import (
	"k8s.io/apimachinery/pkg/types"

	"github.com/dsh-dev/projectmcp/internal/metrics"
)

// countAction counts the repoints and rebuilds the reconciler does (the registry counts the
// rebuilds a mount does itself).
func countAction(key types.NamespacedName, a Action) {
	switch a.Kind {
	case ActionRepoint:
		metrics.Repointed(key.Namespace, key.Name, a.Server, metrics.ReasonConfigChanged)
	case ActionRebuild:
		metrics.Rebuilt(key.Namespace, key.Name, a.Server, metrics.ReasonReconnectRequested)
	}
}
