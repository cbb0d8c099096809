package controlplane

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Guard ends processes this one started when it dies without stopping them (kill -9, OOM):
// kube-apiserver and etcd, which envtest starts in process groups of their own and without a
// parent-death signal. It is a small shell, a child of this process, that waits on a pipe
// only this process writes to: whenever this process ends, the pipe closes and the shell
// kills the guarded process groups. Release ends the shell without killing anything.
type Guard struct {
	cmd    *exec.Cmd
	pipe   *os.File
	exited chan struct{}
	Groups []int // the process groups guarded
}

// GuardChildren guards this process's children whose executable's base name is one of names,
// each the leader of its own process group (as envtest starts them). Without /proc (outside
// Linux) it finds none and returns a Guard that guards nothing.
func GuardChildren(names ...string) (*Guard, error) {
	g := &Guard{}
	for _, pid := range childrenOf(os.Getpid()) {
		if cmd := commandLine(pid); len(cmd) > 0 && slices.Contains(names, filepath.Base(cmd[0])) {
			g.Groups = append(g.Groups, pid)
		}
	}
	if len(g.Groups) == 0 {
		return g, nil
	}
	kill := make([]string, len(g.Groups))
	for i, pgid := range g.Groups {
		kill[i] = "-" + strconv.Itoa(pgid)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	// `read` returns at EOF too, with an empty line: only "release" spares the groups.
	g.cmd = exec.Command("/bin/sh", "-c", `read line; [ "$line" = release ] || kill -9 `+strings.Join(kill, " "))
	g.cmd.Stdin = r
	// Its own process group: a Ctrl-C at the terminal must not end the guard before this
	// process has stopped the guarded ones itself.
	g.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := g.cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("starting the guard of %s: %w", strings.Join(names, ", "), err)
	}
	r.Close()
	g.pipe, g.exited = w, make(chan struct{})
	go func() { _ = g.cmd.Wait(); close(g.exited) }()
	return g, nil
}

// Release ends the guard without killing anything: call it before stopping the guarded
// processes the orderly way, so that their process group ids are not signalled once free.
func (g *Guard) Release() {
	if g.cmd == nil {
		return
	}
	_, _ = g.pipe.WriteString("release\n")
	g.pipe.Close()
	select {
	case <-g.exited:
	case <-time.After(5 * time.Second):
		_ = g.cmd.Process.Kill()
		<-g.exited
	}
}

// childrenOf lists the processes whose parent is pid, from /proc.
func childrenOf(pid int) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(data)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]) // state, ppid, ...
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, child)
		}
	}
	return out
}

// commandLine is a process's arguments, from /proc.
func commandLine(pid int) []string {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil {
		return nil
	}
	return strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
}
