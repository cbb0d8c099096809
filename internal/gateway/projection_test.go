package gateway

import (
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/registry"
)

func tool(name string, schema any) *mcp.Tool {
	return &mcp.Tool{Name: name, Description: "d " + name, InputSchema: schema, Meta: mcp.Meta{"upstream": true}}
}

var object = map[string]any{"type": "object"}

func state(phase v1alpha1.ServerPhase, tools ...*mcp.Tool) registry.ServerState {
	return registry.ServerState{HasConn: true, Conn: conn.Snapshot{Phase: phase, Tools: tools}}
}

func TestProjection(t *testing.T) {
	servers := map[string]registry.ServerState{
		"a":    state(v1alpha1.PhaseReady, tool("x y", object), tool("x_y", object), tool("bad", map[string]any{"type": "string"}), tool("none", nil)),
		"b":    state(v1alpha1.PhaseDisconnected, tool("echo", object)),
		"dead": state(v1alpha1.PhaseFailed, tool("echo", object)),
		"idle": {Reclaimed: true},
	}
	want, notes := Projection(servers)
	var names []string
	for n := range want {
		names = append(names, n)
	}
	sort.Strings(names)
	if !slices.Equal(names, []string{"a__x_y", "a__x_y_2", "b__echo"}) {
		t.Fatalf("names %v", names)
	}
	if w := want["a__x_y"]; w.raw != "x y" || w.tool.Meta != nil || w.tool.Description != "d x y" {
		t.Fatalf("the first in (server, raw) order keeps the plain name, _meta is dropped: %+v", w)
	}
	if w := want["a__x_y_2"]; w.raw != "x_y" {
		t.Fatalf("the clash gets the suffix: %+v", w)
	}
	var msgs []string
	for _, n := range notes {
		msgs = append(msgs, n.Server+": "+n.Message)
	}
	all := strings.Join(msgs, "\n")
	for _, frag := range []string{`a: tool "x_y" is "a__x_y_2"`, `a: tool "bad" skipped`, `a: tool "none" skipped: no input schema`} {
		if !strings.Contains(all, frag) {
			t.Errorf("notes lack %q:\n%s", frag, all)
		}
	}
	again, _ := Projection(servers)
	if d := cmp.Diff(want, again, cmp.AllowUnexported(wanted{})); d != "" {
		t.Fatalf("the projection is not a pure function:\n%s", d)
	}
}

// A schema the server library would panic on is refused by addTool, not by a crash.
func TestAddToolRecovers(t *testing.T) {
	s := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	if err := addTool(s, &mcp.Tool{Name: "x"}, nil); err == nil {
		t.Fatal("a nil schema must be an error")
	}
}
