package gateway

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/buckets"
	"github.com/dsh-dev/projectmcp/internal/registry"
)

// A request waiting for its project's first reconcile stops waiting when the project's
// bucket leaves this replica, and is answered moved (the Router sends it on), not 503 at the
// end of the project's readyTimeout.
func TestAwaitEndsWhenTheProjectMoves(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	objects := fake.NewClientBuilder().WithScheme(scheme).WithObjects(&v1alpha1.ProjectMCP{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "later"},
		Spec:       v1alpha1.ProjectMCPSpec{ReadyTimeout: &metav1.Duration{Duration: time.Minute}}}).Build()
	reg := registry.New(clocktesting.NewFakeClock(time.Now()), logr.Discard())
	defer reg.Shutdown()
	var here atomic.Bool
	here.Store(true)
	g := New(Options{Registry: reg, Objects: objects, Serving: func(types.NamespacedName) (int64, bool) { return 3, here.Load() }})
	defer g.shutdown()
	time.AfterFunc(200*time.Millisecond, func() { here.Store(false) })
	r := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/projects/ns/later/mcp", strings.NewReader("{}"))
	r = ownLoopback(r)
	w := httptest.NewRecorder()
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.ServeHTTP(w, r)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the request still waits for a project this replica stopped serving")
	}
	if w.Code != http.StatusServiceUnavailable || w.Header().Get(buckets.HeaderMoved) == "" {
		t.Fatalf("%d %v %s, want 503 marked moved", w.Code, w.Header(), w.Body)
	}
}
