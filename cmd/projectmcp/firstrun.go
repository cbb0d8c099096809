package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
)

// defaultFirstRunTimeout bounds how long dev waits for every enabled server's first connect
// before it prints the endpoint anyway. npx downloading a package on a machine whose npm cache
// is empty takes tens of seconds; a server that needs longer is still served afterwards (its
// sessions get tools/list_changed when its tools arrive).
const defaultFirstRunTimeout = 2 * time.Minute

// pollEvery is how often dev and connect read the ProjectMCP while they wait for it.
const pollEvery = 100 * time.Millisecond

// packageRunners are the commands that may download the server's package before it starts.
var packageRunners = []string{"npx", "uvx", "bunx", "pnpx", "pipx"}

// serverLine is what dev says of one enabled server's state: the phases `projectmcp status`
// shows, in words, with what explains a wait. "" before the controller has written the
// server's status.
func serverLine(spec v1alpha1.MCPServer, st *v1alpha1.ServerStatus) string {
	if st == nil {
		return ""
	}
	name := spec.Name
	switch st.Phase {
	case v1alpha1.PhaseConnecting:
		if st.ReconnectAttempts > 0 {
			return fmt.Sprintf("%s: reconnecting (attempt %d): %s", name, st.ReconnectAttempts, dash(st.LastError))
		}
		if runner := packageRunner(spec); runner != "" {
			return fmt.Sprintf("%s: starting (%s may be downloading the package on a first run)", name, runner)
		}
		return name + ": starting"
	case v1alpha1.PhaseReady:
		return readyLine(name, st)
	case v1alpha1.PhaseDisconnected:
		return fmt.Sprintf("%s: disconnected, retrying: %s", name, dash(st.LastError))
	case v1alpha1.PhaseFailed:
		return fmt.Sprintf("%s: failed: %s", name, dash(st.LastError))
	}
	return fmt.Sprintf("%s: %s", name, strings.ToLower(string(st.Phase)))
}

// readyLine says a server is ready with its tool count and, on a line of its own, its status
// message: what status notes of it, such as a tool left out, or a description or instructions
// Claude Code cuts, is said when the server comes up rather than when it bites.
func readyLine(name string, st *v1alpha1.ServerStatus) string {
	line := fmt.Sprintf("%s: ready, %d tools", name, st.ToolCount)
	if st.ToolCount == 1 {
		line = name + ": ready, 1 tool"
	}
	if st.Message != "" {
		line += "\n" + name + ": " + st.Message
	}
	return line
}

// packageRunner is the package runner a stdio server starts through, or "".
func packageRunner(spec v1alpha1.MCPServer) string {
	if spec.Stdio == nil {
		return ""
	}
	if base := filepath.Base(spec.Stdio.Command); slices.Contains(packageRunners, base) {
		return base
	}
	return ""
}

// firstConnectEnded reports whether a server's first connect has ended, one way or the other.
func firstConnectEnded(st *v1alpha1.ServerStatus) bool {
	return st != nil && (st.Phase == v1alpha1.PhaseReady || st.Phase == v1alpha1.PhaseFailed || st.Phase == v1alpha1.PhaseIdle)
}

// firstRun is what dev knows of a project's first start: the lines to print for each enabled
// server (in spec order), whether the endpoint is written for the current spec, and the
// servers still starting.
type firstRun struct {
	lines    map[string]string // by server name
	endpoint bool
	starting []string
}

// done reports whether dev can print the endpoint: `connect --write` would succeed, and every
// enabled server is ready or has failed.
func (r firstRun) done() bool { return r.endpoint && len(r.starting) == 0 }

// readFirstRun reads a ProjectMCP's progress through its first start. Status written for an
// older generation counts as not written yet.
func readFirstRun(obj *v1alpha1.ProjectMCP) firstRun {
	current := obj.Status.ObservedGeneration == obj.Generation
	r := firstRun{lines: map[string]string{}, endpoint: current && obj.Status.Endpoint != ""}
	for _, spec := range obj.Spec.Servers {
		if spec.Disabled {
			continue
		}
		var st *v1alpha1.ServerStatus
		if current {
			if i := slices.IndexFunc(obj.Status.Servers, func(s v1alpha1.ServerStatus) bool { return s.Name == spec.Name }); i >= 0 {
				st = &obj.Status.Servers[i]
			}
		}
		if line := serverLine(spec, st); line != "" {
			r.lines[spec.Name] = line
		}
		if !firstConnectEnded(st) {
			r.starting = append(r.starting, spec.Name)
		}
	}
	return r
}

