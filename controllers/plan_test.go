package controllers

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/registry"
)

func TestPlan(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	ready := func(hash string, tools int, since time.Duration) registry.ServerState {
		return registry.ServerState{HasConn: true, Hash: hash, Conn: conn.Snapshot{
			Phase: v1alpha1.PhaseReady, RawToolCount: tools, ReadySince: now.Add(-since)}}
	}
	failed := func(hash string, ago time.Duration) registry.ServerState {
		return registry.ServerState{HasConn: true, Hash: hash, Conn: conn.Snapshot{
			Phase: v1alpha1.PhaseFailed, FailedAt: now.Add(-ago)}}
	}
	with := func(s registry.ServerState, f func(*registry.ServerState)) registry.ServerState { f(&s); return s }
	one := map[string]string{"a": "h1"}

	cases := map[string]struct {
		desired  Desired
		observed map[string]registry.ServerState
		want     []Action
	}{
		"nothing to do": {
			desired: Desired{}, observed: nil, want: nil,
		},
		"create a new server": {
			desired: Desired{Servers: one},
			want:    []Action{{ActionCreate, "a", "new server"}},
		},
		"create when a mount bound a slot before the first connection": {
			desired:  Desired{Servers: one},
			observed: map[string]registry.ServerState{"a": {Refs: 1, LastMount: now}},
			want:     []Action{{ActionCreate, "a", "new server"}},
		},
		"keep a healthy connection": {
			desired:  Desired{Servers: one},
			observed: map[string]registry.ServerState{"a": ready("h1", 3, time.Minute)},
		},
		"keep a connection still connecting": {
			desired: Desired{Servers: one},
			observed: map[string]registry.ServerState{"a": {HasConn: true, Hash: "h1",
				Conn: conn.Snapshot{Phase: v1alpha1.PhaseConnecting}}},
		},
		"keep a disconnected connection (it reconnects by itself)": {
			desired: Desired{Servers: one},
			observed: map[string]registry.ServerState{"a": {HasConn: true, Hash: "h1", LastMount: now,
				Conn: conn.Snapshot{Phase: v1alpha1.PhaseDisconnected}}},
		},
		"repoint on a config change": {
			desired:  Desired{Servers: one},
			observed: map[string]registry.ServerState{"a": ready("h0", 3, time.Minute)},
			want:     []Action{{ActionRepoint, "a", "config changed"}},
		},
		"repoint a dead connection whose config changed": {
			desired:  Desired{Servers: one},
			observed: map[string]registry.ServerState{"a": failed("h0", time.Minute)},
			want:     []Action{{ActionRepoint, "a", "config changed"}},
		},
		"retire a removed server": {
			desired:  Desired{Servers: map[string]string{}},
			observed: map[string]registry.ServerState{"a": ready("h1", 3, time.Minute)},
			want:     []Action{{ActionRetire, "a", "removed or disabled"}},
		},
		"retire a dead removed server": {
			desired:  Desired{},
			observed: map[string]registry.ServerState{"a": failed("h1", time.Minute)},
			want:     []Action{{ActionRetire, "a", "removed or disabled"}},
		},
		"retire an idle entry of a removed server": {
			desired:  Desired{},
			observed: map[string]registry.ServerState{"a": {Reclaimed: true}},
			want:     []Action{{ActionRetire, "a", "removed or disabled"}},
		},
		"failed and not demanded stays failed": {
			desired:  Desired{Servers: one},
			observed: map[string]registry.ServerState{"a": failed("h1", time.Minute)},
		},
		"failed and mounted before the failure stays failed": {
			desired: Desired{Servers: one},
			observed: map[string]registry.ServerState{"a": with(failed("h1", time.Minute), func(s *registry.ServerState) {
				s.LastMount = now.Add(-2 * time.Minute)
			})},
		},
		"failed then mounted is left to the mount (it rebuilds inside the mount)": {
			desired: Desired{Servers: one},
			observed: map[string]registry.ServerState{"a": with(failed("h1", time.Minute), func(s *registry.ServerState) {
				s.LastMount = now
			})},
		},
		"zero tools for longer than 5s is left to the mount": {
			desired: Desired{Servers: one},
			observed: map[string]registry.ServerState{"a": with(ready("h1", 0, 6*time.Second), func(s *registry.ServerState) {
				s.LastMount = now
			})},
		},
		"reconnect request rebuilds even a healthy connection": {
			desired:  Desired{Servers: one, Reconnect: map[string]bool{"a": true}},
			observed: map[string]registry.ServerState{"a": ready("h1", 3, time.Minute)},
			want:     []Action{{ActionRebuild, "a", "reconnect requested"}},
		},
		"reconnect request rebuilds a failed connection": {
			desired:  Desired{Servers: one, Reconnect: map[string]bool{"a": true}},
			observed: map[string]registry.ServerState{"a": failed("h1", time.Minute)},
			want:     []Action{{ActionRebuild, "a", "reconnect requested"}},
		},
		"reconnect request for another server leaves this one": {
			desired:  Desired{Servers: map[string]string{"a": "h1", "b": "h2"}, Reconnect: map[string]bool{"b": true}},
			observed: map[string]registry.ServerState{"a": failed("h1", time.Minute), "b": ready("h2", 1, time.Minute)},
			want:     []Action{{ActionRebuild, "b", "reconnect requested"}},
		},
		"idle-reclaimed and unused stays idle": {
			desired:  Desired{Servers: one},
			observed: map[string]registry.ServerState{"a": {Reclaimed: true, Hash: "h1"}},
		},
		"idle-reclaimed with a new config stays idle": {
			desired:  Desired{Servers: one},
			observed: map[string]registry.ServerState{"a": {Reclaimed: true, Hash: "h0"}},
		},
		"idle-reclaimed and mounted is created": {
			desired:  Desired{Servers: one},
			observed: map[string]registry.ServerState{"a": {Reclaimed: true, Hash: "h1", Refs: 1, LastMount: now}},
			want:     []Action{{ActionCreate, "a", "demanded after idle reclaim"}},
		},
		"idle-reclaimed with idleTimeout 0 is created": {
			desired:  Desired{Servers: one, AlwaysDemanded: true},
			observed: map[string]registry.ServerState{"a": {Reclaimed: true, Hash: "h1"}},
			want:     []Action{{ActionCreate, "a", "demanded after idle reclaim"}},
		},
		"several servers, sorted": {
			desired: Desired{Servers: map[string]string{"c": "h3", "b": "h2", "a": "h1"}},
			observed: map[string]registry.ServerState{
				"a": ready("h1", 1, time.Minute), "b": ready("old", 1, time.Minute), "z": ready("hz", 1, time.Minute),
			},
			want: []Action{
				{ActionRepoint, "b", "config changed"},
				{ActionCreate, "c", "new server"},
				{ActionRetire, "z", "removed or disabled"},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Plan(tc.desired, tc.observed)
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Fatalf("plan mismatch (-want +got):\n%s", d)
			}
		})
	}
}

