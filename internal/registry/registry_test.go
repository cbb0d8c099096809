package registry

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/share"
	"github.com/dsh-dev/projectmcp/test/fixture"
)

func TestMain(m *testing.M) {
	if os.Getenv(fixture.EnvVar) != "" {
		fixture.Main()
		return
	}
	os.Exit(m.Run())
}

var key = types.NamespacedName{Namespace: "ns", Name: "p"}

func fixtureOpts(name string) conn.Options {
	return conn.Options{
		Server: v1alpha1.MCPServer{Name: name, Stdio: &v1alpha1.StdioServer{
			Command: os.Args[0], Env: []v1alpha1.NameValue{{Name: fixture.EnvVar, Value: "1"}},
		}},
		Settings: conn.Settings{ConnectTimeout: 5 * time.Second},
	}
}

// The idle timer runs on the injected clock: it starts when the last slot is released, a mount
// stops it, and at expiry the connection is destroyed and the entry marked reclaimed.
func TestIdleTimerOnInjectedClock(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	r := New(clk, logr.Discard())
	defer r.Shutdown()
	r.SetDesired(key, Desired{Servers: []string{"a"}, IdleTimeout: time.Minute, ReadyTimeout: 5 * time.Second})
	c := connectReady(t, r, "h1", fixtureOpts("a"))
	if c.Snapshot().Phase != v1alpha1.PhaseReady {
		t.Fatalf("phase %s", c.Snapshot().Phase)
	}
	if !clk.HasWaiters() {
		t.Fatal("a new connection without slots must get an idle window")
	}
	if _, err := r.Mount(context.Background(), key, share.Who{Session: "s1"}, "test"); err != nil {
		t.Fatal(err)
	}
	if clk.HasWaiters() {
		t.Fatal("a mount must stop the idle timer")
	}
	clk.Step(2 * time.Minute)
	if got := r.Lookup(key, "s1", "a"); got != c {
		t.Fatal("a connection in use must survive the idle timeout")
	}
	r.Release(key, "s1")
	if st := r.Observe(key).Servers["a"]; !st.HasConn || st.Refs != 0 {
		t.Fatalf("release must keep the connection: %+v", st)
	}
	clk.Step(59 * time.Second)
	if !r.Observe(key).Servers["a"].HasConn {
		t.Fatal("reclaimed before the idle timeout")
	}
	clk.Step(2 * time.Second)
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the idle timer did not destroy the connection")
	}
	if st := r.Observe(key).Servers["a"]; st.HasConn || !st.Reclaimed {
		t.Fatalf("want a reclaimed entry, got %+v", st)
	}
}

// Slots follow the entry: after a replacement the session's slot reaches the new connection
// with its reference, and the old connection is destroyed.
func TestConnectReplacesAndMovesSlots(t *testing.T) {
	r := New(clocktesting.NewFakeClock(time.Now()), logr.Discard())
	defer r.Shutdown()
	r.SetDesired(key, Desired{Servers: []string{"a"}, IdleTimeout: time.Minute})
	old := connectReady(t, r, "h1", fixtureOpts("a"))
	if _, err := r.Mount(context.Background(), key, share.Who{Session: "s1"}, "test"); err != nil {
		t.Fatal(err)
	}
	repl := connectReady(t, r, "h2", fixtureOpts("a"))
	select {
	case <-old.Done():
	default:
		t.Fatal("the old connection must be destroyed by the time the new one has started")
	}
	if r.Lookup(key, "s1", "a") != repl {
		t.Fatal("the slot must point at the new connection")
	}
	if st := r.Observe(key).Servers["a"]; st.Refs != 1 || st.Hash != "h2" {
		t.Fatalf("the reference must move with the slot: %+v", st)
	}
	obs := r.Observe(key)
	if len(obs.Sessions) != 1 || obs.Sessions[0].Slots[0].Connection != repl.ID() {
		t.Fatalf("status view of the slot: %+v", obs.Sessions)
	}
}

