//go:build !linux

package conn

import "syscall"

// serverProcAttr puts a stdio server in its own process group and runs it as cred when set.
// There is no parent-death signal outside Linux: a server outlives a controller killed hard.
func serverProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Credential: cred}
}
