// Package spawn starts the stdio MCP servers of the process, each the leader of a process
// group of its own, learns of their exits and ends their groups. On Linux one goroutine,
// locked to its OS thread while any server it started lives, starts every server and reaps
// them on SIGCHLD (spawner), where a goroutine and a thread per server would wait in
// exec.Cmd.Wait.
//
// It is an engine apart from the connections that use it (internal/conn) because what it
// costs is measured, per server and at scale: the goroutines, OS threads and memory of a stdio
// connection (make bench-scale, its stdio stage); and a call to a stdio server goes through
// what it started (make bench: BenchmarkGatewayCallOverhead and its Stdio variants in
// internal/gateway; BenchmarkCallPathProcesses in cmd/projectmcp for the call path as a
// whole). It knows nothing of MCP.
package spawn

import (
	"os/exec"
	"syscall"
	"time"
)

// Process is a server process Start started.
type Process struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Start starts cmd as a server: in a process group of its own, as cred's user when cred is
// not nil, and tied to the controller's life where the system can (attr); the namespaces a
// sandbox set in cmd.SysProcAttr are kept. Its exit closes Done.
func Start(cmd *exec.Cmd, cred *syscall.Credential) (*Process, error) {
	cmd.SysProcAttr = attr(cred, cmd.SysProcAttr)
	p := &Process{cmd: cmd, done: make(chan struct{})}
	if err := start(p); err != nil {
		return nil, err
	}
	return p, nil
}

// Pid is the process's id, and its group's.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited and been reaped.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is how the process ended, as exec.Cmd.Wait says it; it is set once Done is closed.
func (p *Process) Err() error { return p.err }

// Stop terminates the process group: SIGTERM after grace if the leader is still running,
// SIGKILL after another grace, and always a final SIGKILL to the group for grandchildren. It
// waits at most one more grace for the leader's exit.
func (p *Process) Stop(grace time.Duration) {
	pgid := p.Pid()
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(grace):
		}
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(grace):
	}
}