func TestConfigHash(t *testing.T) {
	base := v1alpha1.MCPServer{Name: "a", Stdio: &v1alpha1.StdioServer{Command: "x", Args: []string{"1"}}}
	h := ConfigHash(base)
	renamed, disabled := base, base
	renamed.Name, disabled.Disabled = "b", true
	if ConfigHash(renamed) != h || ConfigHash(disabled) != h {
		t.Fatal("name and disabled must not change the hash")
	}
	changed := base
	changed.Stdio = &v1alpha1.StdioServer{Command: "x", Args: []string{"2"}}
	filtered := base
	filtered.Tools = &v1alpha1.ToolFilter{Deny: []string{"x"}}
	if ConfigHash(changed) == h || ConfigHash(filtered) == h {
		t.Fatal("args and the tool filter must change the hash")
	}
}

func TestReconnectRequest(t *testing.T) {
	enabled := map[string]string{"a": "1", "b": "2"}
	obj := func(token, servers string) *v1alpha1.ProjectMCP {
		o := &v1alpha1.ProjectMCP{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{}}}
		if token != "" {
			o.Annotations[v1alpha1.AnnotationReconnectRequestedAt] = token
		}
		if servers != "" {
			o.Annotations[v1alpha1.AnnotationReconnectServers] = servers
		}
		return o
	}
	cases := map[string]struct {
		obj     *v1alpha1.ProjectMCP
		handled string
		want    map[string]bool
	}{
		"no annotation":      {obj("", ""), "", nil},
		"already handled":    {obj("t1", ""), "t1", nil},
		"all servers":        {obj("t2", ""), "t1", map[string]bool{"a": true, "b": true}},
		"named server":       {obj("t2", " b ,"), "t1", map[string]bool{"b": true}},
		"unknown server":     {obj("t2", "zz"), "", map[string]bool{}},
		"first request ever": {obj("t1", "a"), "", map[string]bool{"a": true}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if d := cmp.Diff(tc.want, reconnectRequest(tc.obj, enabled, tc.handled)); d != "" {
				t.Fatal(d)
			}
		})
	}
}

