package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/dsh-dev/projectmcp/internal/gateway/access"
	"github.com/dsh-dev/projectmcp/internal/registry"
	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// gatewayGoroutines counts the goroutines running the gateway's code (the endpoint's, the
// request path's, access's and the stream engine's) outside a request handler: what the
// gateway itself keeps per session or project. A GET stream's own goroutines (getstream.go:
// the SDK's handler, the reader where one runs) serve its request, as net/http's did before the
// stream was taken from it, and are not counted.
func gatewayGoroutines(t *testing.T) int {
	t.Helper()
	n := 0
	for _, g := range testutil.Goroutines() {
		ours := strings.Contains(g, "projectmcp/internal/gateway.") || strings.Contains(g, "projectmcp/internal/gateway/paths.") ||
			strings.Contains(g, "projectmcp/internal/httpserve.")
		if ours && !strings.Contains(g, "net/http.(*conn).serve") &&
			!strings.Contains(g, "httpserve.(*Taken).read") && !strings.Contains(g, "gateway.(*project).serveGET.func") &&
			!strings.Contains(g, "internal/gateway.gatewayGoroutines") && !strings.Contains(g, "testing.tRunner") {
			n++
		}
	}
	return n
}

// A stateful session costs the gateway no goroutine of its own (nothing waits for it to end),
// and it is released as soon as it ends: by DELETE when the client's DELETE is answered, by
// expiry, when the project's endpoint closes, and otherwise by the sweep (reapClosed).
func TestStatefulSessionsHoldNoGoroutine(t *testing.T) {
	reg := registry.New(clocktesting.NewFakeClock(time.Now()), logr.Discard())
	defer reg.Shutdown()
	key := types.NamespacedName{Namespace: "ns", Name: "p"}
	reg.SetDesired(key, registry.Desired{})
	g := New(Options{Registry: reg})
	srv := httptest.NewServer(g)
	defer func() {
		g.shutdown()
		srv.CloseClientConnections()
		srv.Close()
	}()

	base := gatewayGoroutines(t)
	const n = 20
	var sessions []*mcp.ClientSession
	for range n {
		client := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL + Path(key)},
			&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		sessions = append(sessions, cs)
		if !reg.Mounted(key, access.SessionRef(cs.ID())) {
			t.Fatalf("session %s not mounted", cs.ID())
		}
	}
	// A request the SDK still handles in a goroutine of its own (the initialized notification
	// a Connect sends last) may be running a moment longer: what a session holds stays.
	got := gatewayGoroutines(t) - base
	for deadline := time.Now().Add(2 * time.Second); got > 0 && time.Now().Before(deadline); got = gatewayGoroutines(t) - base {
		time.Sleep(10 * time.Millisecond)
	}
	if got > 0 {
		t.Errorf("%d stateful sessions hold %d goroutines of the gateway outside requests, want none", n, got)
	}

	// DELETE: released by the time the client's Close returns.
	_ = sessions[0].Close()
	if reg.Mounted(key, access.SessionRef(sessions[0].ID())) {
		t.Error("a session closed by DELETE is still mounted")
	}

	p := g.project(key)
	// Expiry closes and releases.
	p.sessions.mu.Lock()
	p.sessions.records[access.SessionRef(sessions[1].ID())].activity.last = time.Now().Add(-2 * g.opts.SessionTimeout)
	p.sessions.mu.Unlock()
	p.expireStateful(time.Now())
	if reg.Mounted(key, access.SessionRef(sessions[1].ID())) {
		t.Error("an expired session is still mounted")
	}

	// A close no path of the gateway saw is found by the sweep.
	ss := p.sessions.stateful(access.SessionRef(sessions[2].ID()))
	if ss == nil {
		t.Fatal("session 2 is not held")
	}
	_ = ss.Close()
	if !reg.Mounted(key, access.SessionRef(sessions[2].ID())) {
		t.Fatal("the test means a close the gateway does not see")
	}
	p.reapClosed()
	if reg.Mounted(key, access.SessionRef(sessions[2].ID())) {
		t.Error("a session closed behind the gateway's back is still mounted after the sweep")
	}
	if !reg.Mounted(key, access.SessionRef(sessions[3].ID())) {
		t.Error("the sweep released a live session")
	}

	// The endpoint closing (project deleted or gateway stopping) releases the rest.
	p.close()
	for _, cs := range sessions[3:] {
		if reg.Mounted(key, access.SessionRef(cs.ID())) {
			t.Errorf("session %s is still mounted after the endpoint closed", cs.ID())
		}
	}
	for _, cs := range sessions {
		_ = cs.Close()
	}
}

// The DELETE of a session the gateway does not know releases nothing and is the SDK's 404.
func TestDeleteUnknownSession(t *testing.T) {
	reg := registry.New(clocktesting.NewFakeClock(time.Now()), logr.Discard())
	defer reg.Shutdown()
	key := types.NamespacedName{Namespace: "ns", Name: "p"}
	reg.SetDesired(key, registry.Desired{})
	g := New(Options{Registry: reg})
	defer g.shutdown()
	r := httptest.NewRequest(http.MethodDelete, "http://127.0.0.1"+Path(key), nil)
	r = ownLoopback(r)
	r.Header.Set("Mcp-Session-Id", "nope")
	w := httptest.NewRecorder()
	g.ServeHTTP(w, r)
	if w.Code != http.StatusNotFound {
		t.Errorf("DELETE of an unknown session: %d, want 404", w.Code)
	}
}
