package conn

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/testutil"
	"github.com/dsh-dev/projectmcp/test/fixture"
)

// A server that declares resources (or prompts) and not tools is sent no request of a list it
// did not declare: the fixture, given --offer, answers those with method not found (-32601),
// as the specification lets it, so one such request would fail the connection (the listing)
// or reconnect it (a probe). It comes up Ready with what it offers, on every transport and
// revision, the SDK's typed listing (legacy SSE) and the forwarded one alike, stays Ready
// through probes and re-lists, and does not count as dead however long it offers no tool.
func TestServerWithoutToolsIsReady(t *testing.T) {
	stdio := func(args ...string) func(*testing.T) v1alpha1.MCPServer {
		return func(*testing.T) v1alpha1.MCPServer { return stdioServer("docs", args...) }
	}
	remote := func(path string, transport v1alpha1.HTTPTransport, args ...string) func(*testing.T) v1alpha1.MCPServer {
		return func(t *testing.T) v1alpha1.MCPServer {
			return v1alpha1.MCPServer{Name: "docs", HTTP: &v1alpha1.HTTPServer{URL: fixture.StartHTTP(t, args...) + path, Transport: transport}}
		}
	}
	cases := map[string]struct {
		server    func(*testing.T) v1alpha1.MCPServer
		resources bool // resources only; else prompts only
		stdio     bool // its stderr is in the connection's log
	}{
		"resources, stdio 2025-11-25":     {stdio("--offer", "resources", "--protocol", "2025-11-25"), true, true},
		"resources, stdio 2026-07-28":     {stdio("--offer", "resources"), true, true}, // probed by a list: it has no ping
		"resources, streamable stateful":  {remote("/mcp", "", "--offer", "resources"), true, false},
		"resources, streamable stateless": {remote("/mcp", "", "--offer", "resources", "--stateless"), true, false},
		"resources, legacy SSE (typed)":   {remote("/sse", v1alpha1.TransportSSE, "--offer", "resources", "--sse"), true, false},
		"prompts, stdio 2026-07-28":       {stdio("--offer", "prompts"), false, true},
		"prompts, legacy SSE (typed)":     {remote("/sse", v1alpha1.TransportSSE, "--offer", "prompts", "--sse"), false, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			logs := &logSink{}
			c := start(t, Options{Server: tc.server(t), Log: logs.logger(),
				Settings: Settings{RelistInterval: 50 * time.Millisecond, HealthInterval: 50 * time.Millisecond}})
			ready := waitFor(t, c, "Ready", func(s Snapshot) bool { return s.Phase != v1alpha1.PhaseConnecting })
			if ready.Phase != v1alpha1.PhaseReady {
				t.Fatalf("a server without tools must come up Ready: %s (%s)", ready.Phase, ready.LastError)
			}
			offered := len(ready.Resources) == 1 && len(ready.Templates) == 1 && len(ready.Prompts) == 0
			if !tc.resources {
				offered = len(ready.Prompts) == 1 && len(ready.Resources) == 0 && len(ready.Templates) == 0
			}
			if !offered || len(ready.Tools) != 0 || ready.RawToolCount != 0 {
				t.Fatalf("listed: %d tools, %d prompts, %d resources, %d templates", len(ready.Tools), len(ready.Prompts), len(ready.Resources), len(ready.Templates))
			}
			relists, probes := c.counts.relists.Load(), c.counts.probes.Load()
			// Three re-lists come within 600 ms on a quiet machine; waited for, not timed.
			testutil.Eventually(t, 10*time.Second, "three re-lists", func() bool { return c.counts.relists.Load()-relists >= 3 })
			now := c.Snapshot()
			if now.Phase != v1alpha1.PhaseReady || !now.ReadySince.Equal(ready.ReadySince) || now.ReconnectAttempts != 0 {
				t.Fatalf("after %d probes and %d re-lists the server must be Ready on the same session: %s since %s (was %s): %s",
					c.counts.probes.Load()-probes, c.counts.relists.Load()-relists, now.Phase, now.ReadySince, ready.ReadySince, now.LastError)
			}
			if now.Dead(now.ReadySince.Add(time.Hour)) {
				t.Fatal("a server that offers resources or prompts is not dead for offering no tool")
			}
			if tc.stdio && strings.Contains(logs.all(), "not declared") {
				t.Fatalf("the server was asked for a list it did not declare:\n%s", logs.all())
			}
		})
	}
}

