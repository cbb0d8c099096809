package main

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/testutil"
	"github.com/dsh-dev/projectmcp/test/fixture"
)

// fixtureServer is a stdio server running the project's fixture (this test binary).
func fixtureServer(name string) v1alpha1.MCPServer {
	return v1alpha1.MCPServer{Name: name, Stdio: &v1alpha1.StdioServer{Command: os.Args[0], Args: []string{"--name", name},
		Env: []v1alpha1.NameValue{{Name: fixture.EnvVar, Value: "1"}}}}
}

// mainProcess is `projectmcp` (this test binary, see TestMain) running in a process group of
// its own, as a shell runs a command: a signal to the group reaches it and every child that
// stayed in the group, as Ctrl-C in a terminal does.
type mainProcess struct {
	cmd    *exec.Cmd
	out    testutil.SyncBuffer // stdout and stderr, written by exec's copying goroutine
	exited chan struct{}
	err    error
}

// startMain starts a command line (argv[0] is the program: os.Args[0] for projectmcp, or any
// other such as make) in dir with extra environment; the process group is killed at cleanup.
func startMain(t *testing.T, dir string, env []string, argv ...string) *mainProcess {
	t.Helper()
	return startMainEnv(t, dir, append(append(os.Environ(), mainEnvVar+"=1"), env...), argv...)
}

// startMainEnv is startMain with the whole environment given.
func startMainEnv(t *testing.T, dir string, env []string, argv ...string) *mainProcess {
	t.Helper()
	p := &mainProcess{exited: make(chan struct{})}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Dir = dir
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.exited
		if t.Failed() {
			t.Logf("%s output:\n%s", strings.Join(argv, " "), p.out.String())
		}
	})
	return p
}

// waitFor waits until the output has a line containing s, and returns that line.
func (p *mainProcess) waitFor(t *testing.T, timeout time.Duration, s string) string {
	t.Helper()
	var line string
	testutil.EventuallyOK(t, timeout, "output "+s, func() error {
		for _, l := range strings.Split(p.out.String(), "\n") {
			if strings.Contains(l, s) {
				line = l
				return nil
			}
		}
		select {
		case <-p.exited:
			t.Fatalf("exited (%v) before printing %q", p.err, s)
		default:
		}
		return errors.New("not yet")
	})
	return line
}

// stop sends sig to the process group, as a terminal's Ctrl-C does, and returns the exit code.
func (p *mainProcess) stop(t *testing.T, sig syscall.Signal, timeout time.Duration) int {
	t.Helper()
	_ = syscall.Kill(-p.cmd.Process.Pid, sig)
	select {
	case <-p.exited:
	case <-time.After(timeout):
		t.Fatalf("did not stop within %s of %v", timeout, sig)
	}
	return p.cmd.ProcessState.ExitCode()
}
