package sandbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dsh-dev/projectmcp/internal/spawn"
)

// probeTimeout bounds the probe's init, which does a few mounts and exits.
const probeTimeout = 10 * time.Second

// Probe learns the facts of this kernel and this process: whether the controller may map
// servers to other users, and what an init started as a server's makes of each
// step (it runs in a throwaway HOME and prints what each step gave). enabled and uidRange
// are the controller's settings, passed on into the facts.
func Probe(enabled, uidRange bool) Facts {
	f := Facts{Enabled: enabled, UIDRange: uidRange, MapOthers: mayMapOthers()}
	if !enabled {
		return f
	}
	home, err := os.MkdirTemp("", "projectmcp-probe-")
	if err != nil {
		f.UserNS = err.Error()
		return f
	}
	defer os.RemoveAll(home)
	r, err := runProbe(home)
	if err != nil {
		f.UserNS = err.Error()
		return f
	}
	f.Proc, f.Network, f.ReadOnly, f.LandlockABI, f.Landlock = r.Proc, r.Network, r.ReadOnly, r.LandlockABI, r.Landlock
	if f.cgroups, err = findCgroups(); err != nil {
		f.Cgroups = err.Error()
	}
	return f
}

// runProbe starts a probing init, as the controller's own user, and reads its result.
func runProbe(home string) (probeResult, error) {
	var r probeResult
	cmd := exec.Command("/proc/self/exe")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	spec := Spec{Home: home, Probe: true}
	pipe, w, err := specPipe(spec)
	if err != nil {
		return r, err
	}
	defer pipe.Close()
	_ = w.Close() // nothing to wait for: the probe has no cgroups
	cmd.Args = []string{InitName}
	cmd.ExtraFiles = []*os.File{pipe}
	cmd.SysProcAttr = namespaces(nil, true)
	p, err := spawn.Start(cmd, nil)
	if err != nil {
		return r, fmt.Errorf("starting a sandbox: %w", err)
	}
	select {
	case <-p.Done():
	case <-time.After(probeTimeout):
		p.Stop(time.Second)
		return r, fmt.Errorf("the probe's sandbox did not end within %s", probeTimeout)
	}
	if err := p.Err(); err != nil {
		return r, fmt.Errorf("the probe's sandbox failed: %w: %s", err, strings.TrimSpace(errOut.String()))
	}
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		return r, fmt.Errorf("the probe's sandbox said %q: %w", out.String(), err)
	}
	return r, nil
}

// mayMapOthers reports whether this process holds CAP_SETUID and CAP_SETGID, which writing a
// user namespace's map to another user than its own takes.
func mayMapOthers() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	const need = 1<<unix.CAP_SETUID | 1<<unix.CAP_SETGID
	return data[0].Effective&need == need
}