// Dead: Failed, or Ready and offering nothing at all (no tool, prompt, resource or template,
// the tools counted before the allow/deny filter) for longer than DeadAfter. DeadAt is when
// a Ready connection that offers nothing turns dead.
func TestDead(t *testing.T) {
	since := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tool, prompt, resource, template := 1, []*mcp.Prompt{{Name: "p"}}, []*mcp.Resource{{URI: "r"}}, []*mcp.ResourceTemplate{{URITemplate: "t/{x}"}}
	ready := func(tools int, prompts []*mcp.Prompt, resources []*mcp.Resource, templates []*mcp.ResourceTemplate) Snapshot {
		return Snapshot{Phase: v1alpha1.PhaseReady, ReadySince: since, RawToolCount: tools, Prompts: prompts, Resources: resources, Templates: templates}
	}
	cases := map[string]struct {
		s      Snapshot
		after  time.Duration // since ReadySince
		dead   bool
		deadAt time.Time
	}{
		"failed":                             {Snapshot{Phase: v1alpha1.PhaseFailed}, 0, true, time.Time{}},
		"connecting":                         {Snapshot{Phase: v1alpha1.PhaseConnecting}, time.Hour, false, time.Time{}},
		"disconnected":                       {Snapshot{Phase: v1alpha1.PhaseDisconnected}, time.Hour, false, time.Time{}},
		"offering nothing, not yet":          {ready(0, nil, nil, nil), DeadAfter, false, since.Add(DeadAfter)},
		"offering nothing, past DeadAfter":   {ready(0, nil, nil, nil), DeadAfter + time.Millisecond, true, since.Add(DeadAfter)},
		"tools (even all filtered out)":      {ready(tool, nil, nil, nil), time.Hour, false, time.Time{}},
		"resources only":                     {ready(0, nil, resource, nil), time.Hour, false, time.Time{}},
		"resource templates only":            {ready(0, nil, nil, template), time.Hour, false, time.Time{}},
		"prompts only":                       {ready(0, prompt, nil, nil), time.Hour, false, time.Time{}},
		"empty lists are nothing":            {ready(0, []*mcp.Prompt{}, []*mcp.Resource{}, []*mcp.ResourceTemplate{}), time.Hour, true, since.Add(DeadAfter)},
		"everything":                         {ready(tool, prompt, resource, template), time.Hour, false, time.Time{}},
		"failed with nothing (withdrawn)":    {Snapshot{Phase: v1alpha1.PhaseFailed, ReadySince: time.Time{}}, time.Hour, true, time.Time{}},
		"disconnected offering nothing left": {Snapshot{Phase: v1alpha1.PhaseDisconnected, EverReady: true}, time.Hour, false, time.Time{}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := tc.s.Dead(since.Add(tc.after)); got != tc.dead {
				t.Errorf("Dead = %v, want %v", got, tc.dead)
			}
			if got := tc.s.DeadAt(); !got.Equal(tc.deadAt) {
				t.Errorf("DeadAt = %v, want %v", got, tc.deadAt)
			}
		})
	}
}

// The lists asked for are the ones declared at initialize; the probe of a 2026-07-28 session,
// which has no ping, is the first of them, and none when it declares none.
func TestDeclaredListsAndProbe(t *testing.T) {
	tools, prompts, resources := &mcp.ToolCapabilities{}, &mcp.PromptCapabilities{}, &mcp.ResourceCapabilities{}
	cases := map[string]struct {
		caps   *mcp.ServerCapabilities
		lists  []Kind
		newest string // the probe on 2026-07-28
	}{
		"nothing said":   {nil, nil, ""},
		"no list":        {&mcp.ServerCapabilities{Logging: &mcp.LoggingCapabilities{}}, nil, ""},
		"tools":          {&mcp.ServerCapabilities{Tools: tools}, []Kind{KindTool}, "tools/list"},
		"prompts":        {&mcp.ServerCapabilities{Prompts: prompts}, []Kind{KindPrompt}, "prompts/list"},
		"resources":      {&mcp.ServerCapabilities{Resources: resources}, []Kind{KindResource, KindTemplate}, "resources/list"},
		"all three":      {&mcp.ServerCapabilities{Tools: tools, Prompts: prompts, Resources: resources}, []Kind{KindTool, KindPrompt, KindResource, KindTemplate}, "tools/list"},
		"prompts, files": {&mcp.ServerCapabilities{Prompts: prompts, Resources: resources}, []Kind{KindPrompt, KindResource, KindTemplate}, "prompts/list"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := declared(tc.caps); !slices.Equal(got, tc.lists) {
				t.Errorf("declared = %v, want %v", got, tc.lists)
			}
			if got := probeMethod(tc.caps, true); got != tc.newest {
				t.Errorf("the 2026-07-28 probe = %q, want %q", got, tc.newest)
			}
			if got := probeMethod(tc.caps, false); got != "ping" {
				t.Errorf("the 2025-11-25 probe = %q, want ping", got)
			}
		})
	}
}
