package registry

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/conn"
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
		ConnectTimeout: 5 * time.Second,
	}
}

// The idle timer runs on the injected clock: it starts when the last slot is released, a mount
// stops it, and at expiry the connection is destroyed and the entry marked reclaimed.
func TestIdleTimerOnInjectedClock(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	r := New(clk, logr.Discard())
	defer r.Shutdown()
	r.SetDesired(key, Desired{Servers: []string{"a"}, IdleTimeout: time.Minute, ReadyTimeout: 5 * time.Second})
	c := r.Connect(context.Background(), key, "h1", fixtureOpts("a"), 5*time.Second)
	if c.Snapshot().Phase != v1alpha1.PhaseReady {
		t.Fatalf("phase %s", c.Snapshot().Phase)
	}
	if !clk.HasWaiters() {
		t.Fatal("a new connection without slots must get an idle window")
	}
	if _, err := r.Mount(context.Background(), key, "s1", "test"); err != nil {
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
	old := r.Connect(context.Background(), key, "h1", fixtureOpts("a"), 5*time.Second)
	if _, err := r.Mount(context.Background(), key, "s1", "test"); err != nil {
		t.Fatal(err)
	}
	repl := r.Connect(context.Background(), key, "h2", fixtureOpts("a"), 5*time.Second)
	select {
	case <-old.Done():
	default:
		t.Fatal("the old connection must be destroyed by the time Connect returns")
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
	c := r.Connect(context.Background(), key, "h1", fixtureOpts("a"), 0)
	select {
	case <-c.Done():
	default:
		t.Fatal("a connection built after Shutdown must be destroyed")
	}
	if _, err := r.Mount(context.Background(), key, "s1", "test"); err == nil {
		t.Fatal("mounting after Shutdown must fail")
	}
}

// WaitKnown returns the project's epoch once the reconciler sets it up, and 0 when the
// caller gives up first; another project's setup does not satisfy it.
func TestWaitKnown(t *testing.T) {
	r := New(clocktesting.NewFakeClock(time.Now()), logr.Discard())
	defer r.Shutdown()
	short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if got := r.WaitKnown(short, key); got != 0 {
		t.Fatalf("an unknown project: epoch %d, want 0", got)
	}
	got := make(chan uint64, 1)
	go func() { got <- r.WaitKnown(context.Background(), key) }()
	other := types.NamespacedName{Namespace: "ns", Name: "other"}
	r.SetDesired(other, Desired{})
	select {
	case e := <-got:
		t.Fatalf("another project's setup ended the wait (epoch %d)", e)
	case <-time.After(50 * time.Millisecond):
	}
	r.SetDesired(key, Desired{})
	select {
	case e := <-got:
		if e == 0 || e != r.Epoch(key) {
			t.Fatalf("epoch %d, want %d", e, r.Epoch(key))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("WaitKnown did not return after SetDesired")
	}
}
