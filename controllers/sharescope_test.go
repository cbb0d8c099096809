package controllers_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/proctest"
	"github.com/dsh-dev/projectmcp/internal/share"
	"github.com/dsh-dev/projectmcp/internal/testenv/harness"
	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// mountWho mounts a session of a principal, released at the test's end, and returns its
// connection to server, Ready.
func mountWho(t *testing.T, key types.NamespacedName, principal, id, server string) *conn.Conn {
	t.Helper()
	if _, err := harness.Ctl.Registry.Mount(context.Background(), key, share.Who{Principal: principal, Session: id}, "test/1.0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { harness.Ctl.Registry.Release(key, id) })
	c := harness.Ctl.Registry.Lookup(key, id, server)
	if c == nil || c.Snapshot().Phase != v1alpha1.PhaseReady {
		t.Fatalf("session %s: its mount must wait for its own Ready connection to %s", id, server)
	}
	return c
}

// connectionsOf waits until status counts n connections of server a (and the project n).
func connectionsOf(t *testing.T, key types.NamespacedName, n int32) *v1alpha1.ProjectMCP {
	t.Helper()
	return harness.WaitStatus(t, key, 30*time.Second, fmt.Sprintf("%d connections", n), func(o *v1alpha1.ProjectMCP) bool {
		s, ok := harness.ServerStatusOf(o, "a")
		return ok && s.Connections == n && o.Status.ConnectionCount == n && o.Status.ObservedGeneration == o.Generation
	})
}

// Under share session: two sessions, two processes, none before them; an edit repoints both
// in place (tools unchanged, each old process ended); a session's end ends its process at once;
// removing the server ends the rest.
func TestSessionScopeLifecycle(t *testing.T) {
	ns := harness.NewNamespace(t)
	srv := harness.FixtureServer(t, "a")
	srv.Share = v1alpha1.ShareSession
	key := harness.Create(t, ns, "share-session", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{srv}})
	harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	connectionsOf(t, key, 0)

	one, two := mountWho(t, key, "u", "s1", "a"), mountWho(t, key, "u", "s2", "a")
	pids := []int{one.Snapshot().PID, two.Snapshot().PID}
	if pids[0] == pids[1] {
		t.Fatal("two sessions must have two processes")
	}
	before, _ := harness.ServerStatusOf(connectionsOf(t, key, 2), "a")

	harness.Update(t, key, func(o *v1alpha1.ProjectMCP) {
		o.Spec.Servers[0].Stdio.Args = append(o.Spec.Servers[0].Stdio.Args, "--init-delay", "10ms")
	})
	testutil.Eventually(t, 30*time.Second, "both sessions' connections repointed", func() bool {
		for i, id := range []string{"s1", "s2"} {
			c := harness.Ctl.Registry.Lookup(key, id, "a")
			if c == nil || c == []*conn.Conn{one, two}[i] || c.Snapshot().Phase != v1alpha1.PhaseReady {
				return false
			}
		}
		return true
	})
	proctest.WaitGone(t, 10*time.Second, pids...) // each old one ended before its new one started
	after, _ := harness.ServerStatusOf(connectionsOf(t, key, 2), "a")
	if !slices.Equal(after.Tools, before.Tools) || after.ConfigHash == before.ConfigHash {
		t.Fatalf("a repoint keeps the tool names: %v → %v", before.Tools, after.Tools)
	}
	for _, id := range []string{"s1", "s2"} {
		if got, err := callEcho(context.Background(), key, id, "a", id); err != nil || got != id {
			t.Fatalf("%s's call after the repoint = %q, %v", id, got, err)
		}
	}

	one, two = harness.Ctl.Registry.Lookup(key, "s1", "a"), harness.Ctl.Registry.Lookup(key, "s2", "a")
	start := time.Now()
	harness.Ctl.Registry.Release(key, "s1")
	proctest.WaitGone(t, 5*time.Second, one.Snapshot().PID)
	t.Logf("a session's process ended %s after its release", time.Since(start))
	if !proctest.Alive(two.Snapshot().PID) {
		t.Fatal("another session's process must be untouched")
	}
	connectionsOf(t, key, 1)

	last := two.Snapshot().PID
	harness.Update(t, key, func(o *v1alpha1.ProjectMCP) { o.Spec.Servers = nil })
	proctest.WaitGone(t, 10*time.Second, last)
	if harness.Ctl.Registry.Lookup(key, "s2", "a") != nil {
		t.Fatal("a retired server's slots must be dropped")
	}
}

