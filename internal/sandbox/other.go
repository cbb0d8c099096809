//go:build !linux

package sandbox

import (
	"errors"
	"net"
	"os/exec"
	"syscall"
)

// Sandbox is the controller's sandbox for its stdio servers; outside Linux there is none.
type Sandbox struct {
	Layers   []Status
	UIDs     *UIDs
	Fallback *syscall.Credential
	Hide     []string
	Limits   Limits
	cgroups  cgroups
}

// Ended says how a sandboxed server ended; outside Linux there is none.
type Ended struct{}

// Why adds nothing.
func (e *Ended) Why() string { return "" }

// Release does nothing.
func (e *Ended) Release() {}

// Acquire is the fallback user: outside Linux no project has a uid of its own.
func (s *Sandbox) Acquire(string) (*syscall.Credential, func(), error) {
	return s.Fallback, func() {}, nil
}

// Wrap fails: there are no namespaces to make outside Linux.
func (s *Sandbox) Wrap(*exec.Cmd, *syscall.Credential, string, Wants, func(net.Listener) func()) (func(), *Ended, error) {
	return nil, nil, errors.New("the sandbox needs Linux")
}

// Probe finds no layer outside Linux.
func Probe(enabled, uidRange bool) Facts {
	return Facts{Enabled: enabled, UIDRange: uidRange, UserNS: "the sandbox needs Linux's namespaces"}
}

// Describe names the layers, none of which is in force outside Linux.
func (s *Sandbox) Describe(*syscall.Credential) string { return Describe(s.Layers, 0) }
