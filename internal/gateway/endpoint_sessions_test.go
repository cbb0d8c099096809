package gateway_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/gateway"
	"github.com/dsh-dev/projectmcp/internal/testenv/harness"
)

// The first tools/list of a new session already holds a server that was still connecting
// (within readyTimeout); a server slower than readyTimeout arrives later with list_changed.
func TestGatewayMountWaitsForReadiness(t *testing.T) {
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "ready", v1alpha1.ProjectMCPSpec{
		// A wide gap between the two: a loaded machine starts the slow server well within
		// readyTimeout, and the late one's init comes well after it (the suite's connect
		// timeout is 5 s). Had the mount waited for every server, its first list would
		// hold late__echo.
		ReadyTimeout: &metav1.Duration{Duration: 2500 * time.Millisecond},
		Servers: []v1alpha1.MCPServer{
			harness.FixtureServer(t, "slow", "--init-delay", "100ms"),
			harness.FixtureServer(t, "late", "--init-delay", "4s"),
		},
	})
	a := harness.ConnectAgent(t, key, "2025-11-25", nil)
	first := a.Tools(t)
	if !slices.Contains(first, "slow__echo") {
		t.Fatalf("the first tools/list must hold the slow server's tools: %v", first)
	}
	if slices.Contains(first, "late__echo") {
		t.Fatalf("a server slower than readyTimeout must not hold the session up: %v", first)
	}
	a.WaitTools(t, "the late server's tools", harness.Has("late__echo"))
	if got := harness.Text(a.Call(t, "late__echo", map[string]any{"text": "finally"})); got != "finally" {
		t.Fatalf("late__echo = %q", got)
	}
}

// Calls pass through unchanged both ways; config edits, retire, death and budget exhaustion
// reach the live session as list_changed; names never change.
func TestGatewayLiveSession(t *testing.T) {
	ns := harness.NewNamespace(t)
	broken := filepath.Join(t.TempDir(), "broken") // while it exists, a restarts fail
	a0 := harness.FixtureServer(t, "a", "--fail-if-exists", broken)
	key := harness.Create(t, ns, "live", v1alpha1.ProjectMCPSpec{
		Reconnect: &v1alpha1.ReconnectPolicy{MaxAttempts: ptr.To[int32](1),
			InitialBackoff: &metav1.Duration{Duration: 3 * time.Second}, MaxBackoff: &metav1.Duration{Duration: 3 * time.Second}},
		Servers: []v1alpha1.MCPServer{a0},
	})
	harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	ag := harness.ConnectAgent(t, key, "2025-11-25", nil)

	res := ag.Call(t, "a__echo", map[string]any{"text": "round trip"})
	if harness.Text(res) != "round trip" || res.IsError || res.Meta != nil {
		t.Fatalf("echo: %+v", res)
	}
	if sc, _ := res.StructuredContent.(map[string]any); sc["text"] != "round trip" {
		t.Fatalf("structuredContent must pass through: %#v", res.StructuredContent)
	}
	if res := ag.Call(t, "a__fail", map[string]any{"message": "nope"}); !res.IsError || harness.Text(res) != "nope" {
		t.Fatalf("a tool error must come back as isError: %+v", res)
	}

	// Config edit: a new server's tools arrive, the old names stay.
	harness.Update(t, key, func(o *v1alpha1.ProjectMCP) { o.Spec.Servers = append(o.Spec.Servers, harness.FixtureServer(t, "b")) })
	names := ag.WaitTools(t, "b's tools", harness.Has("b__echo"))
	if !slices.Contains(names, "a__echo") {
		t.Fatalf("a's tools must stay: %v", names)
	}
	if got := harness.Text(ag.Call(t, "b__echo", map[string]any{"text": "new"})); got != "new" {
		t.Fatalf("b__echo = %q", got)
	}
	// Upstream list_changed reaches the session.
	ag.Call(t, "a__add_tool", map[string]any{"name": "extra"})
	ag.WaitTools(t, "a's new tool", harness.Has("a__extra"))

	// Retire: b's tools go, and a call on one is an MCP error, not a crash.
	harness.Update(t, key, func(o *v1alpha1.ProjectMCP) { o.Spec.Servers = o.Spec.Servers[:1] })
	ag.WaitTools(t, "b's tools gone", harness.HasNot("b__echo"))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if res, err := ag.Session.CallTool(ctx, &mcp.CallToolParams{Name: "b__echo", Arguments: map[string]any{"text": "x"}}); err == nil && !res.IsError {
		t.Fatal("a call on a retired tool must fail")
	}

	// Kill the upstream: tools stay listed, a call fails at once naming the server.
	if err := os.WriteFile(broken, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_ = syscall.Kill(harness.ReadPIDs(t, a0).PID, syscall.SIGKILL)
	harness.WaitStatus(t, key, 10*time.Second, "Disconnected", harness.PhaseIs("a", v1alpha1.PhaseDisconnected))
	if !slices.Contains(ag.Tools(t), "a__echo") {
		t.Fatal("tools must stay listed while the server is disconnected")
	}
	start := time.Now()
	res = ag.Call(t, "a__echo", map[string]any{"text": "x"})
	if !res.IsError || !strings.Contains(harness.Text(res), `"a"`) || time.Since(start) > 2*time.Second {
		t.Fatalf("a call while disconnected must fail at once naming the server: %+v after %s", harness.Text(res), time.Since(start))
	}
	// Budget spent: the tools are withdrawn.
	ag.WaitTools(t, "a's tools withdrawn", harness.HasNot("a__echo"))
}

// DELETE releases the session's slots; two sessions share one connection (one process).
func TestGatewaySessionsShareAndRelease(t *testing.T) {
	ns := harness.NewNamespace(t)
	srv := harness.FixtureServer(t, "a")
	key := harness.Create(t, ns, "share", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{srv}})
	harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	one := harness.ConnectAgent(t, key, "2025-11-25", nil)
	two := harness.ConnectAgent(t, key, "", http.Header{gateway.SessionHeader: {"agent-two"}}) // stateless
	pid1 := harness.Text(one.Call(t, "a__pids", nil))
	pid2 := harness.Text(two.Call(t, "a__pids", nil))
	if pid1 != pid2 {
		t.Fatalf("two sessions must share one server process: %s vs %s", pid1, pid2)
	}
	obj := harness.WaitStatus(t, key, 10*time.Second, "2 sessions", func(o *v1alpha1.ProjectMCP) bool { return o.Status.SessionCount == 2 })
	s, _ := harness.ServerStatusOf(obj, "a")
	if s.Sessions != 2 {
		t.Fatalf("server a must count 2 slots: %+v", s)
	}
	// Status names both sessions by a hash, never by what names them on the wire: an id read
	// from status cannot be sent back as an Mcp-Session-Id.
	ids := []string{obj.Status.Sessions[0].ID, obj.Status.Sessions[1].ID}
	for _, id := range ids {
		if !regexp.MustCompile(`^s-[0-9a-f]{16}$`).MatchString(id) || id == one.Session.ID() || strings.Contains(id, "agent-two") {
			t.Fatalf("status must name each session by its hash, never its id: %v (session id %s)", ids, one.Session.ID())
		}
	}
	if ids[0] == ids[1] {
		t.Fatalf("two sessions, one name: %v", ids)
	}
	for _, b := range obj.Status.Sessions {
		if !strings.HasPrefix(b.Client, "test-agent/") || b.Slots[0].Connection != s.Connection {
			t.Fatalf("binding %+v", b)
		}
	}
	_ = one.Session.Close() // DELETE
	harness.WaitStatus(t, key, 10*time.Second, "1 session after DELETE", func(o *v1alpha1.ProjectMCP) bool { return o.Status.SessionCount == 1 })
	// The stateless session expires after its inactivity window (2 s in this suite).
	harness.WaitStatus(t, key, 15*time.Second, "0 sessions after stateless expiry", func(o *v1alpha1.ProjectMCP) bool { return o.Status.SessionCount == 0 })
}

