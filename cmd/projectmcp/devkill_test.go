package main

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

	"github.com/dsh-dev/projectmcp/internal/proctest"
	"github.com/dsh-dev/projectmcp/internal/testenv"
	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// `projectmcp dev` killed hard (kill -9) takes everything it started with it: its servers,
// even one that ignores its stdin closing (the parent-death signal), and its kube-apiserver
// and etcd (the guard).
func TestDevKilledHardLeavesNothing(t *testing.T) {
	testenv.Require(t) // dev starts a kube-apiserver of its own
	dir := filepath.Join(t.TempDir(), "killed")
	if err := os.MkdirAll(filepath.Join(dir, ".dsh"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A "server" that never answers and ignores stdin: only a signal ends it.
	data, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{"stubborn": map[string]any{"command": "sleep", "args": []string{"300"}}}})
	if err := os.WriteFile(filepath.Join(dir, ".dsh", "mcp.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "dev", "--gateway-bind-address", "127.0.0.1:0")
	cmd.Dir = dir
	// Killed hard, dev cannot remove its data directory, nor envtest its own: keep them in
	// the test's directory.
	cmd.Env = append(os.Environ(), mainEnvVar+"=1", "TMPDIR="+t.TempDir())
	var out testutil.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	var kids []int
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		for _, pid := range kids { // whatever survived, so that a failure leaks nothing
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if t.Failed() {
			t.Logf("dev output:\n%s", out.String())
		}
	})

	want := []string{"kube-apiserver", "etcd", "sleep"}
	testutil.EventuallyOK(t, 3*time.Minute, "dev's control plane and server", func() error {
		kids = proctest.Children(cmd.Process.Pid)
		var seen []string
		for _, pid := range kids {
			if c := strings.Fields(proctest.Command(pid)); len(c) > 0 {
				seen = append(seen, filepath.Base(c[0]))
			}
		}
		for _, w := range want {
			if !slices.Contains(seen, w) {
				return fmt.Errorf("no %s among %v", w, seen)
			}
		}
		return nil
	})
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exited
	proctest.WaitGone(t, 30*time.Second, kids...)
}
