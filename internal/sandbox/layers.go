// Package sandbox puts each stdio server in a sandbox of its own: a user namespace mapping the
// server to a uid of its project's own, a PID namespace with its own /proc, and a mount
// namespace where everything outside its HOME and a private /tmp is read-only and the
// controller's credentials are not there. The namespaces are made by the kernel at clone
// (the spawner's SysProcAttr); what must happen inside them before the server runs (mounts,
// dropping the capabilities the user namespace gave) is done by a small init: the process's
// own binary started again under the name InitName, which does its work in a package init
// function and then executes the server in its place. Any binary linking this package, the
// controller's and every test binary alike, can so be a sandbox's init.
//
// Which layers are in force depends on the kernel and on the controller's privileges: Probe
// learns the facts once, by starting an init that tries each step, and Decide names every
// layer in force and every one that is not, with why (never a layer silently skipped).
package sandbox

import (
	"fmt"
	"strings"
	"syscall"
)

// Layer names one part of the sandbox.
type Layer string

// The layers, in the order they are reported.
const (
	// LayerUID: the servers of each project run as a uid of their own (--server-uid-range).
	LayerUID Layer = "uid"
	// LayerPID: a PID namespace and a /proc of its own, so no other server's /proc/<pid> is
	// in reach.
	LayerPID Layer = "pid"
	// LayerMount: read-only outside HOME, a private /tmp, the controller's credentials hidden.
	LayerMount Layer = "mount"
	// LayerLandlock: the kernel's Landlock bounds writes to HOME, /tmp and /dev as well.
	LayerLandlock Layer = "landlock"
	// LayerNetwork: a network namespace whose only way out is the controller's proxy
	// (policy.Proxy), which applies the egress policy HTTP servers obey.
	LayerNetwork Layer = "network"
	// LayerLimits: memory, process and CPU limits of each server's own (cgroups).
	LayerLimits Layer = "limits"
)

// Layers are all the layers, in the order they are reported.
var Layers = []Layer{LayerUID, LayerPID, LayerMount, LayerLandlock, LayerNetwork, LayerLimits}

// Facts are what the controller learned of its kernel and its privileges (Probe). An empty
// error string means the step worked.
type Facts struct {
	// Enabled is the controller's setting (--sandbox): off, no layer is in force.
	Enabled bool
	// UserNS is why a server's user, PID and mount namespaces cannot be made ("" if they can).
	UserNS string
	// MapOthers reports whether the controller may map a server to another uid than its own
	// (CAP_SETUID and CAP_SETGID).
	MapOthers bool
	// UIDRange reports whether --server-uid-range is set.
	UIDRange bool
	// Proc is why a /proc of the sandbox's own cannot be mounted.
	Proc string
	// Network is why a network namespace of the sandbox's own cannot be used.
	Network string
	// ReadOnly is why the sandbox's mounts cannot be made read-only, or /tmp private.
	ReadOnly string
	// LandlockABI is the kernel's Landlock ABI version (0: none).
	LandlockABI int
	// Landlock is why Landlock is not available ("" when LandlockABI > 0).
	Landlock string
	// Cgroups is why the servers cannot have cgroups of their own (memory, pids, cpu).
	Cgroups string
	cgroups cgroups // where they are made
}

// cgroups are the directories the servers' cgroups are made in, by v1 controller.
type cgroups map[string]string

// Status is one layer and whether it is in force; Why says why not.
type Status struct {
	Layer   Layer
	InForce bool
	Why     string
}

// Decide says, from the facts, which layers are in force and why each other one is not.
func Decide(f Facts) []Status {
	out := make([]Status, 0, len(Layers))
	for _, l := range Layers {
		why := whyNot(l, f)
		out = append(out, Status{Layer: l, InForce: why == "", Why: why})
	}
	return out
}

// whyNot is why layer l is not in force, "" when it is.
func whyNot(l Layer, f Facts) string {
	switch {
	case !f.Enabled:
		return "the sandbox is off (--sandbox=false)"
	case f.UserNS != "":
		return "no user namespace: " + f.UserNS
	case l == LayerLimits && f.Cgroups != "":
		return "no cgroups of their own: " + f.Cgroups
	}
	switch l {
	case LayerUID:
		if !f.MapOthers {
			return "the controller cannot map another uid (no CAP_SETUID and CAP_SETGID): servers run as its own user"
		}
		if !f.UIDRange {
			return "no --server-uid-range: the servers of every project share one uid"
		}
	case LayerPID:
		if f.Proc != "" {
			return "no /proc of its own: " + f.Proc
		}
	case LayerNetwork:
		if f.Network != "" {
			return "no network namespace of its own: " + f.Network
		}
	case LayerMount:
		if f.ReadOnly != "" {
			return f.ReadOnly
		}
	case LayerLandlock:
		if f.LandlockABI < 1 {
			return "the kernel has no Landlock: " + f.Landlock
		}
	}
	return ""
}

// Summary is the layers in one line, as logs and status show them: those in force, then each
// other one with why.
func Summary(statuses []Status) string {
	var in, out []string
	for _, s := range statuses {
		if s.InForce {
			in = append(in, string(s.Layer))
		} else {
			out = append(out, fmt.Sprintf("%s (%s)", s.Layer, s.Why))
		}
	}
	var b strings.Builder
	if len(in) > 0 {
		b.WriteString("in force: " + strings.Join(in, ", "))
	}
	if len(out) > 0 {
		if b.Len() > 0 {
			b.WriteString("; ")
		}
		b.WriteString("not in force: " + strings.Join(out, ", "))
	}
	return b.String()
}

// InForce reports whether layer l is in force in statuses.
func InForce(statuses []Status, l Layer) bool {
	for _, s := range statuses {
		if s.Layer == l {
			return s.InForce
		}
	}
	return false
}

// Describe is how status shows a server's sandbox: the layers in force (the uid layer with
// the server's uid), then those that are not, named.
func Describe(statuses []Status, uid uint32) string {
	var in, out []string
	for _, s := range statuses {
		switch {
		case s.InForce && s.Layer == LayerUID:
			in = append(in, fmt.Sprintf("uid %d", uid))
		case s.InForce:
			in = append(in, string(s.Layer))
		default:
			out = append(out, string(s.Layer))
		}
	}
	if len(in) == 0 {
		return "none; missing: " + strings.Join(out, ", ")
	}
	if len(out) == 0 {
		return strings.Join(in, ", ")
	}
	return strings.Join(in, ", ") + "; missing: " + strings.Join(out, ", ")
}

// New is the sandbox the facts allow: uids from r (nil: none) when LayerUID is in force,
// servers mapped to fallback otherwise (nil: the controller's own user), hide kept from every
// server, each server held to limits when LayerLimits is in force.
func New(f Facts, r *Range, fallback *syscall.Credential, hide []string, limits Limits) *Sandbox {
	s := &Sandbox{Layers: Decide(f), Fallback: fallback, Hide: hide, Limits: limits}
	if InForce(s.Layers, LayerLimits) {
		s.cgroups = f.cgroups
	}
	if r != nil && InForce(s.Layers, LayerUID) {
		s.UIDs = NewUIDs(*r)
	}
	return s
}

// Limits are what one server may use: bytes of memory, processes, CPUs (0: no limit of its
// own).
type Limits struct {
	Memory int64
	Pids   int64
	CPU    float64
}
