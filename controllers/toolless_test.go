package controllers_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/testenv/harness"
)

// docs/lifecycle-contracts.md#the-mounts-exception: a server that declares resources and not
// tools, and answers tools/list with method not found as the specification lets it, comes up
// Ready with its resources in every session's list, and a stream of new sessions past
// conn.DeadAfter never restarts it: the same connection in status all along, no rebuild, and
// the project Ready.
func TestServerWithoutToolsSurvivesNewSessions(t *testing.T) {
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "docs", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "docs", "--offer", "resources")}})
	obj := harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	first, _ := harness.ServerStatusOf(obj, "docs")
	time.Sleep(conn.DeadAfter + 500*time.Millisecond)
	for i := range 4 {
		ag := harness.ConnectAgent(t, key, "2025-11-25", nil)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		res, err := ag.Session.ListResources(ctx, nil)
		cancel()
		if err != nil || len(res.Resources) != 1 || !strings.Contains(res.Resources[0].URI, "docs/readme") {
			t.Fatalf("session %d: resources %v, %v", i, res, err)
		}
		_ = ag.Session.Close()
		time.Sleep(time.Second)
	}
	obj = harness.WaitStatus(t, key, 10*time.Second, "the status after the sessions", func(o *v1alpha1.ProjectMCP) bool {
		return o.Status.ObservedGeneration == o.Generation
	})
	s, _ := harness.ServerStatusOf(obj, "docs")
	if s.Phase != v1alpha1.PhaseReady || s.Connection != first.Connection || s.LastRebuild != nil {
		t.Fatalf("the server was restarted: %s, connection %s (was %s), lastRebuild %+v", s.Phase, s.Connection, first.Connection, s.LastRebuild)
	}
	if !harness.IsReady(obj) {
		t.Fatalf("a server of resources alone is healthy: %+v", metaCondition(obj, v1alpha1.ConditionReady))
	}
	if n := rebuiltEvents(t, ns); n != 0 {
		t.Fatalf("%d Rebuilt events", n)
	}
}

// docs/lifecycle-contracts.md#the-mounts-exception: a server that keeps failing is rebuilt by
// the first of a burst of mounts, and by no other within its reconnect backoff window (20 s
// here): one rebuild, one new connection, one Rebuilt event for ten sessions.
func TestFailingServerNotRebuiltAtEveryMount(t *testing.T) {
	ns := harness.NewNamespace(t)
	broken := filepath.Join(t.TempDir(), "broken") // while it exists the fixture fails at start
	if err := os.WriteFile(broken, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	window := &metav1.Duration{Duration: 20 * time.Second}
	key := harness.Create(t, ns, "failing", v1alpha1.ProjectMCPSpec{
		Reconnect: &v1alpha1.ReconnectPolicy{MaxAttempts: ptr.To[int32](0), InitialBackoff: window, MaxBackoff: window},
		Servers:   []v1alpha1.MCPServer{harness.FixtureServer(t, "a", "--fail-if-exists", broken)},
	})
	failed := harness.WaitStatus(t, key, 30*time.Second, "Failed", harness.PhaseIs("a", v1alpha1.PhaseFailed))
	before, _ := harness.ServerStatusOf(failed, "a")
	connections := map[string]bool{}
	for i := range 10 {
		mount(t, key, "s"+string(rune('0'+i)))
		connections[harness.Ctl.Registry.Observe(key).Servers["a"].Conn.ID] = true
	}
	if len(connections) != 1 || connections[before.Connection] {
		t.Fatalf("ten mounts within the window made %d connections, want the one the first mount rebuilt", len(connections))
	}
	obj := harness.WaitStatus(t, key, 10*time.Second, "the rebuild in status", func(o *v1alpha1.ProjectMCP) bool {
		s, _ := harness.ServerStatusOf(o, "a")
		return s.LastRebuild != nil && connections[s.LastRebuild.Connection] && s.Phase == v1alpha1.PhaseFailed
	})
	if s, _ := harness.ServerStatusOf(obj, "a"); !connections[s.Connection] {
		t.Fatalf("status shows connection %s", s.Connection)
	}
	assertEventAction(t, ns, v1alpha1.EventRebuilt, v1alpha1.RebuildReasonDeadAtMount)
	time.Sleep(time.Second) // a second event, were there one, is written by now
	if n := rebuiltEvents(t, ns); n != 1 {
		t.Fatalf("%d Rebuilt events for ten mounts, want 1", n)
	}
}

// rebuiltEvents counts the Rebuilt events of a namespace (an event recorded as a series as
// often as it was).
func rebuiltEvents(t *testing.T, ns string) int {
	t.Helper()
	evs := &eventsv1.EventList{}
	if err := harness.Env.Client.List(context.Background(), evs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range evs.Items {
		switch {
		case e.Reason != v1alpha1.EventRebuilt:
		case e.Series != nil:
			n += int(e.Series.Count)
		default:
			n++
		}
	}
	return n
}
