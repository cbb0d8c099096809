//go:build !linux

package spawn

import "syscall"

// attr puts a server in its own process group and runs it as cred when set. There is no
// parent-death signal outside Linux: a server outlives a controller killed hard.
func attr(cred *syscall.Credential, _ *syscall.SysProcAttr) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Credential: cred}
}
