package controllers

import (
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/registry"
)

// buildStatus and its conditions, as a table: spec and observation in, status out.
func TestBuildStatus(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	echo := []*mcp.Tool{{Name: "echo", InputSchema: map[string]any{"type": "object"}}}
	srv := func(name string) v1alpha1.MCPServer {
		return v1alpha1.MCPServer{Name: name, Stdio: &v1alpha1.StdioServer{Command: "x"}}
	}
	ready := func(tools []*mcp.Tool, since time.Duration) registry.ServerState {
		return registry.ServerState{HasConn: true, Conn: conn.Snapshot{ID: "c1", Phase: v1alpha1.PhaseReady,
			Tools: tools, RawToolCount: len(tools), ReadySince: now.Add(-since), EverReady: true}}
	}
	phase := func(p v1alpha1.ServerPhase) registry.ServerState {
		return registry.ServerState{HasConn: true, Conn: conn.Snapshot{ID: "c1", Phase: p, LastError: "boom"}}
	}
	type want struct {
		ready, degraded metav1.ConditionStatus
		reason          string
		readyServers    string
		tools           int32
		phases          map[string]v1alpha1.ServerPhase
		message         map[string]string // substring of a server's message
	}
	cases := map[string]struct {
		servers []v1alpha1.MCPServer
		obs     map[string]registry.ServerState
		want    want
	}{
		"no servers is ready": {
			want: want{ready: "True", degraded: "False", reason: v1alpha1.ReasonNoServers, readyServers: "0/0"},
		},
		"every server ready": {
			servers: []v1alpha1.MCPServer{srv("a"), srv("b")},
			obs:     map[string]registry.ServerState{"a": ready(echo, time.Minute), "b": ready(echo, time.Minute)},
			want: want{ready: "True", degraded: "False", reason: v1alpha1.ReasonAllServersReady, readyServers: "2/2", tools: 2,
				phases: map[string]v1alpha1.ServerPhase{"a": v1alpha1.PhaseReady, "b": v1alpha1.PhaseReady}},
		},
		"a server not created yet is connecting": {
			servers: []v1alpha1.MCPServer{srv("a"), srv("b")},
			obs:     map[string]registry.ServerState{"a": ready(echo, time.Minute)},
			want: want{ready: "False", degraded: "False", reason: v1alpha1.ReasonServersConnecting, readyServers: "1/2", tools: 1,
				phases: map[string]v1alpha1.ServerPhase{"b": v1alpha1.PhaseConnecting}},
		},
		"a failed server degrades the project": {
			servers: []v1alpha1.MCPServer{srv("a"), srv("b")},
			obs:     map[string]registry.ServerState{"a": ready(echo, time.Minute), "b": phase(v1alpha1.PhaseFailed)},
			want: want{ready: "False", degraded: "True", reason: v1alpha1.ReasonServersUnavailable, readyServers: "1/2", tools: 1,
				phases: map[string]v1alpha1.ServerPhase{"b": v1alpha1.PhaseFailed}},
		},
		"a disconnected server keeps its tools listed": {
			servers: []v1alpha1.MCPServer{srv("a")},
			obs: map[string]registry.ServerState{"a": {HasConn: true, Conn: conn.Snapshot{ID: "c1",
				Phase: v1alpha1.PhaseDisconnected, Tools: echo, RawToolCount: 1, EverReady: true}}},
			want: want{ready: "False", degraded: "True", reason: v1alpha1.ReasonServersUnavailable, readyServers: "0/1", tools: 1},
		},
		"nothing offered for more than 5 s is dead, not healthy": {
			servers: []v1alpha1.MCPServer{srv("a")},
			obs:     map[string]registry.ServerState{"a": ready(nil, conn.DeadAfter+time.Second)},
			want: want{ready: "False", degraded: "True", reason: v1alpha1.ReasonServersWithoutTools, readyServers: "1/1",
				message: map[string]string{"a": "dead"}},
		},
		"resources and no tools for more than 5 s is healthy": {
			servers: []v1alpha1.MCPServer{srv("a")},
			obs: map[string]registry.ServerState{"a": {HasConn: true, Conn: conn.Snapshot{ID: "c1", Phase: v1alpha1.PhaseReady,
				Resources: []*mcp.Resource{{URI: "docs://readme", Name: "readme"}}, ReadySince: now.Add(-time.Hour), EverReady: true}}},
			want: want{ready: "True", degraded: "False", reason: v1alpha1.ReasonAllServersReady, readyServers: "1/1",
				message: map[string]string{"a": "the server lists no tools"}},
		},
		"prompts and no tools for more than 5 s is healthy": {
			servers: []v1alpha1.MCPServer{srv("a")},
			obs: map[string]registry.ServerState{"a": {HasConn: true, Conn: conn.Snapshot{ID: "c1", Phase: v1alpha1.PhaseReady,
				Prompts: []*mcp.Prompt{{Name: "greet"}}, ReadySince: now.Add(-time.Hour), EverReady: true}}},
			want: want{ready: "True", degraded: "False", reason: v1alpha1.ReasonAllServersReady, readyServers: "1/1"},
		},
		"nothing offered for less than 5 s is not dead yet": {
			servers: []v1alpha1.MCPServer{srv("a")},
			obs:     map[string]registry.ServerState{"a": ready(nil, time.Second)},
			want: want{ready: "True", degraded: "False", reason: v1alpha1.ReasonAllServersReady, readyServers: "1/1",
				message: map[string]string{"a": "lists no tools"}},
		},
		"a tool left out for a bound is named, and the server stays healthy": {
			servers: []v1alpha1.MCPServer{srv("a"), srv("b")},
			obs: map[string]registry.ServerState{
				"a": {HasConn: true, Conn: conn.Snapshot{ID: "c1", Phase: v1alpha1.PhaseReady, Tools: echo, RawToolCount: 2,
					OmittedTools: 1, Notes: []string{`left out 1 tool(s) ... "wide"`}, ReadySince: now.Add(-time.Minute), EverReady: true}},
				"b": {HasConn: true, Conn: conn.Snapshot{ID: "c2", Phase: v1alpha1.PhaseReady, RawToolCount: 3,
					OmittedTools: 1, Notes: []string{`left out 1 tool(s) ... "huge"`}, ReadySince: now.Add(-time.Minute), EverReady: true}},
			},
			want: want{ready: "True", degraded: "False", reason: v1alpha1.ReasonAllServersReady, readyServers: "2/2", tools: 1,
				message: map[string]string{"a": `"wide"`, "b": `"huge"; the tools filter hides the other 2 tools`}},
		},
		"texts Claude Code cuts are named, and the server stays healthy": {
			servers: []v1alpha1.MCPServer{srv("a"), srv("b")},
			obs: map[string]registry.ServerState{
				"a": {HasConn: true, Conn: conn.Snapshot{ID: "c1", Phase: v1alpha1.PhaseReady, RawToolCount: 1, Instructions: strings.Repeat("i", 2049),
					Tools:      []*mcp.Tool{{Name: "long", Description: strings.Repeat("d", 4096), InputSchema: map[string]any{"type": "object"}}},
					ReadySince: now.Add(-time.Minute), EverReady: true}},
				"b": {HasConn: true, Conn: conn.Snapshot{ID: "c2", Phase: v1alpha1.PhaseReady, RawToolCount: 1, Instructions: strings.Repeat("i", 2048),
					Tools: echo, ReadySince: now.Add(-time.Minute), EverReady: true}},
			},
			want: want{ready: "True", degraded: "False", reason: v1alpha1.ReasonAllServersReady, readyServers: "2/2", tools: 2,
				message: map[string]string{"a": `tool "long": a description of 4096 bytes, over the 2048 (2 KB) Claude Code keeps: ` +
					`Claude Code cuts the rest (served whole here); instructions of 2049 bytes`}},
		},
		"disabled and idle servers": {
			servers: []v1alpha1.MCPServer{srv("a"), {Name: "off", Disabled: true, Stdio: &v1alpha1.StdioServer{Command: "x"}}},
			obs:     map[string]registry.ServerState{"a": {Reclaimed: true}},
			want: want{ready: "True", degraded: "False", reason: v1alpha1.ReasonAllServersReady, readyServers: "0/1",
				phases: map[string]v1alpha1.ServerPhase{"a": v1alpha1.PhaseIdle, "off": v1alpha1.PhaseDisabled}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			obj := &v1alpha1.ProjectMCP{Spec: v1alpha1.ProjectMCPSpec{Servers: tc.servers}}
			st := buildStatus(obj, registry.Observation{Servers: tc.obs}, "http://e", 0, now)
			rc := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionReady)
			dc := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionDegraded)
			if rc.Status != tc.want.ready || rc.Reason != tc.want.reason || dc.Status != tc.want.degraded {
				t.Errorf("Ready %s/%s, Degraded %s; want %s/%s, %s", rc.Status, rc.Reason, dc.Status, tc.want.ready, tc.want.reason, tc.want.degraded)
			}
			if st.ReadyServers != tc.want.readyServers || st.ToolCount != tc.want.tools {
				t.Errorf("readyServers %q tools %d; want %q %d", st.ReadyServers, st.ToolCount, tc.want.readyServers, tc.want.tools)
			}
			for _, s := range st.Servers {
				if p, ok := tc.want.phases[s.Name]; ok && s.Phase != p {
					t.Errorf("server %s phase %s, want %s", s.Name, s.Phase, p)
				}
				if m, ok := tc.want.message[s.Name]; ok && !strings.Contains(s.Message, m) {
					t.Errorf("server %s message %q, want it to contain %q", s.Name, s.Message, m)
				}
			}
		})
	}
}

