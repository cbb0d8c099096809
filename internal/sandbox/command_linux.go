package sandbox

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Sandbox is the controller's sandbox for its stdio servers: the layers in force on this
// kernel, and how each server's init is told to make them.
type Sandbox struct {
	// Layers are the layers in force and why each other is not (Decide).
	Layers []Status
	// UIDs gives each project a uid of its own; nil when LayerUID is not in force, and the
	// servers are then mapped to Fallback.
	UIDs *UIDs
	// Fallback is the user and group every server is mapped to without a uid of its
	// project's own: --server-uid's, or (nil) the controller's own.
	Fallback *syscall.Credential
	// Hide are the paths no server sees (Spec.Hide).
	Hide []string
	// Limits hold each server when LayerLimits is in force.
	Limits  Limits
	cgroups cgroups
}

// Acquire is the user and group a server of project runs as, to be given back with release
// once the server is gone.
func (s *Sandbox) Acquire(project string) (cred *syscall.Credential, release func(), err error) {
	if s.UIDs == nil {
		return s.Fallback, func() {}, nil
	}
	uid, err := s.UIDs.Acquire(project)
	if err != nil {
		return nil, nil, err
	}
	return &syscall.Credential{Uid: uid, Gid: uid}, func() { s.UIDs.Release(project) }, nil
}

// Wrap makes cmd start its server in a sandbox: through an init (this binary again, under
// InitName) in new user, PID and mount namespaces, the namespace's root mapped to cred (nil:
// the controller's own user), in cgroups of its own when LayerLimits is in force, with its
// own filesystem settings (own, its paths resolved). The spawner
// adds its own attributes (process group, parent death signal) to the ones set here. The
// init waits for its spec to end, which started (to be called once cmd has started, or failed
// to) ends after it has put the process in its cgroups: the server never runs outside them.
func (s *Sandbox) Wrap(cmd *exec.Cmd, cred *syscall.Credential, home string, own Wants, proxy func(net.Listener) (stop func())) (started func(), end *Ended, err error) {
	network := InForce(s.Layers, LayerNetwork)
	spec := Spec{Home: home, Hide: append(slices.Clip(s.Hide), own.DenyRead...), AllowWrite: own.AllowWrite, DenyWrite: own.DenyWrite,
		Proc: InForce(s.Layers, LayerPID), Network: network, ReadOnly: InForce(s.Layers, LayerMount), Landlock: InForce(s.Layers, LayerLandlock)}
	r, w, err := specPipe(spec)
	if err != nil {
		return nil, nil, err
	}
	end = &Ended{limits: s.Limits}
	if s.cgroups != nil {
		if end.group, err = s.cgroups.newGroup(s.Limits); err != nil {
			closeFiles(r, w)
			return nil, nil, err
		}
	}
	files := []*os.File{r}
	var ours, theirs *os.File // the proxy socket's way back from the init
	if network {
		if ours, theirs, err = socketPair(); err != nil {
			end.Release()
			closeFiles(r, w)
			return nil, nil, err
		}
		files = append(files, theirs)
	}
	cmd.Args = append([]string{InitName, cmd.Path}, cmd.Args...) // the server's own argv after its path
	cmd.Path, cmd.Err = "/proc/self/exe", nil
	cmd.ExtraFiles = files
	cmd.SysProcAttr = namespaces(cred, network)
	started = func() {
		closeFiles(files...)
		if end.group != nil && cmd.Process != nil {
			if err := end.group.add(cmd.Process.Pid); err != nil {
				_ = cmd.Process.Kill() // never run past the limits: the init still waits
			}
		}
		_ = w.Close()
		if ours != nil {
			go end.serve(ours, proxy)
		}
	}
	return started, end, nil
}

// socketPair is a connected pair of unix sockets.
func socketPair() (ours, theirs *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("the proxy's socket pair: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "proxy"), os.NewFile(uintptr(fds[1]), "proxy"), nil
}

// Ended says how a sandboxed server ended, and frees its sandbox once it has.
type Ended struct {
	limits Limits
	group  *group

	mu       sync.Mutex
	stop     func() // stops its proxy
	released bool
}

// serve receives the proxy's listening socket from the init on sock, and serves proxy on it
// until Release. It returns at once when the init ends without sending one.
func (e *Ended) serve(sock *os.File, proxy func(net.Listener) func()) {
	ln, err := receiveListener(sock)
	_ = sock.Close()
	if err != nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.released {
		_ = ln.Close()
		return
	}
	e.stop = proxy(ln)
}

// Why is what the sandbox adds to the server's exit: OOMKilled when the kernel killed it for
// passing its memory limit ("" otherwise).
func (e *Ended) Why() string {
	if e == nil || e.group == nil || !e.group.oomKilled() {
		return ""
	}
	return fmt.Sprintf("OOMKilled: the server passed its memory limit of %d MiB", e.limits.Memory>>20)
}

// Release stops the server's proxy and removes its cgroups, once it is gone.
func (e *Ended) Release() {
	if e == nil {
		return
	}
	e.mu.Lock()
	e.released = true
	stop := e.stop
	e.mu.Unlock()
	if stop != nil {
		stop()
	}
	if e.group != nil {
		e.group.remove()
	}
}

func closeFiles(files ...*os.File) {
	for _, f := range files {
		_ = f.Close()
	}
}

// namespaces are the clone flags and id maps of a sandbox whose root is cred outside it (nil:
// this process's user), with a network namespace of its own when network is set.
func namespaces(cred *syscall.Credential, network bool) *syscall.SysProcAttr {
	if cred == nil {
		cred = &syscall.Credential{Uid: uint32(os.Getuid()), Gid: uint32(os.Getgid())}
	}
	a := &syscall.SysProcAttr{
		// The child becomes the namespace's root before it executes the init: a process whose
		// user is not the namespace's root loses its capabilities there at execve.
		Credential:  &syscall.Credential{Uid: 0, Gid: 0, NoSetGroups: true},
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(cred.Uid), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(cred.Gid), Size: 1}},
	}
	if network {
		a.Cloneflags |= syscall.CLONE_NEWNET
	}
	return a
}

// specPipe is a pipe holding spec; the init reads it to its end, which comes when w is closed.
func specPipe(spec Spec) (r, w *os.File, err error) {
	data, err := json.Marshal(spec)
	if err != nil {
		return nil, nil, err
	}
	if len(data) > 32<<10 { // a pipe holds 64 KiB before a writer blocks
		return nil, nil, fmt.Errorf("the sandbox's spec is %d bytes: too many paths to hide", len(data))
	}
	if r, w, err = os.Pipe(); err != nil {
		return nil, nil, err
	}
	if _, err := w.Write(data); err != nil {
		closeFiles(r, w)
		return nil, nil, err
	}
	return r, w, nil
}

// Describe is how status shows the sandbox of a server run as cred (Describe).
func (s *Sandbox) Describe(cred *syscall.Credential) string {
	uid := uint32(os.Getuid())
	if cred != nil {
		uid = cred.Uid
	}
	return Describe(s.Layers, uid)
}
