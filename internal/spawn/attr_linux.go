package spawn

import "syscall"

// attr puts a server in its own process group (Stop signals the whole group: wrappers such as
// npx and their children), runs it as cred when set, and has the kernel kill it if the
// controller dies without tearing it down (kill -9 of `projectmcp dev`): the parent-death
// signal. Its own children do not inherit that signal; they lose their stdin with it, which
// ends MCP servers. A sandboxed server (internal/sandbox) comes with the namespaces, id maps
// and user inside them of its sandbox in ns, which are kept; nil otherwise.
func attr(cred *syscall.Credential, ns *syscall.SysProcAttr) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true, Credential: cred, Pdeathsig: syscall.SIGKILL}
	if ns != nil {
		a.Cloneflags, a.UidMappings, a.GidMappings = ns.Cloneflags, ns.UidMappings, ns.GidMappings
		if cred == nil {
			a.Credential = ns.Credential
		}
	}
	return a
}
