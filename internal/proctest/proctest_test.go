package proctest

import (
	"os"
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"
)

func TestProcessTable(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Skip(err)
	}
	pid := cmd.Process.Pid
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()

	if !Alive(pid) || !GroupAlive(pid) || !slices.Contains(Children(os.Getpid()), pid) {
		t.Fatalf("a running child: Alive %v, GroupAlive %v, Children %v", Alive(pid), GroupAlive(pid), Children(os.Getpid()))
	}
	_ = cmd.Process.Kill()
	// Not reaped yet: a zombie counts as gone.
	WaitGone(t, 5*time.Second, pid)
	if GroupAlive(pid) || slices.Contains(Children(os.Getpid()), pid) {
		t.Fatal("a killed child must be gone from the group and the children")
	}
	if Alive(0) || Alive(-1) {
		t.Fatal("pids 0 and -1 are never alive")
	}
}
