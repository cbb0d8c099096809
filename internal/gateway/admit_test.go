package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/dsh-dev/projectmcp/internal/registry"
)

// countingAuth allows everyone, and counts what it was asked.
type countingAuth struct{ asked atomic.Int32 }

func (a *countingAuth) Authorize(context.Context, *http.Request, types.NamespacedName) (string, int, string) {
	a.asked.Add(1)
	return "user:anyone/1", 0, ""
}

// A path naming no valid object is answered 404 before the Authorizer is asked: it cannot
// exist, and it must not reach the auth caches or messages.
func TestInvalidNamesNeverReachTheAuthorizer(t *testing.T) {
	reg := registry.New(clock.RealClock{}, logr.Discard())
	defer reg.Shutdown()
	a := &countingAuth{}
	g := New(Options{Registry: reg, Auth: a})
	for _, path := range []string{"/projects/NS/x/mcp", "/projects/ns/x_y/mcp", "/projects/ns/" + string(make([]byte, 300)) + "/mcp"} {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/", nil)
		r.URL.Path = path
		r.Header.Set("Authorization", "Bearer good")
		g.ServeHTTP(w, r)
		if w.Code != http.StatusNotFound {
			t.Errorf("%q: %d, want 404", path, w.Code)
		}
	}
	if n := a.asked.Load(); n != 0 {
		t.Fatalf("invalid names asked the Authorizer %d times", n)
	}
}
