package main

import (
	"maps"
	"slices"
	"testing"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
)

// What dev says of each server while a project starts, and when it prints the endpoint.
func TestReadFirstRun(t *testing.T) {
	npx := v1alpha1.MCPServer{Name: "memory", Stdio: &v1alpha1.StdioServer{Command: "npx", Args: []string{"-y", "@modelcontextprotocol/server-memory"}}}
	local := v1alpha1.MCPServer{Name: "local", Stdio: &v1alpha1.StdioServer{Command: "/usr/bin/fixture"}}
	web := v1alpha1.MCPServer{Name: "web", HTTP: &v1alpha1.HTTPServer{URL: "http://127.0.0.1:3000/mcp"}}
	off := v1alpha1.MCPServer{Name: "off", Disabled: true, Stdio: &v1alpha1.StdioServer{Command: "npx"}}
	status := func(name string, phase v1alpha1.ServerPhase, tools int32, attempts int32, lastErr string) v1alpha1.ServerStatus {
		return v1alpha1.ServerStatus{Name: name, Phase: phase, ToolCount: tools, ReconnectAttempts: attempts, LastError: lastErr}
	}
	for _, tc := range []struct {
		name       string
		generation int64
		observed   int64
		endpoint   string
		servers    []v1alpha1.MCPServer
		status     []v1alpha1.ServerStatus
		lines      map[string]string
		starting   []string
		done       bool
	}{{
		name:     "before the first reconcile",
		servers:  []v1alpha1.MCPServer{npx},
		starting: []string{"memory"},
	}, {
		name: "npx still downloading", generation: 1, observed: 1, endpoint: "http://e",
		servers:  []v1alpha1.MCPServer{npx, local, off},
		status:   []v1alpha1.ServerStatus{status("memory", v1alpha1.PhaseConnecting, 0, 0, ""), status("local", v1alpha1.PhaseReady, 3, 0, ""), status("off", v1alpha1.PhaseDisabled, 0, 0, "")},
		lines:    map[string]string{"memory": "memory: starting (npx may be downloading the package on a first run)", "local": "local: ready, 3 tools"},
		starting: []string{"memory"},
	}, {
		name: "every first connect ended", generation: 2, observed: 2, endpoint: "http://e",
		servers: []v1alpha1.MCPServer{npx, web},
		status:  []v1alpha1.ServerStatus{status("memory", v1alpha1.PhaseReady, 9, 0, ""), status("web", v1alpha1.PhaseFailed, 0, 5, "connection refused")},
		lines:   map[string]string{"memory": "memory: ready, 9 tools", "web": "web: failed: connection refused"},
		done:    true,
	}, {
		name: "a ready server's notes on a line of their own", generation: 1, observed: 1, endpoint: "http://e",
		servers: []v1alpha1.MCPServer{local, web},
		status: []v1alpha1.ServerStatus{
			{Name: "local", Phase: v1alpha1.PhaseReady, ToolCount: 1, Message: `tool "x": a description of 3000 bytes, over the 2048 (2 KB) Claude Code keeps`},
			{Name: "web", Phase: v1alpha1.PhaseFailed, LastError: "refused", Message: "not shown"},
		},
		lines: map[string]string{
			"local": "local: ready, 1 tool\nlocal: tool \"x\": a description of 3000 bytes, over the 2048 (2 KB) Claude Code keeps",
			"web":   "web: failed: refused",
		},
		done: true,
	}, {
		name: "retrying", generation: 1, observed: 1, endpoint: "http://e",
		servers:  []v1alpha1.MCPServer{web, local},
		status:   []v1alpha1.ServerStatus{status("web", v1alpha1.PhaseConnecting, 0, 2, "connection refused"), status("local", v1alpha1.PhaseDisconnected, 3, 0, "")},
		lines:    map[string]string{"web": "web: reconnecting (attempt 2): connection refused", "local": "local: disconnected, retrying: -"},
		starting: []string{"web", "local"},
	}, {
		name: "servers ready, endpoint not written yet", generation: 1, observed: 1,
		servers: []v1alpha1.MCPServer{local},
		status:  []v1alpha1.ServerStatus{status("local", v1alpha1.PhaseReady, 3, 0, "")},
		lines:   map[string]string{"local": "local: ready, 3 tools"},
	}, {
		name: "status of an older generation counts as none", generation: 3, observed: 2, endpoint: "http://e",
		servers:  []v1alpha1.MCPServer{local},
		status:   []v1alpha1.ServerStatus{status("local", v1alpha1.PhaseReady, 3, 0, "")},
		starting: []string{"local"},
	}, {
		name: "no enabled server", generation: 1, observed: 1, endpoint: "http://e",
		servers: []v1alpha1.MCPServer{off},
		done:    true,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			obj := &v1alpha1.ProjectMCP{}
			obj.Generation = tc.generation
			obj.Spec.Servers = tc.servers
			obj.Status = v1alpha1.ProjectMCPStatus{ObservedGeneration: tc.observed, Endpoint: tc.endpoint, Servers: tc.status}
			r := readFirstRun(obj)
			if tc.lines == nil {
				tc.lines = map[string]string{}
			}
			if !maps.Equal(r.lines, tc.lines) {
				t.Errorf("lines %q, want %q", r.lines, tc.lines)
			}
			if !slices.Equal(r.starting, tc.starting) {
				t.Errorf("starting %q, want %q", r.starting, tc.starting)
			}
			if r.done() != tc.done {
				t.Errorf("done %v, want %v", r.done(), tc.done)
			}
		})
	}
}

// Once dev runs, it says a Ready server's status message when it changes, once, and again
// when it comes back after it went.
func TestNewNotes(t *testing.T) {
	said := map[string]string{}
	for i, step := range []struct {
		now  map[string]string
		want []string
	}{
		{map[string]string{"a": "long"}, []string{"a: long"}},
		{map[string]string{"a": "long"}, nil},
		{map[string]string{"a": "long", "b": "cut"}, []string{"b: cut"}},
		{map[string]string{"b": "cut, longer", "c": "x"}, []string{"b: cut, longer", "c: x"}},
		{map[string]string{}, nil},
		{map[string]string{"a": "long"}, []string{"a: long"}},
	} {
		if got := newNotes(said, step.now); !slices.Equal(got, step.want) {
			t.Fatalf("step %d: %q, want %q", i, got, step.want)
		}
	}
	obj := &v1alpha1.ProjectMCP{Status: v1alpha1.ProjectMCPStatus{Servers: []v1alpha1.ServerStatus{
		{Name: "a", Phase: v1alpha1.PhaseReady, Message: "long"},
		{Name: "b", Phase: v1alpha1.PhaseFailed, Message: "not ready"},
		{Name: "c", Phase: v1alpha1.PhaseReady},
	}}}
	if got := readyNotes(obj); !maps.Equal(got, map[string]string{"a": "long"}) {
		t.Errorf("readyNotes %q", got)
	}
	obj.Generation = 2
	if got := readyNotes(obj); len(got) != 0 {
		t.Errorf("status of an older generation: %q", got)
	}
}
