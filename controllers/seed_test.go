package controllers_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/testenv/harness"
	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// The lifecycle contracts (docs/lifecycle-contracts.md), each pinned end to end: a real API
// server, real fixture processes, and a real MCP client through the gateway.

// assertEventAction waits for an event with the given reason and action.
func assertEventAction(t testing.TB, ns, reason, action string) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, "event "+reason+"/"+action, func() bool {
		evs := &eventsv1.EventList{}
		if err := harness.Env.Client.List(context.Background(), evs, client.InNamespace(ns)); err != nil {
			return false
		}
		return slices.ContainsFunc(evs.Items, func(e eventsv1.Event) bool { return e.Reason == reason && e.Action == action })
	})
}

// docs/lifecycle-contracts.md#the-mounts-exception: a mount that finds a Failed connection rebuilds it inside the mount and waits for it:
// the new session's first tools/list has the server's tools and a call works. Status and an
// event record the rebuild as DeadAtMount.
func TestMountRebuildsFailedServer(t *testing.T) {
	ns := harness.NewNamespace(t)
	broken := filepath.Join(t.TempDir(), "broken") // while it exists the fixture fails at start
	if err := os.WriteFile(broken, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	key := harness.Create(t, ns, "failed", v1alpha1.ProjectMCPSpec{
		Reconnect: &v1alpha1.ReconnectPolicy{MaxAttempts: ptr.To[int32](0)},
		Servers:   []v1alpha1.MCPServer{harness.FixtureServer(t, "a", "--fail-if-exists", broken)},
	})
	failed := harness.WaitStatus(t, key, 30*time.Second, "Failed", harness.PhaseIs("a", v1alpha1.PhaseFailed))
	before, _ := harness.ServerStatusOf(failed, "a")
	if err := os.Remove(broken); err != nil { // the server could come up now: nobody has asked
		t.Fatal(err)
	}

	ag := harness.ConnectAgent(t, key, "2025-11-25", nil)
	if first := ag.Tools(t); !slices.Contains(first, "a__echo") {
		t.Fatalf("the first tools/list after a rebuild-at-mount must have the server's tools: %v", first)
	}
	if got := harness.Text(ag.Call(t, "a__echo", map[string]any{"text": "rebuilt"})); got != "rebuilt" {
		t.Fatalf("call after the rebuild = %q", got)
	}
	obj := harness.WaitStatus(t, key, 10*time.Second, "lastRebuild in status", func(o *v1alpha1.ProjectMCP) bool {
		s, _ := harness.ServerStatusOf(o, "a")
		return s.Phase == v1alpha1.PhaseReady && s.LastRebuild != nil
	})
	s, _ := harness.ServerStatusOf(obj, "a")
	if s.LastRebuild.Reason != v1alpha1.RebuildReasonDeadAtMount || s.LastRebuild.Connection != s.Connection || s.Connection == before.Connection {
		t.Fatalf("status must record the rebuild at mount: %+v (connection %s, was %s)", s.LastRebuild, s.Connection, before.Connection)
	}
	assertEventAction(t, ns, v1alpha1.EventRebuilt, v1alpha1.RebuildReasonDeadAtMount)
}

// docs/lifecycle-contracts.md#the-mounts-exception: a server connected offering nothing for more than 5 s does not look healthy: Ready
// is False with reason ServersWithoutTools and the server's message says it is dead; the
// next mount rebuilds it.
func TestZeroToolsServerIsReportedDead(t *testing.T) {
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "empty", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "a", "--no-tools", "--offer", "tools")}}) // declares tools, lists nothing
	obj := harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	first, _ := harness.ServerStatusOf(obj, "a")
	obj = harness.WaitStatus(t, key, 15*time.Second, "the dead server reported", func(o *v1alpha1.ProjectMCP) bool {
		c := metaCondition(o, v1alpha1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionFalse && c.Reason == v1alpha1.ReasonServersWithoutTools
	})
	if s, _ := harness.ServerStatusOf(obj, "a"); !strings.Contains(s.Message, "dead") {
		t.Fatalf("the server's message must say it is dead: %q", s.Message)
	}
	if c := metaCondition(obj, v1alpha1.ConditionDegraded); c == nil || c.Status != metav1.ConditionTrue {
		t.Fatalf("Degraded must be True: %+v", c)
	}
	mount(t, key, "s1")
	harness.WaitStatus(t, key, 30*time.Second, "a rebuild", func(o *v1alpha1.ProjectMCP) bool {
		s, _ := harness.ServerStatusOf(o, "a")
		return s.Connection != "" && s.Connection != first.Connection && s.LastRebuild != nil
	})
}

// docs/lifecycle-contracts.md#ready-before-the-first-turn: a server whose first connect attempts fail and which comes up about a second later,
// inside readyTimeout, is in the first tools/list of a session that arrived at once.
func TestMountWaitsThroughFirstRetries(t *testing.T) {
	ns := harness.NewNamespace(t)
	broken := filepath.Join(t.TempDir(), "broken")
	if err := os.WriteFile(broken, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	key := harness.Create(t, ns, "retry", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "a", "--fail-if-exists", broken)}})
	harness.WaitStatus(t, key, 30*time.Second, "the first attempt failed", harness.PhaseIs("a", v1alpha1.PhaseDisconnected))
	time.AfterFunc(time.Second, func() { _ = os.Remove(broken) })
	ag := harness.ConnectAgent(t, key, "2025-11-25", nil)
	if first := ag.Tools(t); !slices.Contains(first, "a__echo") {
		t.Fatalf("the mount must wait through retries inside readyTimeout: %v", first)
	}
}

