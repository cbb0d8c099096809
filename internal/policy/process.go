package policy

import (
	"fmt"
	"net"
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
	own     sandbox.Wants  // the server's own settings, paths resolved
	egress  *Egress        // where its proxy may connect
	release func()
}

// Begin makes what a server process of project needs before it starts: the user it runs as
// (in a sandbox, a uid of the project's own when the sandbox has them) and a HOME of that
// user's. own are the server's own sandbox settings: Off runs it outside the sandbox, and its
// paths are resolved against its HOME and workspace (the project's folder, "" if none).
// Release gives both back.
func (iso *Isolation) Begin(project, server string, own sandbox.Wants, workspace string) (*Process, error) {
	cred, releaseUID := iso.Credential, func() {}
	sb := iso.Sandbox
	if own.Off {
		sb = nil
	}
	if sb != nil {
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
	p := &Process{Home: home, cred: cred, sandbox: sb, release: func() { removeHome(); releaseUID() }, egress: iso.Egress,
		own: sandbox.Wants{Off: own.Off, AllowedDomains: own.AllowedDomains, DeniedDomains: own.DeniedDomains}}
	if sb != nil {
		for _, l := range []struct{ in, out *[]string }{{&own.AllowWrite, &p.own.AllowWrite}, {&own.DenyRead, &p.own.DenyRead}, {&own.DenyWrite, &p.own.DenyWrite}} {
			if *l.out, err = sandbox.Resolve(*l.in, home, workspace); err != nil {
				p.Release()
				return nil, err
			}
		}
	}
	return p, nil
}

// Prepare readies cmd to start as the process: in its sandbox when there is one. It returns
// the credential to start cmd with (nil in a sandbox, whose user namespace maps the user) and
// a function to call once cmd has started or failed to.
func (p *Process) Prepare(cmd *exec.Cmd) (cred *syscall.Credential, started func(), err error) {
	if p.sandbox == nil {
		return p.cred, func() {}, nil
	}
	started, p.ended, err = p.sandbox.Wrap(cmd, p.cred, p.Home, p.own, p.serveProxy)
	return nil, started, err
}

// ExitNote is what the sandbox adds to the process's exit (OOMKilled), "" when nothing.
func (p *Process) ExitNote() string { return p.ended.Why() }

// Sandbox says which layers of the sandbox the process is in, for its status ("" without a
// sandbox).
func (p *Process) Sandbox() string {
	if p.own.Off {
		return `off: its entry says "sandbox": false`
	}
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

// serveProxy serves the process's proxy on ln: the egress policy and its own domains.
func (p *Process) serveProxy(ln net.Listener) (stop func()) {
	px := NewProxy(p.egress, Domains{Allowed: p.own.AllowedDomains, Denied: p.own.DeniedDomains})
	go px.Serve(ln)
	return px.Close
}