// The token carried out last is the one remembered, for the same project (UID) only; status
// is the record where nothing is remembered.
func TestHandledReconnects(t *testing.T) {
	obj := func(uid, requested, inStatus string) *v1alpha1.ProjectMCP {
		return &v1alpha1.ProjectMCP{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: types.UID(uid),
				Annotations: map[string]string{v1alpha1.AnnotationReconnectRequestedAt: requested}},
			Status: v1alpha1.ProjectMCPStatus{LastHandledReconnectAt: inStatus},
		}
	}
	var h handledReconnects
	if got := h.handled(obj("u1", "t2", "t1")); got != "t1" {
		t.Fatalf("nothing remembered: %q, want status's t1", got)
	}
	if got := h.carriedOut(obj("u1", "t2", "t1")); got != "t2" {
		t.Fatalf("carriedOut returned %q", got)
	}
	if got := h.handled(obj("u1", "t2", "t1")); got != "t2" {
		t.Fatalf("a failed status write must not forget t2: %q", got)
	}
	if got := h.handled(obj("u2", "t2", "")); got != "" {
		t.Fatalf("a project created again under the name starts from its status: %q", got)
	}
	h.forget(types.NamespacedName{Namespace: "ns", Name: "p"})
	if got := h.handled(obj("u1", "t2", "t1")); got != "t1" {
		t.Fatalf("forgotten: %q, want status's t1", got)
	}
}

// A server asking for roots with no session involved gets the project's folder, when it is a
// path within --project-root-base.
func TestProjectRoots(t *testing.T) {
	for _, c := range []struct {
		project, base, want string
	}{
		{"/home/me/shop", "", "file:///home/me/shop"},
		{"https://github.com/x/y", "", ""}, // a repository URL is no root
		{"shop", "", ""},
		{"/work/shop", "/work", "file:///work/shop"},
		{"/work", "/work", "file:///work"},
		{"/work/a/../shop", "/work/", "file:///work/a/../shop"},
		{"/", "/work", ""},
		{"/workshop", "/work", ""},
		{"/work/../etc", "/work", ""},
		{"/var/run/secrets", "/work", ""},
		// The chart's and config/default's base, under which no project lies: no roots at all.
		{"/", "/nonexistent", ""},
		{"/home/me/shop", "/nonexistent", ""},
		{"/nonexistent/../etc", "/nonexistent", ""},
	} {
		got := projectRoots(c.project, c.base)
		switch {
		case c.want == "" && got != nil:
			t.Errorf("projectRoots(%q, %q) = %+v, want none", c.project, c.base, got[0])
		case c.want != "" && (len(got) != 1 || got[0].URI != c.want):
			t.Errorf("projectRoots(%q, %q) = %+v, want %s", c.project, c.base, got, c.want)
		}
	}
}