// Status keeps what must survive from the previous one and records a rebuild at mount.
func TestBuildStatusKeepsAndRecords(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	earlier := metav1.NewTime(now.Add(-time.Hour))
	obj := &v1alpha1.ProjectMCP{
		Spec: v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{{Name: "a", Stdio: &v1alpha1.StdioServer{Command: "x"}}}},
		Status: v1alpha1.ProjectMCPStatus{LastHandledReconnectAt: "tok",
			Servers: []v1alpha1.ServerStatus{{Name: "a", Phase: v1alpha1.PhaseReady, LastTransitionTime: &earlier}},
			Conditions: []metav1.Condition{
				{Type: v1alpha1.ConditionConfigSynced, Status: metav1.ConditionTrue, LastTransitionTime: earlier},
				{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonAllServersReady, LastTransitionTime: earlier},
			}},
	}
	obs := registry.Observation{Servers: map[string]registry.ServerState{"a": {HasConn: true,
		Conn:        conn.Snapshot{ID: "c2", Phase: v1alpha1.PhaseReady, RawToolCount: 1, ReadySince: now},
		LastRebuild: registry.Rebuild{At: now, Reason: registry.RebuildDeadAtMount, Connection: "c2", Previous: "failed: boom"}}}}
	st := buildStatus(obj, obs, "", 0, now)
	s := st.Servers[0]
	if !s.LastTransitionTime.Equal(&earlier) {
		t.Errorf("an unchanged phase keeps its transition time: %v", s.LastTransitionTime)
	}
	if st.LastHandledReconnectAt != "tok" {
		t.Errorf("the handled reconnect token must survive")
	}
	if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionReady); c == nil || !c.LastTransitionTime.Equal(&earlier) {
		t.Errorf("an unchanged Ready keeps its transition time: %+v", c)
	}
	if c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionConfigSynced); c != nil || len(st.Conditions) != 3 {
		t.Errorf("the mirror's condition is not the reconciler's to apply: %+v", st.Conditions)
	}
	if rb := s.LastRebuild; rb == nil || rb.Reason != v1alpha1.RebuildReasonDeadAtMount || rb.Connection != "c2" || rb.Message != "failed: boom" {
		t.Errorf("lastRebuild: %+v", rb)
	}
}

