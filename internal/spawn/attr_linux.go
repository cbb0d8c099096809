package spawn

import "syscall"

// attr puts a server in its own process group (Stop signals the whole group: wrappers such as
// npx and their children), runs it as cred when set, and has the kernel kill it if the
// controller dies without tearing it down (kill -9 of `projectmcp dev`): the parent-death
// signal. Its own children do not inherit that signal; they lose their stdin with it, which
// ends MCP servers.
func attr(cred *syscall.Credential) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Credential: cred, Pdeathsig: syscall.SIGKILL}
}