// A failing reconcile is retried at least every maxRetryDelay, however often it failed (status
// catches up within seconds of an API server's return).
func TestRetryLimiterCapped(t *testing.T) {
	l := retryLimiter()
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "p"}}
	var last time.Duration
	for range 50 {
		last = l.When(req)
	}
	if last != maxRetryDelay {
		t.Fatalf("after 50 failures the delay is %s, want %s", last, maxRetryDelay)
	}
}

// A wake-up of the registry waits behind an edit that came after it: an edit changes what
// sessions are offered, a wake-up only brings status up to date.
func TestWakeUpsQueueBehindEdits(t *testing.T) {
	q := priorityqueue.New[reconcile.Request]("wake-ups-test")
	defer q.ShutDown()
	woken := &v1alpha1.ProjectMCP{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "woken"}}
	wakeUps().Generic(context.Background(), event.GenericEvent{Object: woken}, q)
	edited := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "edited"}}
	q.Add(edited) // the priority controller-runtime gives an update that changed the object
	deadline := time.Now().Add(10 * time.Second)
	for q.Len() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("queue length %d, want 2", q.Len())
		}
		time.Sleep(time.Millisecond)
	}
	first, priority, _ := q.GetWithPriority()
	if first != edited || priority != 0 {
		t.Fatalf("first out: %v at priority %d, want the edit at 0", first, priority)
	}
	second, priority, _ := q.GetWithPriority()
	if second.Name != "woken" || priority != wakeUpPriority {
		t.Fatalf("second out: %v at priority %d, want the wake-up at %d", second, priority, wakeUpPriority)
	}
}

// A keyed server (share principal, session) is given what its connections are built from
// once, and then only repointed or rebuilt: sessions' mounts make its connections, so none is
// created for want of one, whatever the idle timeout.
func TestPlanKeyed(t *testing.T) {
	keyedState := func(configured bool, hash string, conns, refs int) registry.ServerState {
		return registry.ServerState{Scope: v1alpha1.ShareSession, Configured: configured, Hash: hash,
			Connections: conns, Refs: refs, Reclaimed: configured && conns == 0}
	}
	one := map[string]string{"a": "h1"}
	cases := map[string]struct {
		desired  Desired
		observed registry.ServerState
		want     []Action
	}{
		"a mount bound a slot before the server was configured": {
			desired: Desired{Servers: one}, observed: keyedState(false, "", 0, 1),
			want: []Action{{ActionCreate, "a", "new server"}},
		},
		"no session, no connection, nothing to do": {
			desired: Desired{Servers: one, AlwaysDemanded: true}, observed: keyedState(true, "h1", 0, 0),
		},
		"slots without connections (past a bound): nothing to do": {
			desired: Desired{Servers: one}, observed: keyedState(true, "h1", 0, 3),
		},
		"config changed: repoint them all": {
			desired: Desired{Servers: one}, observed: keyedState(true, "h0", 2, 2),
			want: []Action{{ActionRepoint, "a", "config changed"}},
		},
		"reconnect requested": {
			desired: Desired{Servers: one, Reconnect: map[string]bool{"a": true}}, observed: keyedState(true, "h1", 2, 2),
			want: []Action{{ActionRebuild, "a", "reconnect requested"}},
		},
		"removed: retire": {
			desired: Desired{}, observed: keyedState(true, "h1", 2, 2),
			want: []Action{{ActionRetire, "a", "removed or disabled"}},
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			got := Plan(c.desired, map[string]registry.ServerState{"a": c.observed})
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Fatalf("plan (-want +got):\n%s", diff)
			}
		})
	}
}
