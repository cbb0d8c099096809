package gateway

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/dsh-dev/projectmcp/internal/gateway/access"
	"github.com/dsh-dev/projectmcp/internal/registry"
	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// A per-server endpoint lives as long as its server: renamed over and over, each with a
// session on the endpoint of its name, a project keeps no endpoint of a name it lost, that
// name answers 404, and the sessions of the endpoints dropped are released from the registry,
// leaving nothing of theirs running.
func TestViewsDroppedWithTheirServer(t *testing.T) {
	const renames = 50
	reg := registry.New(clocktesting.NewFakeClock(time.Now()), logr.Discard())
	defer reg.Shutdown()
	g := New(Options{Registry: reg})
	defer g.shutdown()
	key := types.NamespacedName{Namespace: "ns", Name: "renamed"}
	reg.SetDesired(key, registry.Desired{Servers: []string{"s0"}})
	// A session of the project endpoint's own: the registry then holds an entry for each server
	// the spec names (as the reconciler's Connect would), and it must outlive every drop.
	if code, _ := initialize(g, Path(key)); code != http.StatusOK {
		t.Fatalf("initialize on the project endpoint: %d", code)
	}
	p := g.project(key)
	for i := range renames {
		name, next := fmt.Sprint("s", i), fmt.Sprint("s", i+1)
		if code, body := initialize(g, ServerPath(key, name)); code != http.StatusOK {
			t.Fatalf("initialize on %s's endpoint: %d %s", name, code, body)
		}
		reg.SetDesired(key, registry.Desired{Servers: []string{next}})
		reg.Retire(key, name) // what the reconciler does for a server that left the spec
		g.syncPending()
		if code, body := initialize(g, ServerPath(key, name)); code != http.StatusNotFound {
			t.Fatalf("rename %d: %s's endpoint answers %d %s after its server left, want 404", i, name, code, body)
		}
		if n := views(g, p); n != 0 {
			t.Fatalf("rename %d: the project keeps %d per-server endpoints, want none", i, n)
		}
	}
	if code, _ := initialize(g, ServerPath(key, "nope")); code != http.StatusNotFound {
		t.Fatalf("a name the spec never had: %d, want 404", code)
	}
	if n := len(reg.Observe(key).Sessions); n != 1 {
		t.Errorf("the registry holds %d sessions, want the project endpoint's one: the dropped endpoints' are released", n)
	}
	if n := len(slices.Collect(p.server.Sessions())); n != 1 {
		t.Errorf("the project endpoint has %d sessions, want its one", n)
	}
	// Each stateful session the SDK serves has a reader of its own: the project endpoint's one
	// is left, and none of the dropped endpoints'.
	testutil.Eventually(t, 10*time.Second, "the dropped endpoints' sessions to stop", func() bool {
		return testutil.CountStacks("go-sdk/mcp.(*streamableServerConn).Read(") == 1
	})
}

// A stateless session the project endpoint mounted, which a per-server endpoint served too,
// stays mounted when that endpoint is dropped: the project endpoint goes on serving it.
func TestDroppedViewKeepsProjectSessions(t *testing.T) {
	reg := registry.New(clocktesting.NewFakeClock(time.Now()), logr.Discard())
	defer reg.Shutdown()
	g := New(Options{Registry: reg})
	defer g.shutdown()
	key := types.NamespacedName{Namespace: "ns", Name: "shared"}
	reg.SetDesired(key, registry.Desired{Servers: []string{"a", "b"}})
	p := g.project(key)
	if err := p.mountStateless(context.Background(), "agent", access.Identity{Principal: "me"}, func() string { return "c/1" }); err != nil {
		t.Fatal(err)
	}
	v := g.view(p, "a")
	if err := v.mountStateless(context.Background(), "agent", access.Identity{Principal: "me"}, func() string { return "c/1" }); err != nil {
		t.Fatal(err)
	}
	reg.SetDesired(key, registry.Desired{Servers: []string{"b"}})
	reg.Retire(key, "a")
	g.syncPending()
	if views(g, p) != 0 {
		t.Fatal("a's endpoint was kept")
	}
	if !reg.Mounted(key, "agent") {
		t.Fatal("dropping a's endpoint released a session the project endpoint serves")
	}
}

// departed names the views whose server the project no longer has.
func TestDeparted(t *testing.T) {
	servers := map[string]int{"a": 1, "b": 2}
	for _, c := range []struct {
		views []string
		want  []string
	}{
		{nil, nil},
		{[]string{"a", "b"}, nil},
		{[]string{"a", "c"}, []string{"c"}},
		{[]string{"c", "d"}, []string{"c", "d"}},
	} {
		if got := departed(c.views, servers); !slices.Equal(got, c.want) {
			t.Errorf("departed(%v) = %v, want %v", c.views, got, c.want)
		}
	}
}

func views(g *Gateway, p *project) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(p.views)
}

// initialize starts a 2025-11-25 session on path, as a loopback caller of the controller's
// own user.
func initialize(g *Gateway, path string) (int, string) {
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	r := httptest.NewRequestWithContext(context.Background(), http.MethodPost, "http://127.0.0.1"+path, strings.NewReader(body))
	r = ownLoopback(r)
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Accept", "application/json, text/event-stream")
	w := httptest.NewRecorder()
	g.ServeHTTP(w, r)
	return w.Code, w.Body.String()
}
