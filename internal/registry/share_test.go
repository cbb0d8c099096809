package registry

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/share"
)

func TestRefusal(t *testing.T) {
	cases := []struct {
		name                       string
		serverConns, principalConn int
		maxServer, maxPrincipal    int
		want                       string // a part of the error; "" for none
	}{
		{"under both bounds", 1, 1, 2, 2, ""},
		{"no bounds", 500, 500, 0, 0, ""},
		{"at the server's bound", 2, 0, 2, 5, "--max-connections-per-server"},
		{"at the principal's bound", 0, 5, 2, 5, "--max-connections-per-principal"},
		{"the server's bound first", 2, 5, 2, 5, "has 2 connections"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := refusal("pw", v1alpha1.ShareSession, c.serverConns, c.principalConn, c.maxServer, c.maxPrincipal)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want == "":
			case err == nil:
				t.Fatal("not refused")
			case !errors.Is(err, ErrTooManyConnections) || !strings.Contains(err.Error(), c.want) ||
				!strings.Contains(err.Error(), `"pw"`) || !strings.Contains(err.Error(), "share: session"):
				t.Fatalf("the error must name the server, the scope and the bound (%s): %v", c.want, err)
			}
		})
	}
}

func TestLeads(t *testing.T) {
	early, late := time.Unix(100, 0), time.Unix(200, 0)
	cases := []struct {
		name            string
		aOffers, bOffer bool
		aMade, bMade    time.Time
		aKey, bKey      string
		want            bool
	}{
		{"offering over not", true, false, early, late, "a", "b", true},
		{"not offering under offering", false, true, late, early, "a", "b", false},
		{"the more recent", true, true, late, early, "b", "a", true},
		{"the older", true, true, early, late, "a", "b", false},
		{"a tie: the smaller key", true, true, early, early, "a", "b", true},
	}
	for _, c := range cases {
		if got := leads(c.aOffers, c.bOffer, c.aMade, c.bMade, c.aKey, c.bKey); got != c.want {
			t.Errorf("%s: leads = %v", c.name, got)
		}
	}
}

// sharedOpts is the fixture under a sharing scope.
func sharedOpts(name string, scope v1alpha1.Share) conn.Options {
	opts := fixtureOpts(name)
	opts.Server.Share = scope
	return opts
}

// mountAs mounts a session of a principal and returns its connection to server, started.
func mountAs(t *testing.T, r *Registry, principal, session, server string) *conn.Conn {
	t.Helper()
	if _, err := r.Mount(context.Background(), key, share.Who{Principal: principal, Session: session}, "test"); err != nil {
		t.Fatal(err)
	}
	c := r.Lookup(key, session, server)
	if c == nil {
		t.Fatalf("session %s has no connection to %s", session, server)
	}
	if s := c.Snapshot(); s.Phase != v1alpha1.PhaseReady {
		t.Fatalf("the mount must wait for its own connection: %s (%s)", s.Phase, s.LastError)
	}
	return c
}

func waitDone(t *testing.T, c *conn.Conn, what string) {
	t.Helper()
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: the connection did not end", what)
	}
}

func alive(c *conn.Conn) bool {
	select {
	case <-c.Done():
		return false
	default:
		return true
	}
}

