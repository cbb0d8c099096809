package controllers

import (
	"context"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
)

// Owners says which projects this replica serves when projects are spread over replicas by
// bucket (internal/buckets); a nil Owners means every project is this replica's.
type Owners interface {
	// Owner is this replica's claim on obj (what status.owner says) while it serves the
	// project's bucket; false while another replica, or none, does.
	Owner(obj *v1alpha1.ProjectMCP) (v1alpha1.ProjectOwner, bool)
	// Bucket is the bucket obj is in.
	Bucket(obj *v1alpha1.ProjectMCP) int
}

// owns reports whether this replica serves obj, and the owner status says. A reconcile holds
// the returned release until it ends: BucketReleased waits for the reconciles of the bucket
// under way, so none builds a connection after the bucket's projects were stopped.
func (r *Reconciler) owns(obj *v1alpha1.ProjectMCP) (owner *v1alpha1.ProjectOwner, mine bool, release func()) {
	if r.Owners == nil {
		return nil, true, func() {}
	}
	gate := r.gate(r.Owners.Bucket(obj))
	gate.RLock()
	o, ok := r.Owners.Owner(obj)
	return &o, ok, gate.RUnlock
}

// gate is bucket k's lock: reconciles of its projects share it, BucketReleased holds it alone.
func (r *Reconciler) gate(k int) *sync.RWMutex {
	g, _ := r.gates.LoadOrStore(k, &sync.RWMutex{})
	return g.(*sync.RWMutex)
}

// BucketTaken has the reconciler build the projects of bucket k, which this replica now
// serves: each is reconciled from its object, as on a start.
func (r *Reconciler) BucketTaken(ctx context.Context, k int) error {
	objs, err := r.bucket(ctx, k)
	for _, obj := range objs {
		r.taken <- event.GenericEvent{Object: obj}
	}
	return err
}

// BucketReleased stops the projects of bucket k, which this replica no longer serves: their
// sessions end and their connections are destroyed (their servers' processes gone) before it
// returns, so the bucket's next holder never runs a server twice.
func (r *Reconciler) BucketReleased(ctx context.Context, k int) error {
	gate := r.gate(k)
	gate.Lock()
	defer gate.Unlock()
	objs, err := r.bucket(ctx, k)
	for _, obj := range objs {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		r.forget(client.ObjectKeyFromObject(obj))
	}
	return err
}

// bucket lists the projects of bucket k from the cache.
func (r *Reconciler) bucket(ctx context.Context, k int) ([]*v1alpha1.ProjectMCP, error) {
	var list v1alpha1.ProjectMCPList
	if err := r.Client.List(ctx, &list); err != nil {
		return nil, err
	}
	var out []*v1alpha1.ProjectMCP
	for i := range list.Items {
		if r.Owners.Bucket(&list.Items[i]) == k {
			out = append(out, &list.Items[i])
		}
	}
	return out, nil
}
