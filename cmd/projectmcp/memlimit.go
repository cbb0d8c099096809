package main

import (
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/go-logr/logr"
)

// The controller's RSS follows the Go collector's heap goal, which with the default GOGC is
// about twice the live heap: a controller whose live heap and stacks would fit its pod's
// memory limit can still be killed for the headroom the collector takes. A soft memory limit
// (GOMEMLIMIT) makes the collector work harder as the process nears it, rather than letting
// the kernel end it. So unless GOMEMLIMIT is set (the runtime applies it; "off" turns the
// limit off), the controller sets one itself at memoryLimitShare of its memory limit, found
// as below. The share leaves room for what the runtime does not count (the binary, C
// libraries, a stdio server's own processes are not in it at all: they are processes of
// their own in the same container, and each needs its own room under the pod's limit).
const memoryLimitShare = 0.9

// memoryLimitEnv carries the container's memory limit in bytes, as the downward API's
// resourceFieldRef (limits.memory) writes it; the Helm chart sets it.
const memoryLimitEnv = "PROJECTMCP_MEMORY_LIMIT"

// cgroupMemoryFiles are where the container's memory limit is read when memoryLimitEnv is not
// set: cgroup v2, then v1.
var cgroupMemoryFiles = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

// unboundedMemory is what a limit at or over counts as none: cgroup v1 writes "no limit" as a
// number near 2^63.
const unboundedMemory = int64(1) << 60

// containerMemoryLimit is the container's memory limit and where it was found; 0 when there
// is none.
func containerMemoryLimit(getenv func(string) string, readFile func(string) ([]byte, error)) (int64, string) {
	parse := func(s string) int64 {
		n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil || n <= 0 || n >= unboundedMemory {
			return 0
		}
		return n
	}
	if v := getenv(memoryLimitEnv); v != "" {
		return parse(v), memoryLimitEnv
	}
	for _, f := range cgroupMemoryFiles {
		if data, err := readFile(f); err == nil {
			return parse(string(data)), f // "max" (v2) parses as none
		}
	}
	return 0, ""
}

// setMemoryLimit sets the runtime's soft memory limit from the container's, unless GOMEMLIMIT
// is set; it returns the limit set (0: none).
func setMemoryLimit(log logr.Logger, getenv func(string) string, readFile func(string) ([]byte, error)) int64 {
	if v := getenv("GOMEMLIMIT"); v != "" {
		log.V(1).Info("Soft memory limit from GOMEMLIMIT", "GOMEMLIMIT", v)
		return 0
	}
	limit, source := containerMemoryLimit(getenv, readFile)
	if limit == 0 {
		return 0
	}
	soft := int64(float64(limit) * memoryLimitShare)
	debug.SetMemoryLimit(soft)
	log.Info("Soft memory limit set (GOMEMLIMIT overrides it)", "bytes", soft, "share", memoryLimitShare, "of", limit, "from", source)
	return soft
}

// setControllerMemoryLimit is setMemoryLimit with the process's environment and files.
func setControllerMemoryLimit(log logr.Logger) {
	setMemoryLimit(log, os.Getenv, os.ReadFile)
}