// awaitFirstRun prints each server's state as it changes, one line per change, until the
// endpoint is written and every enabled server's first connect has ended, or bound passes
// (then it says which servers are still starting). A bound of 0 waits for the endpoint only.
// It returns the error of the manager or the mirror if one stops first (taken from errs), and
// nil otherwise (also when ctx ends).
func awaitFirstRun(ctx context.Context, c client.Client, key types.NamespacedName, bound time.Duration, errs <-chan error, stderr io.Writer) error {
	start := time.Now()
	said := map[string]string{} // the last line printed for each server
	return poll(ctx, errs, func() bool {
		obj := &v1alpha1.ProjectMCP{}
		if err := c.Get(ctx, key, obj); err != nil {
			return false
		}
		r := readFirstRun(obj)
		for _, spec := range obj.Spec.Servers {
			if line, ok := r.lines[spec.Name]; ok && said[spec.Name] != line {
				said[spec.Name] = line
				fmt.Fprintln(stderr, line)
			}
		}
		switch {
		case r.done(), r.endpoint && bound == 0:
			return true
		case r.endpoint && time.Since(start) >= bound:
			fmt.Fprintf(stderr, "Still starting after %s: %s. The endpoint serves now; sessions get tools/list_changed when their tools arrive.\n",
				bound, strings.Join(r.starting, ", "))
			return true
		}
		return false
	})
}

// notesEvery is how often dev reads the ProjectMCP, once it runs, for notes to say.
const notesEvery = time.Second

// readyNotes are the status messages of the enabled servers that are Ready, by server name:
// what dev says of a server as it comes up (readyLine), a server added or rebuilt later
// included.
func readyNotes(obj *v1alpha1.ProjectMCP) map[string]string {
	notes := map[string]string{}
	if obj.Status.ObservedGeneration != obj.Generation {
		return notes // of an older spec: the next status says the current one's
	}
	for _, st := range obj.Status.Servers {
		if st.Phase == v1alpha1.PhaseReady && st.Message != "" {
			notes[st.Name] = st.Message
		}
	}
	return notes
}

// newNotes are the lines to print for the notes in now that were not in said (in server-name
// order), and said updated: a note said once is not said again while it stands.
func newNotes(said, now map[string]string) []string {
	var lines []string
	for _, name := range slices.Sorted(maps.Keys(now)) {
		if said[name] != now[name] {
			lines = append(lines, name+": "+now[name])
		}
	}
	clear(said)
	maps.Copy(said, now)
	return lines
}

// watchNotes prints each Ready server's status message when it changes, until ctx ends (false,
// nil) or the manager or the mirror stops (true, its error): a server added to the file after
// the first run, whose description Claude Code would cut, is said too. The notes standing when
// it starts were said with the ready lines.
func watchNotes(ctx context.Context, c client.Client, key types.NamespacedName, errs <-chan error, stderr io.Writer) (took bool, err error) {
	said := map[string]string{}
	obj := &v1alpha1.ProjectMCP{}
	if err := c.Get(ctx, key, obj); err == nil {
		said = readyNotes(obj)
	}
	tick := time.NewTicker(notesEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return false, nil
		case err := <-errs:
			return true, err
		case <-tick.C:
		}
		obj := &v1alpha1.ProjectMCP{}
		if err := c.Get(ctx, key, obj); err != nil {
			continue
		}
		for _, line := range newNotes(said, readyNotes(obj)) {
			fmt.Fprintln(stderr, line)
		}
	}
}

// poll calls step now and every pollEvery until it reports done or ctx ends (nil), or the
// manager or the mirror stops first (its error, taken from errs).
func poll(ctx context.Context, errs <-chan error, step func() bool) error {
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for !step() {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errs:
			if err == nil {
				err = errors.New("stopped while starting")
			}
			return err
		case <-tick.C:
		}
	}
	return nil
}
