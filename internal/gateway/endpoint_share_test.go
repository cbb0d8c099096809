// Sharing scopes through the endpoint: a server under share session or principal gives each
// session or principal a connection of its own, and what one connection sends reaches only
// the sessions bound to it.

package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/client-go/kubernetes"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/gateway"
	"github.com/dsh-dev/projectmcp/internal/gateway/access"
	"github.com/dsh-dev/projectmcp/internal/proctest"
	"github.com/dsh-dev/projectmcp/internal/testenv/harness"
)

// pidOf is the process id of the fixture serving a session's calls to server a.
func pidOf(t *testing.T, s *mcp.ClientSession) int {
	t.Helper()
	res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "a__pids"})
	if err != nil || res.IsError {
		t.Fatalf("pids: %v %+v", err, res)
	}
	var pids struct{ PID int }
	if err := json.Unmarshal([]byte(res.Content[0].(*mcp.TextContent).Text), &pids); err != nil || pids.PID == 0 {
		t.Fatalf("pids: %v", err)
	}
	return pids.PID
}

// connectionsAre waits until status counts n connections of server a, and the project n.
func connectionsAre(n int32) func(*v1alpha1.ProjectMCP) bool {
	return func(obj *v1alpha1.ProjectMCP) bool {
		s, ok := harness.ServerStatusOf(obj, "a")
		return ok && s.Connections == n && obj.Status.ConnectionCount == n
	}
}

// Under share session two sessions get two processes; a log line and a resource update of one
// session's connection reach that session alone; the connection ends with its session, and
// status counts connections and names slots by a label, never by a session id.
func TestGatewaySessionScopeIsolation(t *testing.T) {
	ns := harness.NewNamespace(t)
	srv := harness.FixtureServer(t, "a")
	srv.Share = v1alpha1.ShareSession
	key := harness.Create(t, ns, "share-session", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{srv}})
	obj := harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	if s, _ := harness.ServerStatusOf(obj, "a"); s.Share != v1alpha1.ShareSession || s.Connections != 0 {
		t.Fatalf("before any session: share %q, %d connections", s.Share, s.Connections)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	one, two := listen(t, harness.EndpointOf(key)), listen(t, harness.EndpointOf(key))
	onePID, twoPID := pidOf(t, one.s), pidOf(t, two.s)
	if onePID == twoPID {
		t.Fatal("two sessions under share session must be served by two processes")
	}
	obj = harness.WaitStatus(t, key, 30*time.Second, "two connections", connectionsAre(2))
	for _, b := range obj.Status.Sessions {
		for _, slot := range b.Slots {
			if !strings.Contains(slot.Connection, "@") || strings.Contains(slot.Connection, b.ID) {
				t.Fatalf("a slot names its connection by id and label: %q (session %s)", slot.Connection, b.ID)
			}
		}
	}

	for _, l := range []*listener{one, two} {
		if err := l.s.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := one.s.CallTool(ctx, &mcp.CallToolParams{Name: "a__log", Arguments: map[string]any{"level": "warning", "text": "one's"}}); err != nil {
		t.Fatal(err)
	}
	if m := receive(t, "one's own log line", one.logs); m.Data != "one's" {
		t.Fatalf("log message %+v", m)
	}
	nothing(t, "another session's connection's log line", two.logs)

	const uri = "fixture://a/readme"
	for _, l := range []*listener{one, two} {
		if err := l.s.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
			t.Fatal(err)
		}
	}
	touch := func(l *listener) {
		t.Helper()
		if _, err := l.s.CallTool(ctx, &mcp.CallToolParams{Name: "a__touch_resource", Arguments: map[string]any{"uri": uri}}); err != nil {
			t.Fatal(err)
		}
	}
	// Each server learns of its subscription in the background: touch until the update arrives.
	var updated string
	for deadline := time.Now().Add(10 * time.Second); updated == "" && time.Now().Before(deadline); {
		touch(one)
		select {
		case updated = <-one.updates:
		case <-time.After(500 * time.Millisecond):
		}
	}
	if updated != uri {
		t.Fatalf("the update of one's own connection: %q", updated)
	}
	nothing(t, "an update of another session's connection, though subscribed to the same URI", two.updates)

	// The session's end ends its connection and its process; the other's stays.
	if err := two.s.Close(); err != nil {
		t.Fatal(err)
	}
	proctest.WaitGone(t, 5*time.Second, twoPID)
	if !proctest.Alive(onePID) {
		t.Fatal("another session's process must be untouched")
	}
	harness.WaitStatus(t, key, 30*time.Second, "one connection", connectionsAre(1))
	if got := pidOf(t, one.s); got != onePID {
		t.Fatalf("the remaining session reaches its own process: %d, want %d", got, onePID)
	}
}

