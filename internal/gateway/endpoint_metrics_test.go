package gateway_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/gateway"
	"github.com/dsh-dev/projectmcp/internal/metrics"
	"github.com/dsh-dev/projectmcp/internal/testenv/harness"
	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// delta is what a metric (summed over the labels given) grew by since before.
type delta struct {
	t             *testing.T
	before, after testutil.Metrics
}

func (d delta) of(name string, labels ...string) float64 {
	return d.after.Sum(name, labels...) - d.before.Sum(name, labels...)
}

// expect fails the test unless the metric grew by exactly want.
func (d delta) expect(want float64, name string, labels ...string) {
	d.t.Helper()
	if got := d.of(name, labels...); got != want {
		d.t.Errorf("%s%v grew by %v, want %v", name, labels, got, want)
	}
}

// atLeast fails the test unless the metric grew by want or more.
func (d delta) atLeast(want float64, name string, labels ...string) {
	d.t.Helper()
	if got := d.of(name, labels...); got < want {
		d.t.Errorf("%s%v grew by %v, want at least %v", name, labels, got, want)
	}
}

// eventuallyGrows waits until a metric grew by want since before.
func eventuallyGrows(t *testing.T, s *harness.Scraper, before testutil.Metrics, want float64, name string, labels ...string) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, name+strings.Join(labels, ","), func() bool {
		return delta{t, before, s.Scrape()}.of(name, labels...) >= want
	})
}

// sessionsOf is what the gateway reports of one project's sessions, by revision.
func sessionsOf(key types.NamespacedName) map[string]int {
	out := map[string]int{}
	for _, s := range harness.Ctl.Gateway.SessionCounts() {
		if s.Namespace == key.Namespace && s.Project == key.Name {
			out[s.Revision] += s.Count
		}
	}
	return out
}

