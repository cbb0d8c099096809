package controllers

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/registry"
)

// staleCache is the manager's cache behind the API server: Get answers an older copy.
type staleCache struct {
	client.Client
	old *v1alpha1.ProjectMCP
}

func (s staleCache) Get(_ context.Context, _ client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	s.old.DeepCopyInto(obj.(*v1alpha1.ProjectMCP))
	return nil
}

// A status write refused because the cache was behind (another status write came first: the
// controller's own last one, or the mirror's condition) is done again at once from the object
// read live, keeping what the other writer set, instead of requeueing to read the same stale
// copy again.
func TestStatusConflictWritesAgainFromLiveObject(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	key := types.NamespacedName{Namespace: "ns", Name: "p"}
	obj := &v1alpha1.ProjectMCP{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name,
		Finalizers: []string{v1alpha1.Finalizer}, Generation: 1}}
	live := fake.NewClientBuilder().WithScheme(scheme).WithObjects(obj).WithStatusSubresource(obj).Build()
	ctx := context.Background()
	stale := &v1alpha1.ProjectMCP{}
	if err := live.Get(ctx, key, stale); err != nil {
		t.Fatal(err)
	}
	other := stale.DeepCopy() // the mirror's condition, written after the cache's copy
	meta.SetStatusCondition(&other.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionConfigSynced,
		Status: metav1.ConditionTrue, Reason: "Synced", Message: "in sync"})
	if err := live.Status().Update(ctx, other); err != nil {
		t.Fatal(err)
	}
	reg := registry.New(clocktesting.NewFakeClock(time.Now()), logr.Discard())
	defer reg.Shutdown()
	r := &Reconciler{Client: staleCache{live, stale}, APIReader: live, Registry: reg, Clock: clocktesting.NewFakeClock(time.Now())}
	res, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: key})
	if err != nil || res.RequeueAfter != 0 {
		t.Fatalf("want the status written at once, got %+v, %v", res, err)
	}
	got := &v1alpha1.ProjectMCP{}
	if err := live.Get(ctx, key, got); err != nil {
		t.Fatal(err)
	}
	if !meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionReady) {
		t.Fatalf("the reconciler's status was not written: %+v", got.Status.Conditions)
	}
	if !meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionConfigSynced) {
		t.Fatalf("the other writer's condition was lost: %+v", got.Status.Conditions)
	}
}