// nextDeadline is when a Ready server offering nothing turns dead; one offering only resources
// never does.
func TestNextDeadline(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	obs := registry.Observation{Servers: map[string]registry.ServerState{
		"empty": {HasConn: true, Conn: conn.Snapshot{Phase: v1alpha1.PhaseReady, ReadySince: now.Add(-2 * time.Second)}},
		"full":  {HasConn: true, Conn: conn.Snapshot{Phase: v1alpha1.PhaseReady, RawToolCount: 3, ReadySince: now}},
		"docs":  {HasConn: true, Conn: conn.Snapshot{Phase: v1alpha1.PhaseReady, Resources: []*mcp.Resource{{URI: "docs://a"}}, ReadySince: now.Add(-4 * time.Second)}},
	}}
	if got := nextDeadline(obs, now); got != conn.DeadAfter-2*time.Second {
		t.Fatalf("nextDeadline = %s", got)
	}
	delete(obs.Servers, "empty")
	if got := nextDeadline(obs, now); got != 0 {
		t.Fatalf("nothing pending: %s", got)
	}
}

// A session's client name reaches status without control characters, bidirectional overrides
// or invalid UTF-8, and within maxClientName bytes whole characters.
func TestPrintableClient(t *testing.T) {
	long := strings.Repeat("é", 100) // 200 bytes
	for in, want := range map[string]string{
		"":                                  "",
		"claude-code/2.1.0":                 "claude-code/2.1.0",
		"\x1b]0;owned\x07agent\x1b[2J/1.0":  "]0;ownedagent[2J/1.0",
		"two\nlines\r\ttab\x7f":             "twolinestab",
		"c1\u009b31m \u202eexe.txt \u2066x": "c131m exe.txt x",
		"bad \xff\xfe utf8":                 "bad  utf8",
		long:                                strings.Repeat("é", 64),
	} {
		if got := printableClient(in); got != want {
			t.Errorf("printableClient(%q) = %q, want %q", in, got, want)
		}
	}
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	obs := registry.Observation{Sessions: []registry.SessionState{{ID: "s-1", Client: "\x1b]0;owned\x07a/1", BoundAt: now}}}
	if got := buildStatus(&v1alpha1.ProjectMCP{}, obs, "", 0, now).Sessions[0].Client; got != "]0;owneda/1" {
		t.Errorf("status keeps the client %q", got)
	}
}

