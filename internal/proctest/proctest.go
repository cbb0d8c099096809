// Package proctest reads the process table (/proc) for tests that check that no process
// outlives its owner. A zombie counts as gone: it has exited and only waits to be reaped.
package proctest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// stat returns the fields of /proc/PID/stat after the command name: state, ppid, pgrp, ...
func stat(pid string) []string {
	data, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return nil
	}
	s := string(data)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
}

// Alive reports whether pid is a running (not zombie) process.
func Alive(pid int) bool {
	f := stat(strconv.Itoa(pid))
	return pid > 0 && len(f) > 0 && f[0] != "Z"
}

// WaitGone fails the test unless every pid has exited (or is a zombie) within timeout.
func WaitGone(t testing.TB, timeout time.Duration, pids ...int) {
	t.Helper()
	testutil.EventuallyOK(t, timeout, fmt.Sprintf("processes %v to exit", pids), func() error {
		for _, pid := range pids {
			if Alive(pid) {
				return fmt.Errorf("%d still runs", pid)
			}
		}
		return nil
	})
}

// Children lists the live processes whose parent is pid.
func Children(pid int) []int { return matching(1, pid) }

// GroupAlive reports whether any live process is in process group pgid.
func GroupAlive(pgid int) bool { return len(matching(2, pgid)) > 0 }

// matching lists live processes whose stat field i (after the name) equals want.
func matching(i, want int) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f := stat(e.Name()); len(f) > i && f[0] != "Z" && f[i] == strconv.Itoa(want) {
			out = append(out, pid)
		}
	}
	return out
}

// IDs returns the real user and group id of a process (-1, -1 when it cannot be read).
func IDs(pid int) (uid, gid int) {
	uid, gid = -1, -1
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return uid, gid
	}
	for _, line := range strings.Split(string(data), "\n") {
		name, rest, _ := strings.Cut(line, ":")
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		switch name {
		case "Uid":
			uid, _ = strconv.Atoi(f[0])
		case "Gid":
			gid, _ = strconv.Atoi(f[0])
		}
	}
	return uid, gid
}

// Reaped reports whether pid is gone from the process table altogether: not running and not
// a zombie waiting for its parent.
func Reaped(pid int) bool {
	_, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid)))
	return os.IsNotExist(err)
}

// Parent returns the parent pid of a process (0 when it cannot be read).
func Parent(pid int) int {
	f := stat(strconv.Itoa(pid))
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// Command returns a process's command line, its arguments separated by spaces ("" when it
// cannot be read).
func Command(pid int) string {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(strings.ReplaceAll(string(data), "\x00", " "))
}

// StartedBy maps this process's threads that have any of pids as children to those children.
func StartedBy(t testing.TB, pids map[int]bool) map[string][]int {
	t.Helper()
	files, err := filepath.Glob("/proc/self/task/*/children")
	if err != nil || len(files) == 0 {
		t.Fatalf("no /proc/self/task/*/children: %v", err)
	}
	parents := map[string][]int{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue // the thread has ended
		}
		for _, field := range strings.Fields(string(data)) {
			if pid, _ := strconv.Atoi(field); pids[pid] {
				tid := filepath.Base(filepath.Dir(f))
				parents[tid] = append(parents[tid], pid)
			}
		}
	}
	return parents
}
