package controllers

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/registry"
)

// losingOwners serves every project for its first `serve` answers, then none: a bucket lost
// while a reconcile ran.
type losingOwners struct {
	serve atomic.Int32
	keeps atomic.Bool // the bucket is still this replica's, its renewal late
}

func (o *losingOwners) Owner(*v1alpha1.ProjectMCP) (v1alpha1.ProjectOwner, bool) {
	return v1alpha1.ProjectOwner{Replica: "r", Bucket: 0, Epoch: 1}, o.serve.Add(-1) >= 0
}
func (o *losingOwners) Bucket(*v1alpha1.ProjectMCP) int { return 0 }
func (o *losingOwners) Forget(types.NamespacedName)     {}
func (o *losingOwners) Keeps(*v1alpha1.ProjectMCP) bool { return o.keeps.Load() }

// bucketReconciler is a Reconciler of one project with no servers (on the fake client, with a
// registry of its own), whose bucket's ownership the test decides.
func bucketReconciler(t *testing.T) (*Reconciler, client.Client, *registry.Registry, *losingOwners, types.NamespacedName) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	obj := &v1alpha1.ProjectMCP{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", Finalizers: []string{v1alpha1.Finalizer}}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(obj).WithStatusSubresource(obj).Build()
	reg := registry.New(clocktesting.NewFakeClock(time.Now()), logr.Discard())
	t.Cleanup(reg.Shutdown)
	owners := &losingOwners{}
	r := &Reconciler{Client: c, APIReader: c, Registry: reg, Clock: clocktesting.NewFakeClock(time.Now()), Owners: owners}
	return r, c, reg, owners, client.ObjectKeyFromObject(obj)
}

// A reconcile that finds its bucket lost once it has built the project's connections stops
// what it built and writes no status: the bucket's next holder owns both now.
func TestReconcileThatLostItsBucketStopsWhatItBuilt(t *testing.T) {
	r, c, reg, owners, key := bucketReconciler(t)
	owners.serve.Store(2) // owns asks twice (before and under the bucket's gate); stillOwns is the third
	if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: key}); err != nil {
		t.Fatal(err)
	}
	if reg.Known(key) {
		t.Error("the registry still holds a project whose bucket was lost during its reconcile")
	}
	var got v1alpha1.ProjectMCP
	if err := c.Get(context.Background(), key, &got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Owner != nil {
		t.Errorf("status written by a replica that lost the bucket: %+v", got.Status.Owner)
	}

	owners.serve.Store(3) // kept: the status says so
	if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: key}); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(context.Background(), key, &got); err != nil {
		t.Fatal(err)
	}
	if !reg.Known(key) || got.Status.Owner == nil || got.Status.Owner.Replica != "r" {
		t.Errorf("a reconcile that kept its bucket: known %v, status.owner %+v", reg.Known(key), got.Status.Owner)
	}
}

// While its bucket's renewal is late (the bucket not served by the clock, but not lost), a
// reconcile neither builds nor stops the project: it looks again soon. Once the bucket is lost,
// the project is stopped.
func TestReconcileWaitsForALateRenewal(t *testing.T) {
	r, _, reg, owners, key := bucketReconciler(t)
	owners.serve.Store(3)
	req := reconcile.Request{NamespacedName: key}
	if _, err := r.Reconcile(context.Background(), req); err != nil || !reg.Known(key) {
		t.Fatalf("served: known %v, %v", reg.Known(key), err)
	}

	owners.keeps.Store(true) // serve is spent: Owner says no from now on
	res, err := r.Reconcile(context.Background(), req)
	if err != nil || res.RequeueAfter <= 0 {
		t.Fatalf("a reconcile during a late renewal: %+v, %v; want it to look again soon", res, err)
	}
	if !reg.Known(key) {
		t.Fatal("a reconcile during a late renewal stopped the project: nothing would build it again when the renewal succeeds")
	}

	owners.keeps.Store(false) // lost
	if _, err := r.Reconcile(context.Background(), req); err != nil || reg.Known(key) {
		t.Fatalf("a reconcile after the bucket was lost: known %v, %v", reg.Known(key), err)
	}
}
