package policy

import (
	"fmt"
	"os/exec"
	"syscall"

	"github.com/dsh-dev/projectmcp/internal/sandbox"
)

// Process is one stdio server process's share of the isolation: its HOME, the user it runs
// as and its sandbox, held until Release.
type Process struct {
	// Home is the process's HOME.
	Home    string
	cred    *syscall.Credential
	sandbox *sandbox.Sandbox
	ended   *sandbox.Ended // nil until Prepare wrapped a command in the sandbox
	release func()
}

// Begin makes what a server process of project needs before it starts: the user it runs as
// (in a sandbox, a uid of the project's own when the sandbox has them) and a HOME of that
// user's. Release gives both back.
func (iso *Isolation) Begin(project, server string) (*Process, error) {
	cred, releaseUID := iso.Credential, func() {}
	if sb := iso.Sandbox; sb != nil {
		c, release, err := sb.Acquire(project)
		if err != nil {
			return nil, fmt.Errorf("choosing the server's user: %w", err)
		}
		cred, releaseUID = c, release
	}
	home, removeHome, err := iso.makeHome(server, cred)
	if err != nil {
		releaseUID()
		return nil, err
	}
	return &Process{Home: home, cred: cred, sandbox: iso.Sandbox, release: func() { removeHome(); releaseUID() }}, nil
}

// Prepare readies cmd to start as the process: in its sandbox when there is one. It returns
// the credential to start cmd with (nil in a sandbox, whose user namespace maps the user) and
// a function to call once cmd has started or failed to.
func (p *Process) Prepare(cmd *exec.Cmd) (cred *syscall.Credential, started func(), err error) {
	if p.sandbox == nil {
		return p.cred, func() {}, nil
	}
	started, p.ended, err = p.sandbox.Wrap(cmd, p.cred, p.Home)
	return nil, started, err
}

// ExitNote is what the sandbox adds to the process's exit (OOMKilled), "" when nothing.
func (p *Process) ExitNote() string { return p.ended.Why() }

// Sandbox says which layers of the sandbox the process is in, for its status ("" without a
// sandbox).
func (p *Process) Sandbox() string {
	if p.sandbox == nil {
		return ""
	}
	return p.sandbox.Describe(p.cred)
}

// Release removes the HOME and the cgroups (once the process is gone) and gives back the user.
func (p *Process) Release() {
	p.ended.Release()
	p.release()
}
