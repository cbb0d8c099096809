package policy

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// Capability is a Linux capability, by its bit number in the capability sets.
type Capability struct {
	Bit  uint
	Name string
}

// The capabilities a controller running stdio servers as another user needs, and why.
var (
	// CapChown hands each server's HOME to the server's user, and takes it back to remove it.
	CapChown = Capability{0, "CAP_CHOWN"}
	// CapKill signals a server's process group, which belongs to another user.
	CapKill = Capability{5, "CAP_KILL"}
	// CapSetgid sets the server's group and drops the controller's supplementary groups.
	CapSetgid = Capability{6, "CAP_SETGID"}
	// CapSetuid sets the server's user.
	CapSetuid = Capability{7, "CAP_SETUID"}
)

// NeededCapabilities are the capabilities Credential needs in the controller's effective set:
// CAP_CHOWN only when each server gets a HOME of its own (Home empty).
func (iso *Isolation) NeededCapabilities() []Capability {
	need := []Capability{CapSetuid, CapSetgid, CapKill}
	if iso.Home == "" {
		need = append(need, CapChown)
	}
	return need
}

// CheckCapabilities refuses a Credential the controller cannot switch to: it names every
// needed capability missing from the process's effective set (/proc/self/status, CapEff;
// outside Linux, it asks for root).
func (iso *Isolation) CheckCapabilities() error {
	if iso.Credential == nil {
		return nil
	}
	if runtime.GOOS != "linux" { // no capability sets to read: root alone may switch users
		if os.Geteuid() != 0 {
			return fmt.Errorf("running stdio servers as uid %d needs the controller to run as root (it runs as uid %d)", iso.Credential.Uid, os.Geteuid())
		}
		return nil
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return fmt.Errorf("reading the controller's capabilities: %w", err)
	}
	eff, err := EffectiveCapabilities(string(status))
	if err != nil {
		return fmt.Errorf("/proc/self/status: %w", err)
	}
	if missing := MissingCapabilities(eff, iso.NeededCapabilities()); len(missing) > 0 {
		return fmt.Errorf("running stdio servers as uid %d needs %s in the controller's effective capabilities; it lacks %s",
			iso.Credential.Uid, capNames(iso.NeededCapabilities()), capNames(missing))
	}
	return nil
}

// EffectiveCapabilities is the CapEff mask of a /proc/<pid>/status text.
func EffectiveCapabilities(status string) (uint64, error) {
	sc := bufio.NewScanner(strings.NewReader(status))
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), ":")
		if !ok || name != "CapEff" {
			continue
		}
		mask, err := strconv.ParseUint(strings.TrimSpace(value), 16, 64)
		if err != nil {
			return 0, fmt.Errorf("CapEff %q: not a hexadecimal mask", strings.TrimSpace(value))
		}
		return mask, nil
	}
	return 0, errors.New("no CapEff line")
}

// MissingCapabilities are those of need whose bit is not set in mask.
func MissingCapabilities(mask uint64, need []Capability) []Capability {
	var missing []Capability
	for _, c := range need {
		if mask&(1<<c.Bit) == 0 {
			missing = append(missing, c)
		}
	}
	return missing
}

func capNames(caps []Capability) string {
	names := make([]string, len(caps))
	for i, c := range caps {
		names[i] = c.Name
	}
	return strings.Join(names, ", ")
}

// reclaim gives the directory name in root, and every directory below it, back to the
// controller's user (mode 0700), top down, so that a controller with CAP_CHOWN but without
// CAP_DAC_OVERRIDE can remove what a server of another user left there. Each directory is the
// controller's before its entries are read, and is worked on through the directory above it
// (os.Root): a link is never followed, and one swapped in meanwhile leads nowhere outside root.
func reclaim(root *os.Root, name string) error {
	if err := root.Lchown(name, os.Geteuid(), os.Getegid()); err != nil {
		return err
	}
	if info, err := root.Lstat(name); err != nil || !info.IsDir() {
		return err // a file or a link goes with its directory's write permission
	}
	dir, err := root.OpenRoot(name)
	if err != nil {
		return err
	}
	defer dir.Close()
	if err := dir.Chmod(".", 0o700); err != nil {
		return err
	}
	entries, err := fs.ReadDir(dir.FS(), ".")
	if err != nil {
		return err
	}
	var first error
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if err := reclaim(dir, e.Name()); err != nil && first == nil {
			first = err
		}
	}
	return first
}
