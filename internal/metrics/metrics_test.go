package metrics

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Counting a forwarded call on a server's handle allocates nothing once its labels are
// resolved, and the handle is the same for every caller.
func TestServerHandleDoesNotAllocate(t *testing.T) {
	h := ServerOf("ns", "p", "alloc")
	if ServerOf("ns", "p", "alloc") != h {
		t.Fatal("handles must be cached")
	}
	h.ToolCall(OK, time.Millisecond)
	h.Forwarded("tools/call", OK)
	if n := testing.AllocsPerRun(100, func() {
		h := ServerOf("ns", "p", "alloc")
		h.ToolCall(OK, time.Millisecond)
		h.Forwarded("tools/call", OK)
	}); n != 0 {
		t.Fatalf("%v allocations per call", n)
	}
	if got := promtest.ToFloat64(current.Load().toolCalls.WithLabelValues("alloc", "ok")); got != 102 {
		t.Fatalf("tool calls: %v", got)
	}
	// A tool error is an answered request.
	h.Forwarded("tools/call", ToolError)
	h.Forwarded("nothing/known", Timeout)
	if got := promtest.ToFloat64(current.Load().forwarded.WithLabelValues("alloc", "tools/call", "ok")); got != 103 {
		t.Fatalf("forwarded ok: %v", got)
	}
	if got := promtest.ToFloat64(current.Load().forwarded.WithLabelValues("alloc", "other", "timeout")); got != 1 {
		t.Fatalf("forwarded other/timeout: %v", got)
	}
}

func TestStatusWriteResults(t *testing.T) {
	conflict := apierrors.NewConflict(schema.GroupResource{Resource: "projectmcps"}, "p", errors.New("changed"))
	for _, err := range []error{nil, nil, conflict, errors.New("down")} {
		if got := StatusWrite("ns", "p", err); got != err { //nolint:errorlint // StatusWrite must return the very error it is given
			t.Fatalf("StatusWrite must return its error: %v", got)
		}
	}
	for result, want := range map[string]float64{"ok": 2, "conflict": 1, "error": 1} {
		if got := promtest.ToFloat64(current.Load().statusWrites.WithLabelValues(result)); got != want {
			t.Errorf("status writes %s: %v, want %v", result, got, want)
		}
	}
}

// With project labels, series name the project, and a deleted project's series go.
func TestProjectLabels(t *testing.T) {
	Configure(true)
	defer Configure(false)
	if !current.Load().projectLabels {
		t.Fatal("Configure(true)")
	}
	ServerOf("ns", "a", "s").ToolCall(OK, time.Millisecond)
	ServerOf("ns", "b", "s").ToolCall(OK, time.Millisecond)
	Rebuilt("ns", "a", "s", ReasonDeadAtMount)
	ListChangedSent("ns", "a", "tools")
	s := current.Load()
	if got := promtest.ToFloat64(s.toolCalls.WithLabelValues("ns", "a", "s", "ok")); got != 1 {
		t.Fatalf("project a: %v", got)
	}
	if n := promtest.CollectAndCount(s.toolCalls); n != 2 {
		t.Fatalf("one series per project: %d", n)
	}
	ForgetProject("ns", "a")
	if n := promtest.CollectAndCount(s.toolCalls); n != 1 {
		t.Fatalf("the deleted project's series must go: %d left", n)
	}
	if n := promtest.CollectAndCount(s.rebuilds) + promtest.CollectAndCount(s.listChanged); n != 0 {
		t.Fatalf("the deleted project's series must go: %d left", n)
	}
	// The registry serves the new metrics, with the new labels.
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range families {
		if f.GetName() == "projectmcp_tool_calls_total" {
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					found = found || (l.GetName() == LabelProject && l.GetValue() == "b")
				}
			}
		}
	}
	if !found {
		t.Fatal("the registry must serve the project-labelled series")
	}
}