// Under share session each session has a connection of its own, made at its mount (none
// before), swapped in place by a repoint, ended at its release and, all of them, at retire.
func TestSessionScopeConnectionPerSession(t *testing.T) {
	r := New(clocktesting.NewFakeClock(time.Now()), logr.Discard())
	defer r.Shutdown()
	r.SetDesired(key, Desired{Servers: []string{"a"}, IdleTimeout: time.Minute, ReadyTimeout: 5 * time.Second,
		Scopes: map[string]v1alpha1.Share{"a": v1alpha1.ShareSession}})
	if made, ok := r.ConnectAll(key, "h1", sharedOpts("a", v1alpha1.ShareSession)); !ok || len(made) != 0 {
		t.Fatalf("no connection may be made ahead of a session: %d", len(made))
	}
	if st := r.Observe(key).Servers["a"]; st.HasConn || !st.Reclaimed || st.Scope != v1alpha1.ShareSession {
		t.Fatalf("a session-scoped server with no session is idle: %+v", st)
	}
	one := mountAs(t, r, "alice", "s1", "a")
	two := mountAs(t, r, "alice", "s2", "a")
	if one == two {
		t.Fatal("two sessions must not share a connection under share session")
	}
	obs := r.Observe(key)
	if st := obs.Servers["a"]; st.Connections != 2 || st.Refs != 2 {
		t.Fatalf("want 2 connections and 2 slots: %+v", st)
	}
	for _, s := range obs.Sessions {
		if l := s.Slots[0].Label; l == "" || strings.Contains(l, s.ID) || strings.Contains(l, "alice") {
			t.Fatalf("a slot names its connection by a label, never a session id or a principal: %q", l)
		}
	}

	// A repoint swaps every connection in place: each slot reaches a new one, the old ended first.
	made, _ := r.ConnectAll(key, "h2", sharedOpts("a", v1alpha1.ShareSession))
	if len(made) != 2 {
		t.Fatalf("a repoint rebuilds every live connection: %d", len(made))
	}
	for _, c := range made {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c.WaitStarted(ctx)
		cancel()
	}
	if alive(one) || alive(two) {
		t.Fatal("the old connections must have ended before the new ones started")
	}
	one, two = r.Lookup(key, "s1", "a"), r.Lookup(key, "s2", "a")
	if one == two || one == nil || two == nil || one.Snapshot().Phase != v1alpha1.PhaseReady {
		t.Fatalf("each slot must reach its own new connection")
	}

	r.Release(key, "s1")
	waitDone(t, one, "a released session's own connection")
	if !alive(two) || r.Lookup(key, "s2", "a") != two {
		t.Fatal("another session's connection must be untouched")
	}
	if st := r.Observe(key).Servers["a"]; st.Connections != 1 {
		t.Fatalf("want 1 connection after the release: %+v", st)
	}
	r.Retire(key, "a")
	waitDone(t, two, "retire")
}

// Under share principal the sessions of one principal share a connection and another
// principal has its own; the last release arms the idle timer, whose expiry ends it; a dead
// one is rebuilt at the next mount of its principal, the other untouched.
func TestPrincipalScopeConnectionPerPrincipal(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	r := New(clk, logr.Discard())
	defer r.Shutdown()
	r.SetDesired(key, Desired{Servers: []string{"a"}, IdleTimeout: time.Minute, ReadyTimeout: 5 * time.Second,
		Scopes: map[string]v1alpha1.Share{"a": v1alpha1.SharePrincipal}})
	opts := sharedOpts("a", v1alpha1.SharePrincipal)
	opts.Policy.MaxAttempts = 0 // a killed server fails at once
	r.ConnectAll(key, "h1", opts)
	alice := mountAs(t, r, "alice", "s1", "a")
	if mountAs(t, r, "alice", "s2", "a") != alice {
		t.Fatal("one principal's sessions must share its connection")
	}
	bob := mountAs(t, r, "bob", "s3", "a")
	if bob == alice {
		t.Fatal("two principals must not share a connection under share principal")
	}

	// Killed: rebuilt at the next mount of a session bound to it, bob's untouched.
	_ = syscall.Kill(alice.Snapshot().PID, syscall.SIGKILL)
	failed(t, clk, alice)
	rebuilt := mountAs(t, r, "alice", "s4", "a")
	if rebuilt == alice || r.Lookup(key, "s1", "a") != rebuilt {
		t.Fatal("the dead connection must be rebuilt at its principal's next mount, for all its sessions")
	}
	if r.Lookup(key, "s3", "a") != bob || !alive(bob) {
		t.Fatal("another principal's connection must be untouched")
	}

	for _, s := range []string{"s1", "s2", "s4"} {
		r.Release(key, s)
	}
	if !alive(rebuilt) {
		t.Fatal("a principal's connection stays after its sessions end, for its idle window")
	}
	clk.Step(2 * time.Minute)
	waitDone(t, rebuilt, "idle reclaim")
	if st := r.Observe(key).Servers["a"]; st.Connections != 1 || !alive(bob) {
		t.Fatalf("only the idle connection goes: %+v", st)
	}
}

