package spawn

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dsh-dev/projectmcp/internal/proctest"
	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// Every server is started by one thread, the spawner's, and no goroutine waits for one: each
// exit is learned from SIGCHLD, with how the server ended, and once the last has exited the
// spawner's goroutine ends with it (and a later start makes a new one).
func TestOneSpawnerForEveryServer(t *testing.T) {
	for round := range 2 {
		const servers = 6
		var procs []*Process
		pids := map[int]bool{}
		for range servers {
			p, err := Start(exec.Command("sleep", "300"), nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { p.Stop(time.Second) })
			procs = append(procs, p)
			pids[p.Pid()] = true
		}
		if waiters := testutil.StacksWith("os/exec.(*Cmd).Wait("); waiters != "" {
			t.Fatalf("round %d: goroutines wait for server processes:\n%s", round, waiters)
		}
		if parents := proctest.StartedBy(t, pids); len(parents) != 1 {
			t.Fatalf("round %d: %d servers were started by %d threads: %v", round, servers, len(parents), parents)
		}
		for _, p := range procs {
			if err := syscall.Kill(p.Pid(), syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			select {
			case <-p.Done():
			case <-time.After(10 * time.Second):
				t.Fatalf("round %d: the exit of server %d went unseen", round, p.Pid())
			}
			var exit *exec.ExitError
			if !errors.As(p.Err(), &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("round %d: server %d ended with %v, want killed", round, p.Pid(), p.Err())
			}
		}
		testutil.Eventually(t, 5*time.Second, "the spawner to end with its last server", func() bool {
			return testutil.StacksWith("spawn.(*spawner).run(") == ""
		})
	}
}

// Stop ends the whole process group, a grandchild the leader started included.
func TestStopEndsTheGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "grandchild")
	p, err := Start(exec.Command("sh", "-c", `sleep 300 & echo $! > "$1"; wait`, "sh", pidFile), nil)
	if err != nil {
		t.Fatal(err)
	}
	var grandchild int
	testutil.Eventually(t, 5*time.Second, "the grandchild's pid", func() bool {
		data, _ := os.ReadFile(pidFile)
		grandchild, _ = strconv.Atoi(strings.TrimSpace(string(data)))
		return grandchild != 0
	})
	p.Stop(100 * time.Millisecond)
	select {
	case <-p.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the leader outlived Stop")
	}
	proctest.WaitGone(t, 5*time.Second, grandchild)
}
