package sandbox

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// InitName is argv[0] of a sandbox's init: a process started under this name does the
// sandbox's steps and executes the server (argv[1:]) in its place, before any main runs.
const InitName = "projectmcp-sandbox-init"

// specFD is the descriptor the init reads its Spec from (exec.Cmd's first ExtraFiles).
const specFD = 3

// Spec is what an init does inside the namespaces before the server runs.
type Spec struct {
	// Home is the server's HOME, the one writable directory besides /tmp.
	Home string `json:"home"`
	// Hide are paths the server must not see: the controller's kubeconfig, its service
	// account's token, its key files. A directory is covered by an empty one, a file by an
	// empty file; a path that does not exist is left as it is.
	Hide []string `json:"hide,omitempty"`
	// AllowWrite are paths the server may write besides Home and /tmp; DenyWrite paths it may
	// not write even there (Wants, resolved).
	AllowWrite []string `json:"allowWrite,omitempty"`
	DenyWrite  []string `json:"denyWrite,omitempty"`
	// Proc, Network, ReadOnly and Landlock say which steps to take, as the probe found them possible
	// (Decide): a step the kernel refused at startup is not tried again for every server.
	Proc     bool `json:"proc,omitempty"`
	Network  bool `json:"network,omitempty"`
	ReadOnly bool `json:"readOnly,omitempty"`
	Landlock bool `json:"landlock,omitempty"`
	// Probe: take every step, print what each gave (probeResult) and exit.
	Probe bool `json:"probe,omitempty"`
}

// probeResult is what a probing init prints: why each step failed, "" when it worked.
type probeResult struct {
	Proc        string `json:"proc"`
	Network     string `json:"network"`
	ReadOnly    string `json:"readOnly"`
	LandlockABI int    `json:"landlockABI"`
	Landlock    string `json:"landlock"`
}

func init() {
	if len(os.Args) > 0 && os.Args[0] == InitName {
		os.Exit(runInit())
	}
}

// runInit is the init's life: read the spec, take its steps, execute the server. It returns
// only on failure (or after a probe), with the exit code; what failed goes to stderr, which
// the controller logs as the server's.
func runInit() int {
	runtime.LockOSThread() // capabilities, no_new_privs and Landlock are the calling thread's: exec from it
	spec, err := readSpec()
	if err != nil {
		fmt.Fprintln(os.Stderr, "sandbox:", err)
		return 126
	}
	if spec.Probe {
		return probe(spec)
	}
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "sandbox: no command")
		return 126
	}
	// Held before the mounts: a command under /tmp is covered by the private one.
	exe, _ := unix.Open(os.Args[1], unix.O_PATH|unix.O_CLOEXEC, 0)
	if err := enter(spec); err != nil {
		fmt.Fprintln(os.Stderr, "sandbox:", err)
		return 126
	}
	path := os.Args[1]
	if unix.Access(path, unix.X_OK) != nil && exe >= 0 {
		// The command's own file, though its directory is out of sight. Kept open across
		// execve: a script's interpreter opens it by this name.
		if _, err := unix.FcntlInt(uintptr(exe), unix.F_SETFD, 0); err == nil {
			path = fmt.Sprintf("/proc/self/fd/%d", exe)
		}
	}
	err = unix.Exec(path, os.Args[2:], os.Environ())
	fmt.Fprintf(os.Stderr, "sandbox: executing %s: %v\n", os.Args[1], err)
	return 127
}

func readSpec() (Spec, error) {
	f := os.NewFile(specFD, "spec")
	defer f.Close() // the server never sees it
	var spec Spec
	data, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err == nil {
		err = json.Unmarshal(data, &spec)
	}
	if err != nil {
		return spec, fmt.Errorf("reading the sandbox's spec: %w", err)
	}
	return spec, nil
}

// enter takes the spec's steps, each of which must work: the probe said it would.
func enter(spec Spec) error {
	if err := private(); err != nil {
		return err
	}
	if spec.Proc {
		if err := mountProc(); err != nil {
			return err
		}
	}
	if spec.Network {
		if err := openNetwork(); err != nil {
			return err
		}
	}
	if spec.ReadOnly {
		if err := confine(spec); err != nil {
			return err
		}
		_ = os.Setenv("TMPDIR", "/tmp") // the controller's may be read-only here
	}
	if err := dropPrivileges(); err != nil {
		return err
	}
	if spec.Landlock {
		if _, err := restrictWrites(spec.Home, spec.AllowWrite); err != nil {
			return err
		}
	}
	return nil
}