// Under share principal two ServiceAccounts get two connections, and one ServiceAccount's two
// sessions share one.
func TestGatewayPrincipalScopeServiceAccounts(t *testing.T) {
	ns := harness.NewNamespace(t)
	srv := harness.FixtureServer(t, "a")
	srv.Share = v1alpha1.SharePrincipal
	key := harness.Create(t, ns, "share-principal", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{srv}})
	harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	tokens := saTokens(t, ns, "alice", "bob")
	cs, err := kubernetes.NewForConfig(harness.Env.Config)
	if err != nil {
		t.Fatal(err)
	}
	_, base := serveGateway(t, gateway.Options{Registry: harness.Ctl.Registry, Auth: &access.KubernetesAuth{Client: cs}})
	dial := func(sa string) *mcp.ClientSession {
		client := mcp.NewClient(&mcp.Implementation{Name: sa, Version: "1"}, nil)
		return harness.MustDial(t, client, base+gateway.Path(key), "2025-11-25", http.Header{"Authorization": {"Bearer " + tokens[sa]}})
	}
	alice1, alice2, bob := dial("alice"), dial("alice"), dial("bob")
	if a1, a2 := pidOf(t, alice1), pidOf(t, alice2); a1 != a2 {
		t.Fatalf("one ServiceAccount's sessions must share its connection: processes %d and %d", a1, a2)
	} else if b := pidOf(t, bob); b == a1 {
		t.Fatal("two ServiceAccounts must have two connections")
	}
	harness.WaitStatus(t, key, 30*time.Second, "two connections", connectionsAre(2))
}

// A session past --max-connections-per-server is served, but its calls to that server get a
// tool error naming the server, its scope and the bound, never another session's connection.
func TestGatewayConnectionBound(t *testing.T) {
	harness.Ctl.Registry.LimitConnections(1, 0)
	t.Cleanup(func() { harness.Ctl.Registry.LimitConnections(0, 0) })
	ns := harness.NewNamespace(t)
	srv := harness.FixtureServer(t, "a")
	srv.Share = v1alpha1.ShareSession
	key := harness.Create(t, ns, "share-bound", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{srv}})
	harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	first, past := listen(t, harness.EndpointOf(key)), listen(t, harness.EndpointOf(key))
	pidOf(t, first.s)
	res, err := past.s.CallTool(context.Background(), &mcp.CallToolParams{Name: "a__pids"})
	if err != nil {
		t.Fatal(err)
	}
	text := res.Content[0].(*mcp.TextContent).Text
	if !res.IsError || !strings.Contains(text, `"a"`) || !strings.Contains(text, "share: session") || !strings.Contains(text, "--max-connections-per-server") {
		t.Fatalf("a call past the bound: %q (error %v), want a tool error naming the server, scope and bound", text, res.IsError)
	}
}

// A session-scoped connection ends with its session when the session expires, stateful
// (SessionTimeout) or stateless (StatelessIdle), as it does at DELETE.
func TestGatewaySessionScopeEndsAtExpiry(t *testing.T) {
	ns := harness.NewNamespace(t)
	srv := harness.FixtureServer(t, "a")
	srv.Share = v1alpha1.ShareSession
	key := harness.Create(t, ns, "share-expiry", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{srv}})
	harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	_, base := serveGateway(t, gateway.Options{Registry: harness.Ctl.Registry, SessionTimeout: time.Second, StatelessIdle: time.Second})
	for _, revision := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(revision, func(t *testing.T) {
			client := mcp.NewClient(&mcp.Implementation{Name: "expiring", Version: "1"}, nil)
			s := harness.MustDial(t, client, base+gateway.Path(key), revision, nil)
			pid := pidOf(t, s)
			proctest.WaitGone(t, 20*time.Second, pid) // no request for a second: released, its process ended
		})
	}
}