// After Shutdown nothing new is installed: a connection built by a late reconcile is destroyed.
func TestConnectAfterShutdownLeaksNothing(t *testing.T) {
	r := New(clocktesting.NewFakeClock(time.Now()), logr.Discard())
	r.Shutdown()
	if c := r.Connect(key, "h1", fixtureOpts("a")); c != nil {
		c.Destroy()
		t.Fatal("nothing may be started after Shutdown")
	}
	if _, err := r.Mount(context.Background(), key, share.Who{Session: "s1"}, "test"); err == nil {
		t.Fatal("mounting after Shutdown must fail")
	}
}

// WaitKnown returns the project's incarnation once the reconciler sets it up, and 0 when the
// caller gives up first; another project's setup does not satisfy it.
func TestWaitKnown(t *testing.T) {
	r := New(clocktesting.NewFakeClock(time.Now()), logr.Discard())
	defer r.Shutdown()
	short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if got := r.WaitKnown(short, key); got != 0 {
		t.Fatalf("an unknown project: incarnation %d, want 0", got)
	}
	got := make(chan uint64, 1)
	go func() { got <- r.WaitKnown(context.Background(), key) }()
	other := types.NamespacedName{Namespace: "ns", Name: "other"}
	r.SetDesired(other, Desired{})
	select {
	case e := <-got:
		t.Fatalf("another project's setup ended the wait (incarnation %d)", e)
	case <-time.After(50 * time.Millisecond):
	}
	r.SetDesired(key, Desired{})
	select {
	case e := <-got:
		if e == 0 || e != r.Incarnation(key) {
			t.Fatalf("incarnation %d, want %d", e, r.Incarnation(key))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("WaitKnown did not return after SetDesired")
	}
}

// connectReady connects a server of key and waits (5 s at most) for it to start.
func connectReady(t *testing.T, r *Registry, hash string, opts conn.Options) *conn.Conn {
	t.Helper()
	c := r.Connect(key, hash, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c.WaitStarted(ctx)
	return c
}

func withArgs(opts conn.Options, args ...string) conn.Options {
	stdio := *opts.Server.Stdio
	stdio.Args = append(append([]string{}, stdio.Args...), args...)
	opts.Server.Stdio = &stdio
	return opts
}

func toolNames(tools []*mcp.Tool) []string {
	var out []string
	for _, t := range tools {
		out = append(out, t.Name)
	}
	return out
}

// A repoint tears the old server down before the new one starts (a server holding an
// exclusive lock could not start otherwise); during the swap the old tools stay offered and a
// call waits for the new connection.
func TestConnectTearsDownBeforeBuild(t *testing.T) {
	r := New(clock.RealClock{}, logr.Discard())
	defer r.Shutdown()
	r.SetDesired(key, Desired{Servers: []string{"a"}, IdleTimeout: time.Minute, ReadyTimeout: 5 * time.Second})
	lock := filepath.Join(t.TempDir(), "lock")
	old := connectReady(t, r, "h1", withArgs(fixtureOpts("a"), "--lock", lock))
	before := toolNames(r.Observe(key).Servers["a"].Offered())
	// What sessions asked of the old connection is carried to the new one.
	const readme = "fixture://fixture/readme"
	if err := old.Subscribe(context.Background(), readme); err != nil {
		t.Fatal(err)
	}
	r.SetLogLevel(context.Background(), key, "info")
	if _, err := r.Mount(context.Background(), key, share.Who{Session: "s1"}, "test"); err != nil {
		t.Fatal(err)
	}
	repl := r.Connect(key, "h2", withArgs(fixtureOpts("a"), "--lock", lock, "--init-delay", "500ms"))
	select {
	case <-old.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the old connection was not torn down")
	}
	st := r.Observe(key).Servers["a"]
	if !st.Conn.Starting() {
		t.Fatalf("the new connection should still be starting (init delay): %s", st.Conn.Phase)
	}
	if got := toolNames(st.Offered()); !slices.Equal(got, before) {
		t.Fatalf("during the swap the old tools stay offered: %v, want %v", got, before)
	}
	if c := r.Await(context.Background(), key, "s1", "a"); c != repl || c.Snapshot().Phase != v1alpha1.PhaseReady {
		t.Fatalf("a call during the swap must wait for the new connection: %v", c.Snapshot().Phase)
	}
	if subs, level := repl.Subscriptions(); subs[readme] != 1 || level != "info" {
		t.Fatalf("the swap must carry subscriptions and the log level: %v %q", subs, level)
	}
	if got := toolNames(r.Observe(key).Servers["a"].Offered()); !slices.Equal(got, before) {
		t.Fatalf("after the swap the same tools: %v, want %v", got, before)
	}
}

// A second repoint while the first replacement is still starting keeps offering the tools the
// sessions saw: they never vanish because two edits came close together.
func TestSwapDuringSwapKeepsTools(t *testing.T) {
	r := New(clock.RealClock{}, logr.Discard())
	defer r.Shutdown()
	r.SetDesired(key, Desired{Servers: []string{"a"}, IdleTimeout: time.Minute, ReadyTimeout: 5 * time.Second})
	connectReady(t, r, "h1", fixtureOpts("a"))
	before := toolNames(r.Observe(key).Servers["a"].Offered())
	if len(before) == 0 {
		t.Fatal("no tools from the first connection")
	}
	slow := withArgs(fixtureOpts("a"), "--init-delay", "2s")
	r.Connect(key, "h2", slow)
	if st := r.Observe(key).Servers["a"]; !st.Conn.Starting() {
		t.Fatalf("the first replacement should still be starting: %s", st.Conn.Phase)
	}
	last := r.Connect(key, "h3", slow)
	st := r.Observe(key).Servers["a"]
	if !st.Conn.Starting() {
		t.Fatalf("the second replacement should still be starting: %s", st.Conn.Phase)
	}
	if got := toolNames(st.Offered()); !slices.Equal(got, before) {
		t.Fatalf("during the second swap the tools stay offered: %v, want %v", got, before)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	last.WaitStarted(ctx)
	if got := toolNames(r.Observe(key).Servers["a"].Offered()); !slices.Equal(got, before) {
		t.Fatalf("after the swaps the same tools: %v, want %v", got, before)
	}
}

// A mount that finds its connection dead (Ready offering nothing for more than 5 s, on the
// injected clock) rebuilds it inside the mount and records why.
func TestMountRebuildsDeadConnection(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	r := New(clk, logr.Discard())
	defer r.Shutdown()
	r.SetDesired(key, Desired{Servers: []string{"a"}, IdleTimeout: time.Minute, ReadyTimeout: 5 * time.Second})
	dead := connectReady(t, r, "h1", withArgs(fixtureOpts("a"), "--no-tools", "--offer", "tools")) // lists nothing at all
	if _, err := r.Mount(context.Background(), key, share.Who{Session: "s0"}, "test"); err != nil {
		t.Fatal(err)
	}
	if r.Lookup(key, "s0", "a") != dead {
		t.Fatal("not dead yet at 0 s: a mount must keep the connection")
	}
	clk.Step(conn.DeadAfter + time.Second)
	if _, err := r.Mount(context.Background(), key, share.Who{Session: "s1"}, "test"); err != nil {
		t.Fatal(err)
	}
	st := r.Observe(key).Servers["a"]
	if st.Conn.ID == dead.ID() || st.LastRebuild.Reason != RebuildDeadAtMount || st.LastRebuild.Connection != st.Conn.ID {
		t.Fatalf("the mount must rebuild the dead connection: %+v", st.LastRebuild)
	}
	if st.Conn.Phase != v1alpha1.PhaseReady {
		t.Fatalf("the mount must wait for the rebuilt connection: %s", st.Conn.Phase)
	}
	select {
	case <-dead.Done():
	default:
		t.Fatal("the dead connection must be destroyed")
	}
	if r.Lookup(key, "s0", "a") != r.Lookup(key, "s1", "a") {
		t.Fatal("every slot moves to the rebuilt connection")
	}
}

// The readiness wait covers a first connect attempt that fails and a retry that succeeds
// inside readyTimeout.
func TestMountWaitsThroughRetries(t *testing.T) {
	r := New(clock.RealClock{}, logr.Discard())
	defer r.Shutdown()
	r.SetDesired(key, Desired{Servers: []string{"a"}, IdleTimeout: time.Minute, ReadyTimeout: 10 * time.Second})
	broken := filepath.Join(t.TempDir(), "broken")
	if err := os.WriteFile(broken, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	opts := withArgs(fixtureOpts("a"), "--fail-if-exists", broken)
	opts.Policy = conn.Policy{MaxAttempts: 20, InitialBackoff: 100 * time.Millisecond, MaxBackoff: 200 * time.Millisecond}
	c := r.Connect(key, "h1", opts)
	for c.Snapshot().Phase != v1alpha1.PhaseDisconnected { // the first attempt has failed
		select {
		case <-c.Changed():
		case <-time.After(10 * time.Second):
			t.Fatal("the first attempt did not fail")
		}
	}
	time.AfterFunc(300*time.Millisecond, func() { _ = os.Remove(broken) })
	if _, err := r.Mount(context.Background(), key, share.Who{Session: "s1"}, "test"); err != nil {
		t.Fatal(err)
	}
	if phase := c.Snapshot().Phase; phase != v1alpha1.PhaseReady {
		t.Fatalf("the mount must wait through retries inside readyTimeout: %s", phase)
	}
}

// idleTimeout 0 never reclaims: no timer is armed, and an hour on the injected clock (far past
// the 5-minute default) leaves the connection in place.
func TestIdleTimeoutZeroNeverReclaims(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	r := New(clk, logr.Discard())
	defer r.Shutdown()
	r.SetDesired(key, Desired{Servers: []string{"a"}, IdleTimeout: 0})
	c := connectReady(t, r, "h1", fixtureOpts("a"))
	if _, err := r.Mount(context.Background(), key, share.Who{Session: "s1"}, "test"); err != nil {
		t.Fatal(err)
	}
	r.Release(key, "s1")
	if clk.HasWaiters() {
		t.Fatal("idleTimeout 0 must arm no idle timer")
	}
	clk.Step(time.Hour)
	select {
	case <-c.Done():
		t.Fatal("idleTimeout 0 must never reclaim")
	case <-time.After(100 * time.Millisecond):
	}
	if st := r.Observe(key).Servers["a"]; !st.HasConn || st.Reclaimed {
		t.Fatalf("the connection must stay: %+v", st)
	}
}

// What sessions see of a server: a Ready or Disconnected connection's tools, prompts and
// resources; the previous connection's while a new one starts; nothing from a Failed or
// absent one.
func TestOffered(t *testing.T) {
	echo := []*mcp.Tool{{Name: "echo"}}
	greet := []*mcp.Prompt{{Name: "greet"}}
	readme := []*mcp.Resource{{URI: "x://readme"}}
	state := func(phase v1alpha1.ServerPhase) ServerState {
		return ServerState{HasConn: true, Conn: conn.Snapshot{Phase: phase, Tools: echo, Prompts: greet, Resources: readme, EverReady: true}}
	}
	old := state(v1alpha1.PhaseReady).Conn
	obs := Observation{Servers: map[string]ServerState{
		"ready":    state(v1alpha1.PhaseReady),
		"down":     state(v1alpha1.PhaseDisconnected),
		"dead":     state(v1alpha1.PhaseFailed),
		"idle":     {Reclaimed: true},
		"swapping": {HasConn: true, Conn: conn.Snapshot{Phase: v1alpha1.PhaseConnecting}, Carried: &old},
		"new":      {HasConn: true, Conn: conn.Snapshot{Phase: v1alpha1.PhaseConnecting}},
	}}
	tools, prompts := obs.Tools(), obs.Prompts()
	resources, _ := obs.Resources()
	for server, want := range map[string]int{"ready": 1, "down": 1, "dead": 0, "idle": 0, "swapping": 1, "new": 0} {
		if len(tools[server]) != want || len(prompts[server]) != want || len(resources[server]) != want {
			t.Errorf("%s offers %d tools, %d prompts, %d resources; want %d each", server,
				len(tools[server]), len(prompts[server]), len(resources[server]), want)
		}
	}
}

// ObserveServers is Observe's view of the servers, without listing the sessions.
func TestObserveServers(t *testing.T) {
	r := New(clocktesting.NewFakeClock(time.Now()), logr.Discard())
	defer r.Shutdown()
	r.SetDesired(key, Desired{Servers: []string{"a"}, IdleTimeout: time.Minute})
	c := connectReady(t, r, "h1", fixtureOpts("a"))
	if _, err := r.Mount(context.Background(), key, share.Who{Session: "s1"}, "test"); err != nil {
		t.Fatal(err)
	}
	got, full := r.ObserveServers(key), r.Observe(key)
	if len(got.Sessions) != 0 || len(full.Sessions) != 1 {
		t.Fatalf("sessions: %d without, %d with", len(got.Sessions), len(full.Sessions))
	}
	st := got.Servers["a"]
	if len(got.Servers) != 1 || st.Conn.ID != c.ID() || st.Refs != 1 || st.Hash != "h1" || full.Servers["a"].Conn.ID != c.ID() {
		t.Fatalf("servers: %+v", got.Servers)
	}
	if len(r.ObserveServers(types.NamespacedName{Namespace: "ns", Name: "none"}).Servers) != 0 {
		t.Fatal("an unknown project has no servers")
	}
}

// Connect does not wait for the old connection's calls to drain: the reconcile worker that
// repoints a server is free at once, the old connection ends in the background (its call
// finishes first), the new one starts after it, and Shutdown waits for the teardown.
func TestConnectDoesNotWaitForTheDrain(t *testing.T) {
	r := New(clock.RealClock{}, logr.Discard())
	r.SetDesired(key, Desired{Servers: []string{"a"}, IdleTimeout: time.Minute, ReadyTimeout: 5 * time.Second})
	old := connectReady(t, r, "h1", fixtureOpts("a"))
	called := make(chan error, 1)
	go func() {
		res, err := old.Call(context.Background(), &mcp.CallToolParams{Name: "sleep", Arguments: map[string]any{"ms": 1000}}, nil)
		if err == nil && res.IsError {
			err = fmt.Errorf("tool error: %v", res.Content)
		}
		called <- err
	}()
	time.Sleep(200 * time.Millisecond) // the call is in flight
	start := time.Now()
	repl := r.Connect(key, "h2", fixtureOpts("a"))
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Fatalf("Connect took %s: it waited for the old connection's call", d)
	}
	if err := <-called; err != nil {
		t.Fatalf("the call in flight must finish on the old connection: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	repl.WaitStarted(ctx)
	select {
	case <-old.Done():
	default:
		t.Fatal("the new connection started before the old one ended")
	}
	r.Connect(key, "h3", fixtureOpts("a"))
	r.Shutdown()
	select {
	case <-repl.Done():
	default:
		t.Fatal("Shutdown returned before the background teardown ended")
	}
}

// Two repoints in a row while the first connection still drains a call: the last connection
// starts only after the first has ended, though the one in between never started (a server
// holding a lock would otherwise fail to start, and run twice if it did not).
func TestRepointChainNeverOverlaps(t *testing.T) {
	r := New(clock.RealClock{}, logr.Discard())
	defer r.Shutdown()
	r.SetDesired(key, Desired{Servers: []string{"a"}, IdleTimeout: time.Minute, ReadyTimeout: 5 * time.Second})
	lock := filepath.Join(t.TempDir(), "lock")
	first := connectReady(t, r, "h1", withArgs(fixtureOpts("a"), "--lock", lock))
	called := make(chan error, 1)
	go func() {
		_, err := first.Call(context.Background(), &mcp.CallToolParams{Name: "sleep", Arguments: map[string]any{"ms": 800}}, nil)
		called <- err
	}()
	time.Sleep(200 * time.Millisecond) // the call is in flight: the first connection drains it
	r.Connect(key, "h2", withArgs(fixtureOpts("a"), "--lock", lock))
	last := r.Connect(key, "h3", withArgs(fixtureOpts("a"), "--lock", lock))
	var phases []v1alpha1.ServerPhase
	deadline := time.After(15 * time.Second)
	for {
		s := last.Snapshot()
		if len(phases) == 0 || phases[len(phases)-1] != s.Phase {
			phases = append(phases, s.Phase)
		}
		if s.Phase == v1alpha1.PhaseReady {
			break
		}
		select {
		case <-last.Changed():
		case <-deadline:
			t.Fatalf("the last connection never became Ready: %v", phases)
		}
	}
	select {
	case <-first.Done():
	default:
		t.Fatal("the last connection is Ready while the first still runs")
	}
	if !slices.Equal(phases, []v1alpha1.ServerPhase{v1alpha1.PhaseConnecting, v1alpha1.PhaseReady}) {
		t.Fatalf("the last connection started before the first ended (its server failed on the lock): %v", phases)
	}
	if err := <-called; err != nil {
		t.Fatalf("the call in flight must finish on the first connection: %v", err)
	}
}

// A mounted session's request waits for the project's servers only within the session's
// mount window (its first readyTimeout since it was bound, on the injected clock), as its
// mount does; past it, or for a session not mounted, it never waits.
func TestAwaitStartedOnlyInTheMountWindow(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	r := New(clk, logr.Discard())
	defer r.Shutdown()
	r.SetDesired(key, Desired{Servers: []string{"a"}, IdleTimeout: time.Minute, ReadyTimeout: 5 * time.Second})
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := r.Mount(short, key, share.Who{Session: "s1"}, "test"); err != nil { // "a" has no connection yet
		t.Fatal(err)
	}
	within, cancelWithin := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancelWithin()
	if !r.AwaitStarted(within, key, "s1") || within.Err() == nil {
		t.Fatal("within its mount window, a request must wait for a server not started yet")
	}
	patient, cancelPatient := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelPatient()
	if r.AwaitStarted(patient, key, "nobody") || patient.Err() != nil {
		t.Fatal("a session not mounted must not wait")
	}
	clk.Step(6 * time.Second)
	if r.AwaitStarted(patient, key, "s1") || patient.Err() != nil {
		t.Fatal("past its mount window, a request must not wait")
	}
}

// A server's own log level is applied to its connection alone, and to the connection that
// replaces it; the project's level sets every server again.
func TestServerLogLevel(t *testing.T) {
	r := New(clock.RealClock{}, logr.Discard())
	defer r.Shutdown()
	r.SetDesired(key, Desired{Servers: []string{"a", "b"}, IdleTimeout: time.Minute, ReadyTimeout: 5 * time.Second})
	a, b := connectReady(t, r, "h1", fixtureOpts("a")), connectReady(t, r, "h1", fixtureOpts("b"))
	level := func(c *conn.Conn) mcp.LoggingLevel { _, l := c.Subscriptions(); return l }
	r.SetServerLogLevel(context.Background(), key, "a", "debug")
	if level(a) != "debug" || level(b) != "" {
		t.Fatalf("after a's own level: a %q, b %q; want debug and none", level(a), level(b))
	}
	a = connectReady(t, r, "h2", fixtureOpts("a"))
	if level(a) != "debug" {
		t.Fatalf("the connection that replaced a's is at %q, want its own debug", level(a))
	}
	r.SetLogLevel(context.Background(), key, "warning")
	if level(a) != "warning" || level(b) != "warning" {
		t.Fatalf("after the project's level: a %q, b %q; want warning for both", level(a), level(b))
	}
	a = connectReady(t, r, "h3", fixtureOpts("a"))
	if level(a) != "warning" {
		t.Fatalf("the project's level replaced a's own, yet a new connection of a is at %q", level(a))
	}
}