// Status names each server's scope and counts its connections and the project's; a keyed
// slot names its connection by id and the label of its key, never by a principal or session.
func TestBuildStatusShare(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	obj := &v1alpha1.ProjectMCP{Spec: v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{
		{Name: "a", Stdio: &v1alpha1.StdioServer{Command: "x"}},
		{Name: "pw", Stdio: &v1alpha1.StdioServer{Command: "npx", Args: []string{"@playwright/mcp@latest"}}},
		{Name: "p", Share: v1alpha1.SharePrincipal, Stdio: &v1alpha1.StdioServer{Command: "y"}},
	}}}
	ready := conn.Snapshot{ID: "c1", Phase: v1alpha1.PhaseReady, RawToolCount: 1, ReadySince: now}
	obs := registry.Observation{
		Servers: map[string]registry.ServerState{
			"a":  {HasConn: true, Conn: ready, Connections: 1, Scope: v1alpha1.ShareProject},
			"pw": {HasConn: true, Conn: ready, Connections: 3, Scope: v1alpha1.ShareSession},
			"p":  {Reclaimed: true, Configured: true, Scope: v1alpha1.SharePrincipal},
		},
		Sessions: []registry.SessionState{{ID: "s-1", BoundAt: now, Slots: []registry.SlotState{
			{Server: "a", Connection: "c1"}, {Server: "pw", Connection: "c2", Label: "0123456789ab"}, {Server: "p", Label: "ba9876543210", Refused: true},
		}}},
	}
	st := buildStatus(obj, obs, "", 0, now)
	want := map[string]struct {
		share v1alpha1.Share
		conns int32
		phase v1alpha1.ServerPhase
	}{"a": {v1alpha1.ShareProject, 1, v1alpha1.PhaseReady}, "pw": {v1alpha1.ShareSession, 3, v1alpha1.PhaseReady}, "p": {v1alpha1.SharePrincipal, 0, v1alpha1.PhaseIdle}}
	for _, s := range st.Servers {
		if w := want[s.Name]; s.Share != w.share || s.Connections != w.conns || s.Phase != w.phase {
			t.Errorf("server %s: share %q, %d connections, %s; want %+v", s.Name, s.Share, s.Connections, s.Phase, w)
		}
	}
	if st.ConnectionCount != 4 {
		t.Errorf("connectionCount %d, want 4", st.ConnectionCount)
	}
	slots := st.Sessions[0].Slots
	if slots[0].Connection != "c1" || slots[1].Connection != "c2@0123456789ab" || slots[2].Connection != "" {
		t.Errorf("slots: %+v", slots)
	}
}

// A stdio server's sandbox, as its connection names it, is in its status.
func TestServerStatusSandbox(t *testing.T) {
	srv := v1alpha1.MCPServer{Name: "web", Stdio: &v1alpha1.StdioServer{Command: "x"}}
	o := registry.ServerState{HasConn: true, Conn: conn.Snapshot{ID: "c1", Phase: v1alpha1.PhaseReady, Sandbox: "uid 104211, pid, mount; missing: network"}}
	if got := serverStatus(srv, o, nil, nil, time.Now()).Sandbox; got != o.Conn.Sandbox {
		t.Errorf("status sandbox %q, want %q", got, o.Conn.Sandbox)
	}
}
