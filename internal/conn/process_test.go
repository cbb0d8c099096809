package conn

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/proctest"
	"github.com/dsh-dev/projectmcp/internal/testutil"
	"github.com/dsh-dev/projectmcp/test/fixture"
)

// pipeFDs lists this process's open pipe descriptors (their fd numbers and pipe inodes).
func pipeFDs(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err == nil && strings.HasPrefix(target, "pipe:") {
			out = append(out, e.Name()+"→"+target)
		}
	}
	return out
}

// A grandchild that calls setsid escapes the group kill and keeps the server's stderr open:
// the teardown still ends, and no goroutine (the stderr copy) or descriptor outlives it.
func TestEscapedGrandchildLeaksNothing(t *testing.T) {
	goroutines := goleak.IgnoreCurrent()
	pipes := pipeFDs(t)
	pidFile := filepath.Join(t.TempDir(), "pids.json")
	c := start(t, Options{Server: stdioServer("a", "--grandchild", "--grandchild-setsid", "--pid-file", pidFile)})
	waitPhase(t, c, v1alpha1.PhaseReady)
	var pids fixture.PIDs
	data, _ := os.ReadFile(pidFile)
	if err := json.Unmarshal(data, &pids); err != nil || pids.Grandchild == 0 {
		t.Fatalf("pid file: %s %v", data, err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pids.Grandchild, syscall.SIGKILL) })

	began := time.Now()
	c.Destroy()
	if took := time.Since(began); took > 5*teardownGrace {
		t.Errorf("Destroy took %s", took)
	}
	if !proctest.Alive(pids.Grandchild) {
		t.Fatal("the setsid grandchild did not escape the group kill: this test shows nothing")
	}
	if err := goleak.Find(goroutines); err != nil {
		t.Errorf("goroutines outlive the teardown: %v", err)
	}
	if now := pipeFDs(t); len(now) > len(pipes) {
		t.Errorf("pipe descriptors outlive the teardown: before %v, after %v", pipes, now)
	}
}

// holderEnv makes TestHelperHoldsConnection, in a child test process, hold a connection to a
// server that ignores stdin (so only the parent-death signal can end it) until it is killed.
const holderEnv = "PROJECTMCP_TEST_CONN_HOLDER"

func TestHelperHoldsConnection(t *testing.T) {
	if os.Getenv(holderEnv) == "" {
		return // only a helper for TestServerDiesWithItsController
	}
	c := New(Options{Server: v1alpha1.MCPServer{Name: "sleeper", Stdio: &v1alpha1.StdioServer{Command: "sleep", Args: []string{"300"}}},
		Settings: Settings{ConnectTimeout: 10 * time.Minute}})
	defer c.Destroy()
	time.Sleep(10 * time.Minute)
}

// A controller killed hard (kill -9 of `projectmcp dev`) takes its server processes with it,
// even one that ignores its stdin closing: the kernel's parent-death signal kills them.
func TestServerDiesWithItsController(t *testing.T) {
	holder := exec.Command(os.Args[0], "-test.run=^TestHelperHoldsConnection$", "-test.timeout=15m")
	// Killed hard, the holder cannot remove its server's HOME: keep it in the test's directory.
	holder.Env = append(os.Environ(), holderEnv+"=1", "TMPDIR="+t.TempDir())
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = holder.Wait(); close(exited) }()
	t.Cleanup(func() { _ = holder.Process.Kill(); <-exited })
	var server int
	testutil.Eventually(t, 30*time.Second, "the holder's server process", func() bool {
		children := proctest.Children(holder.Process.Pid)
		if i := slices.IndexFunc(children, func(pid int) bool { return strings.HasPrefix(proctest.Command(pid), "sleep") }); i >= 0 {
			server = children[i]
		}
		return server != 0
	})
	t.Cleanup(func() { _ = syscall.Kill(server, syscall.SIGKILL) })
	if err := holder.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exited
	proctest.WaitGone(t, 10*time.Second, server)
}

// No goroutine waits for a server process, and no OS thread is held per server: the process's
// one spawner starts every server from its thread (the one their parent-death signal is tied
// to) and learns of their exits from SIGCHLD. Each server's grandchild holds its stdout, so
// that only its exit tells that it died.
func TestServerProcessesHoldNoWaiter(t *testing.T) {
	const servers = 6
	var conns []*Conn
	for i := range servers {
		server := stdioServer(fmt.Sprintf("s%d", i), "--grandchild", "--grandchild-holds-stdout")
		conns = append(conns, start(t, Options{Server: server, Settings: Settings{HealthInterval: time.Hour, RelistInterval: time.Hour}}))
	}
	pids := map[int]bool{}
	for _, c := range conns {
		pids[waitPhase(t, c, v1alpha1.PhaseReady).PID] = true
	}
	if waiters := testutil.StacksWith("os/exec.(*Cmd).Wait("); waiters != "" {
		t.Fatalf("goroutines wait for server processes:\n%s", waiters)
	}
	if parents := proctest.StartedBy(t, pids); len(parents) != 1 {
		t.Fatalf("%d servers were started by %d threads: %v", servers, len(parents), parents)
	}
	for _, c := range conns {
		old := c.Snapshot().PID
		if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		deadline := time.After(20 * time.Second)
		for {
			ch := c.Changed()
			if s := c.Snapshot(); s.Phase == v1alpha1.PhaseReady && s.PID != old {
				break
			}
			select {
			case <-ch:
			case <-deadline:
				t.Fatalf("the exit of server %d went unseen: %+v", old, c.Snapshot())
			}
		}
	}
}