// probe takes each step, whatever the others gave, and prints the result.
func probe(spec Spec) int {
	var r probeResult
	r.Proc = errText(private())
	if r.Proc == "" {
		r.Proc = errText(mountProc())
	}
	r.Network = errText(loopbackUp())
	r.ReadOnly = errText(confine(spec))
	if err := dropPrivileges(); err != nil {
		r.Landlock = err.Error()
	} else {
		r.LandlockABI, err = restrictWrites(spec.Home, nil)
		r.Landlock = errText(err)
	}
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		return 1
	}
	return 0
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// private keeps the sandbox's mounts from propagating back to the controller's namespace.
func private() error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making the mounts private: %w", err)
	}
	return nil
}

// mountProc mounts a /proc of the sandbox's PID namespace over the controller's: it shows the
// sandbox's processes alone.
func mountProc() error {
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mounting proc: %w", err)
	}
	return nil
}

// confine hides spec.Hide, makes every mount read-only, then gives the server a private /tmp
// and its HOME writable again. HOME is held open first: it may be under /tmp, which the
// private one covers, and is then bound again at its path inside the new /tmp.
func confine(spec Spec) error {
	home := -1
	if spec.Home != "" {
		fd, err := unix.Open(spec.Home, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("opening HOME: %w", err)
		}
		defer unix.Close(fd)
		home = fd
	}
	for _, p := range spec.Hide {
		if err := hide(p); err != nil {
			return err
		}
	}
	ro := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}
	if err := unix.MountSetattr(unix.AT_FDCWD, "/", unix.AT_RECURSIVE, ro); err != nil {
		return fmt.Errorf("making the filesystem read-only (mount_setattr): %w", err)
	}
	if err := unix.Mount("tmpfs", "/tmp", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777"); err != nil {
		return fmt.Errorf("mounting a private /tmp: %w", err)
	}
	if home < 0 {
		return nil
	}
	if err := os.MkdirAll(spec.Home, 0o711); err != nil { // a HOME under /tmp, covered now
		return fmt.Errorf("making HOME's place: %w", err)
	}
	if err := unix.Mount(fmt.Sprintf("/proc/self/fd/%d", home), spec.Home, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("binding HOME: %w", err)
	}
	if err := rebind(spec.Home, false); err != nil {
		return fmt.Errorf("making HOME writable: %w", err)
	}
	return bindOwn(spec)
}

// bindOwn makes the server's own AllowWrite paths writable, then its DenyWrite paths
// read-only; a path that is not there is left as it is.
func bindOwn(spec Spec) error {
	for _, l := range []struct {
		paths    []string
		readOnly bool
	}{{spec.AllowWrite, false}, {spec.DenyWrite, true}} {
		for _, p := range l.paths {
			if unix.Access(p, unix.F_OK) != nil {
				continue
			}
			if err := unix.Mount(p, p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
				return fmt.Errorf("binding %s: %w", p, err)
			}
			if err := rebind(p, l.readOnly); err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
		}
	}
	return nil
}

// rebind makes the mounts at path and under it read-only, or writable.
func rebind(path string, readOnly bool) error {
	attr := &unix.MountAttr{Attr_clr: unix.MOUNT_ATTR_RDONLY}
	if readOnly {
		attr = &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}
	}
	return unix.MountSetattr(unix.AT_FDCWD, path, unix.AT_RECURSIVE, attr)
}

// hide covers path: a directory with an empty read-only tmpfs, a file with /dev/null.
func hide(path string) error {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nil //nolint:nilerr // nothing there to hide: a path that does not exist is left as it is
	}
	var err error
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		err = unix.Mount("tmpfs", path, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=4k,mode=0555")
	} else {
		err = unix.Mount("/dev/null", path, "", unix.MS_BIND, "")
	}
	if err != nil {
		return fmt.Errorf("hiding %s: %w", path, err)
	}
	return nil
}

// dropPrivileges gives up every capability the user namespace gave the init, for good: the
// server runs as the namespace's root, which owns nothing outside it, and without the
// capabilities it would need to undo the mounts. With the inheritable, ambient and bounding
// sets empty, executing the server grants it none either; no_new_privs keeps a set-uid file
// from granting any.
func dropPrivileges() error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clearing the ambient capabilities: %w", err)
	}
	for c := 0; c <= unix.CAP_LAST_CAP; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && err != unix.EINVAL {
			return fmt.Errorf("dropping capability %d from the bounding set: %w", c, err)
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var none [2]unix.CapUserData
	if err := unix.Capset(&hdr, &none[0]); err != nil {
		return fmt.Errorf("dropping the capabilities: %w", err)
	}
	return nil
}