// Past a bound a session is mounted with a slot and no connection: its calls get the error
// naming the server, the scope and the bound, never another key's connection.
func TestConnectionBounds(t *testing.T) {
	r := New(clocktesting.NewFakeClock(time.Now()), logr.Discard())
	defer r.Shutdown()
	r.LimitConnections(2, 1)
	scopes := map[string]v1alpha1.Share{"a": v1alpha1.ShareSession, "b": v1alpha1.ShareSession}
	r.SetDesired(key, Desired{Servers: []string{"a", "b"}, ReadyTimeout: 5 * time.Second, Scopes: scopes})
	r.ConnectAll(key, "h1", sharedOpts("a", v1alpha1.ShareSession))
	r.ConnectAll(key, "h1", sharedOpts("b", v1alpha1.ShareSession))

	expectRefused := func(session, server, bound string) {
		t.Helper()
		c, err := r.AwaitSlot(context.Background(), key, session, server)
		if c != nil || !errors.Is(err, ErrTooManyConnections) || !strings.Contains(err.Error(), bound) {
			t.Fatalf("%s on %s: want refused by %s, got %v, %v", session, server, bound, c, err)
		}
	}
	mountAs(t, r, "alice", "s1", "a") // alice's one connection: to a
	expectRefused("s1", "b", "--max-connections-per-principal")
	mountAs(t, r, "bob", "s2", "a")
	if _, err := r.Mount(context.Background(), key, share.Who{Principal: "carol", Session: "s3"}, "test"); err != nil {
		t.Fatal(err)
	}
	expectRefused("s3", "a", "--max-connections-per-server")
	if c := r.Lookup(key, "s3", "b"); c == nil {
		t.Fatal("a bound on one server leaves the others connected")
	}
	if st := r.Observe(key).Servers["a"]; st.Connections != 2 {
		t.Fatalf("want the server's bound of connections: %+v", st)
	}
}

// A server whose scope changes (a repoint to another share) ends every connection first and
// binds each session under the new scope.
func TestRescope(t *testing.T) {
	r := New(clocktesting.NewFakeClock(time.Now()), logr.Discard())
	defer r.Shutdown()
	r.SetDesired(key, Desired{Servers: []string{"a"}, ReadyTimeout: 5 * time.Second})
	shared := connectReady(t, r, "h1", fixtureOpts("a"))
	mountAs(t, r, "alice", "s1", "a")
	mountAs(t, r, "bob", "s2", "a")
	r.SetDesired(key, Desired{Servers: []string{"a"}, ReadyTimeout: 5 * time.Second,
		Scopes: map[string]v1alpha1.Share{"a": v1alpha1.ShareSession}})
	made, _ := r.ConnectAll(key, "h2", sharedOpts("a", v1alpha1.ShareSession))
	if len(made) != 2 {
		t.Fatalf("want a connection per bound session: %d", len(made))
	}
	for _, c := range made {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c.WaitStarted(ctx)
		cancel()
	}
	if alive(shared) {
		t.Fatal("the shared connection must have ended before the sessions' own started")
	}
	if one, two := r.Lookup(key, "s1", "a"), r.Lookup(key, "s2", "a"); one == two || one == nil {
		t.Fatal("each session must reach its own connection")
	}
}

func TestWorktreeRefusal(t *testing.T) {
	cases := []struct {
		scope   v1alpha1.Share
		local   bool
		refused bool
	}{
		{v1alpha1.ShareWorktree, false, true},
		{v1alpha1.ShareWorktree, true, false},
		{v1alpha1.ShareSession, false, false},
		{v1alpha1.ShareProject, false, false},
	}
	for _, c := range cases {
		err := worktreeRefusal("build", c.scope, c.local)
		if (err != nil) != c.refused {
			t.Errorf("%s, local %v: refused %v, want %v", c.scope, c.local, err, c.refused)
		}
		if err != nil && (!errors.Is(err, ErrWorktreeOutsideLocal) || !strings.Contains(err.Error(), `"build"`) || !strings.Contains(err.Error(), "share: worktree")) {
			t.Errorf("the error must name the server and the scope: %v", err)
		}
	}
}

