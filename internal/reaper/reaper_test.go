package reaper

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/go-logr/logr"
	"golang.org/x/sys/unix"

	"github.com/dsh-dev/projectmcp/internal/proctest"
	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// startReaper runs Run until the test ends, once this process is a subreaper.
func startReaper(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, logr.Discard()) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	testutil.Eventually(t, 5*time.Second, "this process to be a child subreaper", func() bool {
		var on int32
		return unix.Prctl(unix.PR_GET_CHILD_SUBREAPER, uintptr(unsafe.Pointer(&on)), 0, 0, 0) == nil && on == 1
	})
}

// orphan starts a sleeper through a shell that exits at once, as npx → sh → node leaves node
// behind when the wrapper dies, and returns the sleeper's pid.
func orphan(t *testing.T) int {
	t.Helper()
	out, err := exec.Command("sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!").Output()
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatalf("sleeper pid %q: %v", out, err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	return pid
}

// An orphaned grandchild comes to this process (a child subreaper) and, once it exits, is
// reaped: it does not stay in the process table as a zombie.
func TestOrphansAreAdoptedAndReaped(t *testing.T) {
	startReaper(t)
	var pids []int
	for range 3 {
		pids = append(pids, orphan(t))
	}
	for _, pid := range pids {
		testutil.Eventually(t, 5*time.Second, "the orphan to be adopted", func() bool { return proctest.Parent(pid) == os.Getpid() })
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	for _, pid := range pids {
		testutil.Eventually(t, Grace+5*time.Second, "the orphan "+strconv.Itoa(pid)+" to be reaped", func() bool { return proctest.Reaped(pid) })
	}
}

// The reaper never takes the exit status of a child an exec.Cmd waits for: commands run while
// orphans are being reaped, and one whose Wait comes late (within Grace), all see their own
// exit status.
func TestExitStatusesKept(t *testing.T) {
	startReaper(t)
	var orphans []int
	for range 10 {
		orphans = append(orphans, orphan(t))
	}
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := range 40 {
		wg.Go(func() {
			if i%4 == 0 {
				_ = syscall.Kill(orphans[i/4], syscall.SIGKILL) // zombies for the reaper, and SIGCHLDs
			}
			err := exec.Command("sh", "-c", "exit 7").Run()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 7 {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("a command's exit status was lost: %v", err)
	}
	for _, pid := range orphans {
		testutil.Eventually(t, Grace+5*time.Second, "the orphans to be reaped", func() bool { return proctest.Reaped(pid) })
	}
	late := exec.Command("sh", "-c", "exit 5")
	if err := late.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(Grace / 2)
	var exit *exec.ExitError
	if err := late.Wait(); !errors.As(err, &exit) || exit.ExitCode() != 5 {
		t.Fatalf("a Wait within Grace lost its status: %v", err)
	}
}
