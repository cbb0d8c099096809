package sandbox

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// cgroupRoot is where the cgroup hierarchies are mounted.
var cgroupRoot = "/sys/fs/cgroup"

// The cgroup v1 controllers a server's limits use.
var limitControllers = []string{"memory", "pids", "cpu"}

// findCgroups finds the directories this controller makes its servers' cgroups in: in each v1
// hierarchy of limitControllers, a child of the controller's own cgroup (so that the pod's
// limits still bound them all), made with the first server's and removed with the last's. It
// makes one there and removes it again, or says why it cannot.
func findCgroups() (cgroups, error) {
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	paths := ownCgroups(own)
	out := cgroups{}
	for _, ctl := range limitControllers {
		p, ok := paths[ctl]
		if !ok {
			return nil, fmt.Errorf("no cgroup v1 %s hierarchy", ctl)
		}
		dir := filepath.Join(cgroupRoot, ctl, p, fmt.Sprintf("projectmcp-%d", os.Getpid()))
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("making a %s cgroup: %w", ctl, err)
		}
		_ = os.Remove(dir)
		out[ctl] = dir
	}
	return out, nil
}

// groupsMu orders the making and removing of the servers' cgroups and of the directories
// they are made in.
var groupsMu sync.Mutex

// ownCgroups are the paths of this process's cgroups by v1 controller, from /proc/self/cgroup.
func ownCgroups(data []byte) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, ctl := range strings.Split(parts[1], ",") {
			if ctl != "" {
				out[ctl] = parts[2]
			}
		}
	}
	return out
}

// cgroupSeq names the servers' cgroups.
var cgroupSeq atomic.Uint64

// group is one server's cgroup in each controller.
type group struct {
	dirs []string
	mem  string // its memory directory, read for OOM kills
}

// newGroup makes a server's cgroups with limits l.
func (c cgroups) newGroup(l Limits) (*group, error) {
	groupsMu.Lock()
	defer groupsMu.Unlock()
	name := fmt.Sprintf("server-%d", cgroupSeq.Add(1))
	g := &group{}
	for _, ctl := range limitControllers {
		dir := filepath.Join(c[ctl], name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			g.removeLocked()
			return nil, fmt.Errorf("making the server's %s cgroup: %w", ctl, err)
		}
		g.dirs = append(g.dirs, dir)
		if ctl == "memory" {
			g.mem = dir
		}
		if err := setLimit(dir, ctl, l); err != nil {
			g.removeLocked()
			return nil, err
		}
	}
	return g, nil
}

// setLimit writes l's limit of controller ctl in dir.
func setLimit(dir, ctl string, l Limits) error {
	var file, value string
	switch {
	case ctl == "memory" && l.Memory > 0:
		file, value = "memory.limit_in_bytes", strconv.FormatInt(l.Memory, 10)
	case ctl == "pids" && l.Pids > 0:
		file, value = "pids.max", strconv.FormatInt(l.Pids, 10)
	case ctl == "cpu" && l.CPU > 0:
		const period = 100000 // µs, the kernel's default
		file, value = "cpu.cfs_quota_us", strconv.FormatInt(int64(l.CPU*period), 10)
	default:
		return nil
	}
	if err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0o644); err != nil {
		return fmt.Errorf("setting the server's %s: %w", file, err)
	}
	return nil
}

// add moves process pid into the group.
func (g *group) add(pid int) error {
	for _, dir := range g.dirs {
		if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			return fmt.Errorf("moving the server into %s: %w", dir, err)
		}
	}
	return nil
}

// oomKilled reports whether the kernel killed a process of the group for passing its memory
// limit.
func (g *group) oomKilled() bool {
	data, err := os.ReadFile(filepath.Join(g.mem, "memory.oom_control"))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if n, ok := strings.CutPrefix(line, "oom_kill "); ok {
			return n != "0"
		}
	}
	return false
}

// remove removes the group's cgroups: called once every process in them is gone (the server
// was PID 1 of its namespace, so the kernel ended the rest with it). The directory they were
// made in goes with the last group.
func (g *group) remove() {
	groupsMu.Lock()
	defer groupsMu.Unlock()
	g.removeLocked()
}

func (g *group) removeLocked() {
	for _, dir := range g.dirs {
		_ = os.Remove(dir)
		_ = os.Remove(filepath.Dir(dir)) // fails while another server's group is in it
	}
}