// A scenario against the running controller, read back from /metrics by value: tool calls by
// outcome (the fast path and the SDK path), their durations, forwarded requests by method,
// sessions by revision, the gateway's requests by code and auth decision, list_changed
// notifications, repoints, rebuilds, reconnects, phase changes, connects and status writes.
// Other tests share the process's registry: every check is on what grew during this test,
// for a server name no other test uses.
func TestMetrics(t *testing.T) {
	ns := harness.NewNamespace(t)
	m := harness.NewScraper(t)
	start := m.Scrape()
	srv := harness.FixtureServer(t, "mx", "--protocol", "2025-11-25")
	key := harness.Create(t, ns, "metrics", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{srv}})
	harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)

	// Sessions by revision: one stateful (2025-11-25), one stateless (2026-07-28).
	stateful := harness.MustDial(t, agentClient("m1"), harness.EndpointOf(key), "2025-11-25", nil)
	stateless := harness.MustDial(t, agentClient("m2"), harness.EndpointOf(key), "", http.Header{gateway.SessionHeader: {"metrics"}})
	callOK(t, stateless, "mx__echo", map[string]any{"text": "mount"}) // a stateless session mounts at its first request
	if got := sessionsOf(key); got[metrics.RevisionStateful] != 1 || got[metrics.RevisionStateless] != 1 {
		t.Fatalf("the project's sessions by revision: %v", got)
	}
	now := m.Scrape()
	for _, rev := range []string{metrics.RevisionStateful, metrics.RevisionStateless} {
		if now.Sum("projectmcp_sessions", "revision", rev) < 1 {
			t.Errorf("projectmcp_sessions{revision=%q} = %v", rev, now.Sum("projectmcp_sessions", "revision", rev))
		}
	}
	if !now.Has("projectmcp_connections", "server", "mx", "phase", "Ready") {
		t.Error(`projectmcp_connections{server="mx",phase="Ready"} is missing`)
	}

	// The fast path: three calls and one tool error through the stateful session.
	raw := promtest.ToFloat64(metrics.FastPath.WithLabelValues("raw"))
	before := m.Scrape()
	for i := range 3 {
		callOK(t, stateful, "mx__echo", map[string]any{"text": strconv.Itoa(i)})
	}
	if res := callOK(t, stateful, "mx__fail", map[string]any{"message": "nope"}); !res.IsError {
		t.Fatal("fail must be a tool error")
	}
	// Counted once the call's answer is written, so a moment after the client has it.
	testutil.Eventually(t, 5*time.Second, "the calls to count as taking the fast path", func() bool {
		return promtest.ToFloat64(metrics.FastPath.WithLabelValues("raw"))-raw == 4
	})
	d := delta{t, before, m.Scrape()}
	d.expect(3, "projectmcp_tool_calls_total", "server", "mx", "outcome", "ok")
	d.expect(1, "projectmcp_tool_calls_total", "server", "mx", "outcome", "tool_error")
	d.expect(4, "projectmcp_tool_call_duration_seconds_count", "server", "mx")
	d.expect(4, "projectmcp_forwarded_requests_total", "server", "mx", "method", "tools/call", "result", "ok")

	// A 2026-07-28 session calling a 2025-11-25 server (bridged, on the fast path too), and a
	// prompt.
	before = d.after
	callOK(t, stateless, "mx__echo", map[string]any{"text": "sdk"})
	if res := callOK(t, stateless, "mx__fail", map[string]any{"message": "nope"}); !res.IsError {
		t.Fatal("fail must be a tool error")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := stateful.GetPrompt(ctx, &mcp.GetPromptParams{Name: "mx__greet", Arguments: map[string]string{"name": "metrics"}}); err != nil {
		t.Fatal(err)
	}
	d = delta{t, before, m.Scrape()}
	d.expect(1, "projectmcp_tool_calls_total", "server", "mx", "outcome", "ok")
	d.expect(1, "projectmcp_tool_calls_total", "server", "mx", "outcome", "tool_error")
	d.expect(2, "projectmcp_tool_call_duration_seconds_count", "server", "mx")
	d.expect(1, "projectmcp_forwarded_requests_total", "server", "mx", "method", "prompts/get", "result", "ok")
	d.expect(2, "projectmcp_tool_calls_path_total", "path", "raw")

	// A call the session gives up on is cancelled.
	before = d.after
	hctx, hcancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	if _, err := stateful.CallTool(hctx, &mcp.CallToolParams{Name: "mx__hang", Arguments: map[string]any{}}); err == nil {
		t.Fatal("a cancelled call must not succeed")
	}
	hcancel()
	eventuallyGrows(t, m, before, 1, "projectmcp_tool_calls_total", "server", "mx", "outcome", "cancelled")

	// The gateway's requests by code and auth decision.
	before = m.Scrape()
	get := func(path, host string) int {
		req, err := http.NewRequest(http.MethodGet, "http://"+harness.GatewayAddr+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if host != "" {
			req.Host = host
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := get("/projects/"+ns+"/missing/mcp", ""); code != http.StatusNotFound {
		t.Fatalf("a missing project: %d", code)
	}
	if code := get("/projects/Not_A_Namespace/x/mcp", ""); code != http.StatusNotFound {
		t.Fatalf("an invalid path: %d", code)
	}
	if code := get(gateway.Path(key), "mcp.example.com"); code != http.StatusForbidden {
		t.Fatalf("a rebinding Host: %d", code)
	}
	d = delta{t, before, m.Scrape()}
	d.expect(1, "projectmcp_gateway_requests_total", "code", "404", "auth", "local")
	d.expect(1, "projectmcp_gateway_requests_total", "code", "404", "auth", "none")
	d.expect(1, "projectmcp_gateway_requests_total", "code", "403", "auth", "denied")
	if d.after.Sum("projectmcp_gateway_requests_total", "code", "200", "auth", "local")-start.Sum("projectmcp_gateway_requests_total", "code", "200", "auth", "local") < 10 {
		t.Error("the sessions' requests must count as 200, local")
	}

	// A config edit that adds a server: sessions are told (list_changed).
	before = d.after
	harness.Update(t, key, func(o *v1alpha1.ProjectMCP) {
		o.Spec.Servers = append(o.Spec.Servers, harness.FixtureServer(t, "my", "--protocol", "2025-11-25"))
	})
	testutil.Eventually(t, 30*time.Second, "my's tools in the stateful session", func() bool {
		res, err := stateful.ListTools(ctx, nil)
		return err == nil && strings.Contains(asJSON(t, res), "my__echo")
	})
	eventuallyGrows(t, m, before, 1, "projectmcp_list_changed_sent_total", "kind", "tools")
	eventuallyGrows(t, m, before, 1, "projectmcp_list_changed_sent_total", "kind", "prompts")

	// A config edit of mx repoints it; a reconnect request rebuilds it.
	before = m.Scrape()
	harness.Update(t, key, func(o *v1alpha1.ProjectMCP) {
		o.Spec.Servers[0].Stdio.Env = append(o.Spec.Servers[0].Stdio.Env, v1alpha1.NameValue{Name: "EDITED", Value: "1"})
	})
	harness.WaitStatus(t, key, 30*time.Second, "Ready after the repoint", func(o *v1alpha1.ProjectMCP) bool {
		return harness.IsReady(o) && o.Status.ObservedGeneration == o.Generation
	})
	eventuallyGrows(t, m, before, 1, "projectmcp_repoints_total", "server", "mx", "reason", "ConfigChanged")
	stamp := time.Now().Format(time.RFC3339Nano)
	harness.Update(t, key, func(o *v1alpha1.ProjectMCP) {
		if o.Annotations == nil {
			o.Annotations = map[string]string{}
		}
		o.Annotations[v1alpha1.AnnotationReconnectRequestedAt] = stamp
		o.Annotations[v1alpha1.AnnotationReconnectServers] = "mx"
	})
	harness.WaitStatus(t, key, 30*time.Second, "the rebuild", func(o *v1alpha1.ProjectMCP) bool {
		return o.Status.LastHandledReconnectAt == stamp && harness.IsReady(o)
	})
	eventuallyGrows(t, m, before, 1, "projectmcp_rebuilds_total", "server", "mx", "reason", "ReconnectRequested")

	// A killed server reconnects.
	_ = syscall.Kill(harness.ReadPIDs(t, srv).PID, syscall.SIGKILL)
	eventuallyGrows(t, m, before, 1, "projectmcp_connection_transitions_total", "server", "mx", "from", "Disconnected", "to", "Ready")
	d = delta{t, before, m.Scrape()}
	d.expect(1, "projectmcp_repoints_total", "server", "mx")
	d.expect(1, "projectmcp_connection_transitions_total", "server", "mx", "from", "Ready", "to", "Disconnected")
	d.atLeast(1, "projectmcp_reconnect_attempts_total", "server", "mx")
	// A reconnect request is rebuilt once, or once more when a reconcile reads the object
	// from a cache that has not seen the status recording it handled (the reconciler's race,
	// not the metric's): the counts below must agree with however many there were.
	rebuilds := d.of("projectmcp_rebuilds_total", "server", "mx", "reason", "ReconnectRequested")
	if rebuilds < 1 || rebuilds != d.of("projectmcp_rebuilds_total", "server", "mx") {
		t.Errorf("rebuilds of mx: %v (by ReconnectRequested), %v in all", rebuilds, d.of("projectmcp_rebuilds_total", "server", "mx"))
	}

	// Over the whole test mx connected from scratch once for its creation, once for the
	// repoint and once per rebuild, and once more after the kill; every connect is observed.
	d = delta{t, start, d.after}
	d.expect(2+rebuilds, "projectmcp_connection_transitions_total", "server", "mx", "from", "Connecting", "to", "Ready")
	d.expect(3+rebuilds, "projectmcp_connect_duration_seconds_count", "server", "mx", "outcome", "ok")
	d.atLeast(2, "projectmcp_mount_wait_seconds_count")
	d.atLeast(1, "projectmcp_status_writes_total", "result", "ok")
}