// docs/lifecycle-contracts.md#one-connection-per-project-and-server: repoint and rebuild (a
// reconnect request) tear the old server down before starting the new one: a server holding
// an exclusive lock, with no reconnect budget, would otherwise fail for good. A live session keeps its names, and its calls succeed across both swaps.
func TestSwapTearsDownBeforeBuild(t *testing.T) {
	ns := harness.NewNamespace(t)
	lock := filepath.Join(t.TempDir(), "lock")
	srv := harness.FixtureServer(t, "a", "--lock", lock)
	key := harness.Create(t, ns, "exclusive", v1alpha1.ProjectMCPSpec{
		Reconnect: &v1alpha1.ReconnectPolicy{MaxAttempts: ptr.To[int32](0)},
		Servers:   []v1alpha1.MCPServer{srv},
	})
	obj := harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	ag := harness.ConnectAgent(t, key, "2025-11-25", nil)
	names := ag.Tools(t)
	session := ag.Session.ID()

	swapped := func(what string, prev string) string {
		t.Helper()
		// A call right after the change lands during the swap or after it: either way it
		// must succeed (it waits for the new connection up to readyTimeout).
		if got := harness.Text(ag.Call(t, "a__echo", map[string]any{"text": what})); got != what {
			t.Fatalf("%s: call = %q", what, got)
		}
		o := harness.WaitStatus(t, key, 30*time.Second, what+": a new Ready connection", func(o *v1alpha1.ProjectMCP) bool {
			s, _ := harness.ServerStatusOf(o, "a")
			return s.Phase == v1alpha1.PhaseReady && s.Connection != prev
		})
		if got := harness.Text(ag.Call(t, "a__echo", map[string]any{"text": what + " after"})); got != what+" after" {
			t.Fatalf("%s: call on the new connection = %q", what, got)
		}
		if now := ag.Tools(t); !slices.Equal(now, names) || ag.Session.ID() != session {
			t.Fatalf("%s: names and session must not change: %v → %v", what, names, now)
		}
		s, _ := harness.ServerStatusOf(o, "a")
		return s.Connection
	}
	first, _ := harness.ServerStatusOf(obj, "a")
	harness.Update(t, key, func(o *v1alpha1.ProjectMCP) {
		o.Spec.Servers[0].Stdio.Env = append(o.Spec.Servers[0].Stdio.Env, v1alpha1.NameValue{Name: "EDITED", Value: "1"})
	})
	conn := swapped("repoint", first.Connection)
	harness.Update(t, key, func(o *v1alpha1.ProjectMCP) {
		if o.Annotations == nil {
			o.Annotations = map[string]string{}
		}
		o.Annotations[v1alpha1.AnnotationReconnectRequestedAt] = time.Now().Format(time.RFC3339Nano)
	})
	swapped("rebuild", conn)
}

// docs/lifecycle-contracts.md#ready-before-the-first-turn: readyTimeout 0 means do not wait: the first tools/list is answered without the slow
// server, whose tools arrive later with list_changed.
func TestReadyTimeoutZeroDoesNotWait(t *testing.T) {
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "nowait", v1alpha1.ProjectMCPSpec{
		ReadyTimeout: &metav1.Duration{},
		Servers:      []v1alpha1.MCPServer{harness.FixtureServer(t, "fast"), harness.FixtureServer(t, "slow", "--init-delay", "2s")},
	})
	harness.WaitStatus(t, key, 30*time.Second, "fast Ready", harness.PhaseIs("fast", v1alpha1.PhaseReady))
	ag := harness.ConnectAgent(t, key, "2025-11-25", nil)
	if first := ag.Tools(t); slices.Contains(first, "slow__echo") || !slices.Contains(first, "fast__echo") {
		t.Fatalf("readyTimeout 0 must not wait for the slow server: %v", first)
	}
	ag.WaitTools(t, "the slow server's tools", harness.Has("slow__echo"))
}

// docs/lifecycle-contracts.md#an-edit-reloads-in-place: a live session across a repoint of a
// server whose tools change keeps the same session, sees the new tool set by list_changed, and
// its unchanged names stay.
func TestLiveSessionAcrossRepoint(t *testing.T) {
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "repoint-live", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "a")}})
	harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	ag := harness.ConnectAgent(t, key, "2025-11-25", nil)
	before := ag.Tools(t)
	harness.Update(t, key, func(o *v1alpha1.ProjectMCP) {
		o.Spec.Servers[0].Stdio.Args = append(o.Spec.Servers[0].Stdio.Args, "--extra-tools", "1")
	})
	after := ag.WaitTools(t, "the repointed server's new tool", harness.Has("a__tool_000"))
	for _, name := range before {
		if !slices.Contains(after, name) {
			t.Fatalf("%s was renamed or lost across the repoint: %v", name, after)
		}
	}
	res, err := ag.Session.CallTool(context.Background(), &mcp.CallToolParams{Name: "a__echo", Arguments: map[string]any{"text": "same session"}})
	if err != nil || harness.Text(res) != "same session" {
		t.Fatalf("call on the repointed connection: %v %+v", err, res)
	}
}

func metaCondition(o *v1alpha1.ProjectMCP, typ string) *metav1.Condition {
	return meta.FindStatusCondition(o.Status.Conditions, typ)
}