// Under share principal: one principal's sessions share a connection, two principals have two;
// one principal's killed process is rebuilt at its next session's mount, the other's untouched.
func TestPrincipalScopeKillRebuildAtMount(t *testing.T) {
	ns := harness.NewNamespace(t)
	srv := harness.FixtureServer(t, "a")
	srv.Share = v1alpha1.SharePrincipal
	key := harness.Create(t, ns, "share-principal", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{srv},
		Reconnect: &v1alpha1.ReconnectPolicy{MaxAttempts: ptr.To[int32](0)}}) // a killed server fails at once
	harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	alice := mountWho(t, key, "alice", "s1", "a")
	if mountWho(t, key, "alice", "s2", "a") != alice {
		t.Fatal("one principal's sessions must share its connection")
	}
	bob := mountWho(t, key, "bob", "s3", "a")
	if bob == alice {
		t.Fatal("two principals must have two connections")
	}
	connectionsOf(t, key, 2)

	_ = killProcess(alice.Snapshot().PID)
	testutil.Eventually(t, 10*time.Second, "the killed connection to fail", func() bool {
		return alice.Snapshot().Phase == v1alpha1.PhaseFailed
	})
	rebuilt := mountWho(t, key, "alice", "s4", "a")
	if rebuilt == alice || harness.Ctl.Registry.Lookup(key, "s1", "a") != rebuilt {
		t.Fatal("the dead connection must be rebuilt at its principal's next mount")
	}
	if harness.Ctl.Registry.Lookup(key, "s3", "a") != bob || !proctest.Alive(bob.Snapshot().PID) {
		t.Fatal("another principal's connection must be untouched")
	}
	if got, err := callEcho(context.Background(), key, "s2", "a", "back"); err != nil || got != "back" {
		t.Fatalf("a call on the rebuilt connection = %q, %v", got, err)
	}
}

func killProcess(pid int) error {
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	return p.Kill()
}

// 100 sessions come and go on a session-scoped server: each gets and ends its own process, and
// afterwards no process and no goroutine is left over.
func TestSessionScopeCyclesLeakNothing(t *testing.T) {
	ns := harness.NewNamespace(t)
	srv := harness.FixtureServer(t, "a")
	srv.Share = v1alpha1.ShareSession
	key := harness.Create(t, ns, "share-cycles", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{srv}})
	harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	children := func() int { return len(proctest.Children(os.Getpid())) }
	procs, goroutines := children(), runtime.NumGoroutine()
	var pids []int
	for i := range 100 {
		id := fmt.Sprintf("cycle-%03d", i)
		if _, err := harness.Ctl.Registry.Mount(context.Background(), key, share.Who{Principal: "u", Session: id}, "test/1.0"); err != nil {
			t.Fatal(err)
		}
		c := harness.Ctl.Registry.Lookup(key, id, "a")
		if c == nil || c.Snapshot().Phase != v1alpha1.PhaseReady {
			t.Fatalf("cycle %d: no Ready connection", i)
		}
		pids = append(pids, c.Snapshot().PID)
		harness.Ctl.Registry.Release(key, id)
	}
	proctest.WaitGone(t, 30*time.Second, pids...)
	testutil.Eventually(t, 30*time.Second, "the processes and goroutines to settle", func() bool {
		return children() <= procs && runtime.NumGoroutine() <= goroutines+5
	})
	connectionsOf(t, key, 0)
}