// The gauges are read from their sources at each scrape: connections by server and phase and by
// server and sharing scope, requests waiting by server, sessions by revision (both revisions, even at 0).
func TestGauges(t *testing.T) {
	SetSource(func() Counts {
		return Counts{Projects: 2, Connections: []Connection{
			{"ns", "a", "s", "Ready", "session", 3}, {"ns", "b", "s", "Ready", "", 1}, {"ns", "b", "t", "Failed", "project", 0},
		}}
	})
	SetSessions(func() []Sessions {
		return []Sessions{{"ns", "a", RevisionStateful, 2}, {"ns", "b", RevisionStateful, 1}}
	})
	defer SetSource(nil)
	defer SetSessions(nil)
	want := `
# HELP projectmcp_connections Live MCP connections, by server and phase.
# TYPE projectmcp_connections gauge
projectmcp_connections{phase="Failed",server="t"} 1
projectmcp_connections{phase="Ready",server="s"} 2
# HELP projectmcp_connections_by_share Live MCP connections, by server and sharing scope (project, principal, session, worktree).
# TYPE projectmcp_connections_by_share gauge
projectmcp_connections_by_share{server="s",share="project"} 1
projectmcp_connections_by_share{server="s",share="session"} 1
projectmcp_connections_by_share{server="t",share="project"} 1
# HELP projectmcp_projects Projects the controller holds.
# TYPE projectmcp_projects gauge
projectmcp_projects 2
# HELP projectmcp_requests_waiting Sessions' requests waiting for their turn on a connection (--max-calls-per-session, --max-calls-per-server), by server.
# TYPE projectmcp_requests_waiting gauge
projectmcp_requests_waiting{server="s"} 4
projectmcp_requests_waiting{server="t"} 0
# HELP projectmcp_sessions Agent sessions bound to projects, by protocol revision.
# TYPE projectmcp_sessions gauge
projectmcp_sessions{revision="2025-11-25"} 3
projectmcp_sessions{revision="2026-07-28"} 0
`
	if err := promtest.CollectAndCompare(current.Load().gauges, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}

// serverSeries counts the series the controller-runtime registry serves (as /metrics does)
// with a server label value that starts with prefix.
func serverSeries(t *testing.T, prefix string) (series int, names map[string]bool) {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names = map[string]bool{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "server" && strings.HasPrefix(l.GetValue(), prefix) {
					series++
					names[l.GetValue()] = true
				}
			}
		}
	}
	return series, names
}

// Without project labels, a server label's series live as long as some project has a server
// of that name: renaming servers in a loop leaves the series of the current names only, and a
// name two projects share stays until both have dropped it.
func TestServerSeriesBounded(t *testing.T) {
	count := func(ns, project, server string) {
		h := ServerOf(ns, project, server)
		h.Transition("Connecting", "Ready")
		h.Connected("ok", time.Millisecond)
		h.ToolCall(OK, time.Millisecond)
		h.Forwarded("tools/call", Error)
		h.Reconnecting()
		h.QueueWaited(time.Millisecond)
		Repointed(ns, project, server, ReasonConfigChanged)
		Rebuilt(ns, project, server, ReasonDeadAtMount)
	}
	UseServer("ns", "other", "churn-shared")
	count("ns", "other", "churn-shared")
	var perName int
	for i := range 200 {
		name := fmt.Sprintf("churn-%d", i)
		UseServer("ns", "p", name)
		count("ns", "p", name)
		if i == 0 {
			perName, _ = serverSeries(t, name)
		}
		if i > 0 {
			ForgetServer("ns", "p", fmt.Sprintf("churn-%d", i-1))
		}
	}
	// A call answered after its server went counts again; the next release drops it.
	count("ns", "p", "churn-0")
	UseServer("ns", "p", "churn-shared")
	ForgetServer("ns", "p", "churn-shared")
	series, names := serverSeries(t, "churn-")
	if len(names) != 2 || !names["churn-199"] || !names["churn-shared"] || series != 2*perName {
		t.Fatalf("want the series of churn-199 and churn-shared only (%d each), got %d series of %v", perName, series, names)
	}
	ForgetProject("ns", "p")
	ForgetProject("ns", "other")
	if series, names := serverSeries(t, "churn-"); series != 0 {
		t.Fatalf("the deleted projects' series must go: %d of %v left", series, names)
	}
	if perName != 9 {
		t.Fatalf("a name counted everywhere has a series in each of the 9 per-server metrics, got %d", perName)
	}
}
