// Package reaper makes the controller reap the orphans of its server processes.
//
// A stdio server is often a wrapper (npx → sh → node). When the wrapper dies first, its
// children are reparented to the nearest child subreaper or to PID 1, which in a container is
// the controller. Go reaps only the children it started (exec.Cmd.Wait): an adopted orphan that
// exits stays a zombie for ever, and enough of them exhaust the pid space.
//
// Run marks the process a child subreaper, so orphans of its descendants come to it even when
// it is not PID 1, and reaps them. It must not reap a child some exec.Cmd is about to wait for:
// that Wait would fail (the exit status gone). A loop of wait4(-1) would race with every
// exec.Cmd.Wait. So it never waits for "any" child: it scans /proc for zombies whose parent is
// this process, and reaps one by pid only after it has stayed a zombie for a while. A child
// whose exec.Cmd waits for it is reaped by that Wait the moment it exits (Wait is already
// blocked in the kernel, or, for a stdio server, called on the SIGCHLD of its exit); only a
// child nobody waits for stays a zombie, and that is an orphan.
package reaper

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sys/unix"
)

// Grace is how long a child must have been a zombie before Run reaps it. An exec.Cmd whose
// Wait comes later than this after its process exited loses the exit status: Wait is called
// at once everywhere in the controller (and in client-go's credential plugins).
const Grace = 2 * time.Second

// sweepEvery is the backstop scan when no SIGCHLD arrives (signals of several exits coalesce).
const sweepEvery = 30 * time.Second

// zombie identifies a process across scans: a pid with its start time, so that a pid reused
// by another process is not taken for the same one.
type zombie struct {
	pid   int
	start string
}

// Run makes this process a child subreaper and reaps orphaned zombie children until ctx
// ends. It returns an error only if the process cannot become a subreaper.
func Run(ctx context.Context, log logr.Logger) error {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("becoming a child subreaper: %w", err)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGCHLD)
	defer signal.Stop(sigs)
	self := os.Getpid()
	seen := map[zombie]time.Time{}
	timer := time.NewTimer(sweepEvery)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-sigs:
		case <-timer.C:
		}
		now := time.Now()
		current := zombieChildren(self)
		next := sweepEvery
		for z := range seen {
			if !current[z] {
				delete(seen, z) // reaped by its exec.Cmd meanwhile
			}
		}
		for z := range current {
			since, ok := seen[z]
			if !ok {
				seen[z], since = now, now
			}
			if wait := Grace - now.Sub(since); wait > 0 {
				next = min(next, wait)
				continue
			}
			var status syscall.WaitStatus
			if pid, err := syscall.Wait4(z.pid, &status, syscall.WNOHANG, nil); err == nil && pid == z.pid {
				log.V(1).Info("Reaped an orphaned process", "pid", z.pid, "status", status.ExitStatus())
			}
			delete(seen, z)
		}
		timer.Reset(next)
	}
}

// zombieChildren lists the zombie processes whose parent is pid.
func zombieChildren(pid int) map[zombie]bool {
	out := map[zombie]bool{}
	entries, _ := os.ReadDir("/proc")
	want := strconv.Itoa(pid)
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		// Fields after the command name: state (0), ppid (1), ..., starttime (19).
		f := statFields(e.Name())
		if len(f) > 19 && f[0] == "Z" && f[1] == want {
			out[zombie{pid: child, start: f[19]}] = true
		}
	}
	return out
}

// statFields returns the fields of /proc/PID/stat after the command name (which may hold
// spaces and parentheses).
func statFields(pid string) []string {
	data, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return nil
	}
	s := string(data)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
}