// Progress notifications flow from the upstream to the session that called; one upstream
// change is one list_changed (no storms); a stateless (2026-07-28) session gets list_changed
// through subscriptions/listen.
func TestGatewayProgressAndNotifications(t *testing.T) {
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "notify", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "a")}})
	harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	obj := harness.WaitStatus(t, key, 30*time.Second, "an endpoint", func(o *v1alpha1.ProjectMCP) bool { return o.Status.Endpoint != "" })

	progress := make(chan *mcp.ProgressNotificationParams, 32)
	changed := make(chan struct{}, 32)
	client := mcp.NewClient(&mcp.Implementation{Name: "p", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) { progress <- r.Params },
		ToolListChangedHandler:      func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: obj.Status.Endpoint}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	params := &mcp.CallToolParams{Name: "a__sleep", Arguments: map[string]any{"ms": 450}}
	params.SetProgressToken("tok-1")
	if res, err := s.CallTool(ctx, params); err != nil || res.IsError {
		t.Fatalf("sleep: %v %+v", err, res)
	}
	// The client hands notifications to its handler apart from the call's result: the
	// progress is waited for, not counted the moment the result is in.
	for range 2 {
		select {
		case p := <-progress:
			if p.ProgressToken != "tok-1" {
				t.Fatalf("progress must carry the caller's token, got %v", p.ProgressToken)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("want two progress notifications relayed")
		}
	}

	stateless := harness.ConnectAgent(t, key, "", http.Header{gateway.SessionHeader: {"listener"}})
	stateless.Tools(t)
	drain(changed)
	drain(stateless.Changed)
	if res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "a__add_tool", Arguments: map[string]any{"name": "once"}}); err != nil || res.IsError {
		t.Fatalf("add_tool: %v %+v", err, res)
	}
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("no list_changed for the stateful session")
	}
	select {
	case <-stateless.Changed:
	case <-time.After(10 * time.Second):
		t.Fatal("no list_changed for the stateless session")
	}
	time.Sleep(500 * time.Millisecond)
	if n := len(changed); n != 0 {
		t.Fatalf("one upstream change must be one list_changed, got %d more", n)
	}
}

// Deleting the ProjectMCP ends its sessions and its endpoint answers 404.
func TestGatewayProjectDeleted(t *testing.T) {
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "gone", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "a")}})
	obj := harness.WaitStatus(t, key, 30*time.Second, "Ready", func(o *v1alpha1.ProjectMCP) bool { return harness.IsReady(o) && o.Status.Endpoint != "" })
	ag := harness.ConnectAgent(t, key, "2025-11-25", nil)
	ag.Tools(t)
	harness.DeleteAndWait(t, key)
	done := make(chan error, 1)
	go func() { done <- ag.Session.Wait() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the session of a deleted project must end")
	}
	resp, err := http.Post(obj.Status.Endpoint, "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("the endpoint of a deleted project answered %d", resp.StatusCode)
	}
}