func TestInWorktree(t *testing.T) {
	opts := fixtureOpts("build")
	key := share.Key(v1alpha1.ShareWorktree, share.Who{Root: "/src/tree-a"})
	got := inWorktree(opts, v1alpha1.ShareWorktree, key)
	if got.Server.Stdio.WorkingDir != "/src/tree-a" || len(got.Roots) != 1 || got.Roots[0].URI != "file:///src/tree-a" {
		t.Fatalf("a worktree connection starts in its folder, which is its root: %+v %v", got.Server.Stdio, got.Roots)
	}
	if opts.Server.Stdio.WorkingDir != "" {
		t.Fatal("the server's own options must be left as they were")
	}
	for name, c := range map[string]struct {
		scope v1alpha1.Share
		key   string
	}{
		"another scope":     {v1alpha1.ShareSession, share.Key(v1alpha1.ShareSession, share.Who{Session: "/x"})},
		"no folder":         {v1alpha1.ShareWorktree, share.Key(v1alpha1.ShareWorktree, share.Who{})},
		"a relative folder": {v1alpha1.ShareWorktree, share.Key(v1alpha1.ShareWorktree, share.Who{Root: "tree"})},
	} {
		if got := inWorktree(opts, c.scope, c.key); got.Server.Stdio.WorkingDir != "" || got.Roots != nil {
			t.Errorf("%s: the server's own options, got %+v", name, got.Server.Stdio)
		}
	}
}

// Outside local mode a session of a worktree server is mounted without a connection to it, and
// its calls get the error naming the server and the scope.
func TestWorktreeRefusedOutsideLocalMode(t *testing.T) {
	r := New(clocktesting.NewFakeClock(time.Now()), logr.Discard())
	defer r.Shutdown()
	r.SetDesired(key, Desired{Servers: []string{"a"}, ReadyTimeout: 5 * time.Second, Scopes: map[string]v1alpha1.Share{"a": v1alpha1.ShareWorktree}})
	r.ConnectAll(key, "h1", sharedOpts("a", v1alpha1.ShareWorktree))
	if _, err := r.Mount(context.Background(), key, share.Who{Principal: "u", Session: "s1", Root: "/src/a"}, "test"); err != nil {
		t.Fatal(err)
	}
	if c, err := r.AwaitSlot(context.Background(), key, "s1", "a"); c != nil || !errors.Is(err, ErrWorktreeOutsideLocal) {
		t.Fatalf("want the worktree refusal, got %v, %v", c, err)
	}
	if st := r.Observe(key).Servers["a"]; st.Connections != 0 {
		t.Fatalf("no connection may be made: %+v", st)
	}
}

// In local mode a worktree server has a connection per working tree: sessions in one folder
// share it, a session in another folder has its own.
func TestWorktreeConnectionPerFolder(t *testing.T) {
	r := New(clocktesting.NewFakeClock(time.Now()), logr.Discard())
	defer r.Shutdown()
	r.ServeLocal(true)
	r.SetDesired(key, Desired{Servers: []string{"a"}, ReadyTimeout: 5 * time.Second, Scopes: map[string]v1alpha1.Share{"a": v1alpha1.ShareWorktree}})
	r.ConnectAll(key, "h1", sharedOpts("a", v1alpha1.ShareWorktree))
	treeA, treeB := t.TempDir(), t.TempDir()
	mountIn := func(session, root string) *conn.Conn {
		t.Helper()
		if _, err := r.Mount(context.Background(), key, share.Who{Principal: "u", Session: session, Root: root}, "test"); err != nil {
			t.Fatal(err)
		}
		c := r.Lookup(key, session, "a")
		if c == nil || c.Snapshot().Phase != v1alpha1.PhaseReady {
			t.Fatalf("session %s: no Ready connection", session)
		}
		return c
	}
	a1, a2, b := mountIn("s1", treeA), mountIn("s2", treeA), mountIn("s3", treeB)
	if a1 != a2 || a1 == b {
		t.Fatal("want one connection per working tree")
	}
}
