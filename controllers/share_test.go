package controllers_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/testenv"
	"github.com/dsh-dev/projectmcp/internal/testenv/harness"
)

// sharedStatefulIs waits for SharedStatefulServer's status, its message holding say.
func sharedStatefulIs(status metav1.ConditionStatus, say string) func(*v1alpha1.ProjectMCP) bool {
	return func(o *v1alpha1.ProjectMCP) bool {
		c := meta.FindStatusCondition(o.Status.Conditions, v1alpha1.ConditionSharedStatefulServer)
		return c != nil && c.Status == status && strings.Contains(c.Message, say)
	}
}

// A server the stateful table knows (the fixture named serena, as Serena's command line names
// it), explicitly shared per project, raises SharedStatefulServer naming it once a second
// session is bound to it, and the condition falls when that session ends.
func TestSharedStatefulServerCondition(t *testing.T) {
	ns := harness.NewNamespace(t)
	serena := harness.FixtureServer(t, "serena")
	serena.Share = v1alpha1.ShareProject
	key := harness.Create(t, ns, "stateful", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{serena}})
	harness.WaitStatus(t, key, 30*time.Second, "serena Ready, SharedStatefulServer False", func(o *v1alpha1.ProjectMCP) bool {
		return harness.PhaseIs("serena", v1alpha1.PhaseReady)(o) && sharedStatefulIs(metav1.ConditionFalse, "")(o)
	})

	harness.ConnectAgent(t, key, "2025-11-25", nil)
	harness.WaitStatus(t, key, 30*time.Second, "one session bound, the condition still False", func(o *v1alpha1.ProjectMCP) bool {
		s, _ := harness.ServerStatusOf(o, "serena")
		return s.Sessions == 1 && sharedStatefulIs(metav1.ConditionFalse, "")(o)
	})
	second := harness.ConnectAgent(t, key, "2025-11-25", nil)
	harness.WaitStatus(t, key, 30*time.Second, "SharedStatefulServer True naming serena", sharedStatefulIs(metav1.ConditionTrue, `server "serena" (serena) is shared by 2 sessions`))

	if err := second.Session.Close(); err != nil {
		t.Fatal(err)
	}
	harness.WaitStatus(t, key, 30*time.Second, "SharedStatefulServer False once one session is left", sharedStatefulIs(metav1.ConditionFalse, ""))
}

// thought is what the npm server-sequential-thinking answers a thought with.
type thought struct {
	ThoughtHistoryLength int `json:"thoughtHistoryLength"`
}

// think sends one first thought through a session and returns the length of the history the
// server holds after it.
func think(t *testing.T, ag *harness.Agent, text string) int {
	t.Helper()
	res := ag.Call(t, "think__sequentialthinking", map[string]any{"thought": text, "nextThoughtNeeded": true, "thoughtNumber": 1, "totalThoughts": 2})
	var got thought
	if err := json.Unmarshal([]byte(harness.Text(res)), &got); err != nil {
		t.Fatalf("sequentialthinking answered %q: %v", harness.Text(res), err)
	}
	return got.ThoughtHistoryLength
}

// thinkingSessions serves the npm server-sequential-thinking under a scope to two sessions,
// each sending its first thought, alice's first: it returns the length of the history each
// thought found, and the project. Two sessions on one process give 1 and 2; a scope that gives
// each session its own process, 1 and 1.
func thinkingSessions(t *testing.T, scope v1alpha1.Share) (alice, bob int, key types.NamespacedName) {
	t.Helper()
	srv := v1alpha1.MCPServer{Name: "think", Share: scope, Stdio: testenv.SequentialThinking(t)}
	key = harness.Create(t, harness.NewNamespace(t), "thinking", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{srv}})
	// Shared per project, the server starts at once; per session, at each session's mount.
	harness.WaitStatus(t, key, time.Minute, "think Ready, or Idle until a session needs it", func(o *v1alpha1.ProjectMCP) bool {
		return harness.PhaseIs("think", v1alpha1.PhaseReady)(o) || harness.PhaseIs("think", v1alpha1.PhaseIdle)(o)
	})
	a := harness.ConnectAgent(t, key, "2025-11-25", nil)
	b := harness.ConnectAgent(t, key, "2025-11-25", nil)
	return think(t, a, "alice's first thought"), think(t, b, "bob's first thought"), key
}

// The problem a sharing scope solves, shown with a real stateful server: the npm
// server-sequential-thinking shared per project is one process, one client of it, so two
// sessions' thoughts land in one history (bob's first thought finds alice's there), and
// status warns that the server is shared.
func TestSequentialThinkingSharedPerProject(t *testing.T) {
	alice, bob, key := thinkingSessions(t, v1alpha1.ShareProject)
	if alice != 1 || bob != 2 {
		t.Fatalf("histories of %d and %d, want 1 and 2: alice's thought and bob's in one process", alice, bob)
	}
	harness.WaitStatus(t, key, 30*time.Second, "SharedStatefulServer True naming think",
		sharedStatefulIs(metav1.ConditionTrue, `server "think" (server-sequential-thinking) is shared by 2 sessions`))
}

// The same two sessions with the server shared per session: each has a process of its own,
// so each first thought finds a history of one, status counts two connections and nothing
// warns.
func TestSequentialThinkingPerSession(t *testing.T) {
	alice, bob, key := thinkingSessions(t, v1alpha1.ShareSession)
	if alice != 1 || bob != 1 {
		t.Fatalf("histories of %d and %d, want 1 and 1: each session's thought in its own process", alice, bob)
	}
	harness.WaitStatus(t, key, 30*time.Second, "two connections, SharedStatefulServer False", func(o *v1alpha1.ProjectMCP) bool {
		s, _ := harness.ServerStatusOf(o, "think")
		return s.Share == v1alpha1.ShareSession && s.Connections == 2 && sharedStatefulIs(metav1.ConditionFalse, "")(o)
	})
}
