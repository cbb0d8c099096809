package controllers

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
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
	// Forget drops what Owners remembers of a deleted project.
	Forget(key types.NamespacedName)
	// Keeps reports whether obj's bucket is still this replica's while Owner says no because
	// its renewal is late: its projects are neither built nor stopped until that is settled.
	Keeps(obj *v1alpha1.ProjectMCP) bool
}

// unsettled is how soon a reconcile that found its bucket's renewal late looks again.
const unsettled = 500 * time.Millisecond

// settling reports whether obj's bucket is held here with its renewal late (Owners.Keeps): the
// reconcile then waits for the renewal, and stops nothing. A bucket lost or handed off
// stops its projects through BucketReleased.
func (r *Reconciler) settling(obj *v1alpha1.ProjectMCP) bool {
	return r.Owners != nil && r.Owners.Keeps(obj)
}

// owns reports whether this replica serves obj, and the owner status says. A reconcile holds
// the returned release until it ends: BucketReleased waits for the reconciles of the bucket
// under way, so none builds a connection after the bucket's projects were stopped.
func (r *Reconciler) owns(obj *v1alpha1.ProjectMCP) (owner *v1alpha1.ProjectOwner, mine bool, release func()) {
	if r.Owners == nil {
		return nil, true, func() {}
	}
	// Not this replica's: no gate to wait for (a handoff of the bucket may hold it).
	if _, ok := r.Owners.Owner(obj); !ok {
		return nil, false, func() {}
	}
	gate := r.gate(r.Owners.Bucket(obj))
	gate.RLock()
	o, ok := r.Owners.Owner(obj)
	return &o, ok, gate.RUnlock
}

// stillOwns reports whether this replica still serves obj after a reconcile built its
// connections: a bucket lost meanwhile (not renewed in time) has its projects stopped here.
func (r *Reconciler) stillOwns(obj *v1alpha1.ProjectMCP) bool {
	if r.Owners == nil {
		return true
	}
	_, ok := r.Owners.Owner(obj)
	return ok
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
		select {
		case r.taken <- event.GenericEvent{Object: obj}:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return err
}

// BucketReleased stops the projects of bucket k, which this replica no longer serves: their
// sessions end and their connections are destroyed (their servers' processes gone) before it
// returns, so the bucket's next holder never runs a server twice.
//
// It waits for the reconciles of the bucket under way within ctx, then stops the projects
// whatever ctx says (a reconcile still stuck on the API server finds the bucket gone when it
// gets back, and stops what it built: stillOwns). The projects stop in parallel; an error
// means some may still run, and the caller keeps the bucket.
func (r *Reconciler) BucketReleased(ctx context.Context, k int) error {
	gate := r.gate(k)
	if lockWithin(ctx, gate) {
		defer gate.Unlock()
	}
	objs, err := r.bucket(context.WithoutCancel(ctx), k)
	var wg sync.WaitGroup
	for _, obj := range objs {
		wg.Go(func() { r.forget(client.ObjectKeyFromObject(obj)) })
	}
	wg.Wait()
	return err
}

// lockWithin takes gate before ctx ends; false when it could not.
func lockWithin(ctx context.Context, gate *sync.RWMutex) bool {
	for !gate.TryLock() {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(10 * time.Millisecond):
		}
	}
	return true
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
