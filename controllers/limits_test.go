package controllers_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/testenv/harness"
)

// The bounds on what a server may send, through the controller (the suite's bounds: 1 MiB a
// message, 50 pages a list, 64 KiB of schemas a tool): a tool over the schema bound is left out
// and named in the server's status message while its other tools work; a server paging past
// the bound is refused with a lastError naming it; an answer over the message bound fails that
// call alone, on the fast path and through the SDK, with an error naming the bound.
func TestServerBoundsReachStatus(t *testing.T) {
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "bounds", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{
		harness.FixtureServer(t, "wide", "--schema-bytes", "100000"),
		harness.FixtureServer(t, "paged", "--extra-tools", "60", "--page-size", "1"),
		harness.HTTPFixture(t, "typed", "--stateless"),
	}})
	obj := harness.WaitStatus(t, key, 60*time.Second, "wide and typed Ready, paged refused", func(o *v1alpha1.ProjectMCP) bool {
		p, _ := harness.ServerStatusOf(o, "paged")
		return harness.PhaseIs("wide", v1alpha1.PhaseReady)(o) && harness.PhaseIs("typed", v1alpha1.PhaseReady)(o) && p.LastError != ""
	})
	wide, _ := harness.ServerStatusOf(obj, "wide")
	if !strings.Contains(wide.Message, `"wide"`) || !strings.Contains(wide.Message, "--max-schema-bytes (64 KiB)") {
		t.Fatalf("the status message must name the tool and the bound: %q", wide.Message)
	}
	if strings.Contains(wide.Message, "wwwwwwww") {
		t.Fatalf("the status message repeats the server's schema: %q", wide.Message)
	}
	paged, _ := harness.ServerStatusOf(obj, "paged")
	if !strings.Contains(paged.LastError, "tools/list goes on past 50 pages, over --max-list-pages (50)") {
		t.Fatalf("lastError must name the bound: %q", paged.LastError)
	}

	for _, version := range []string{"2025-11-25", ""} {
		ag := harness.ConnectAgent(t, key, version, nil)
		names := ag.Tools(t)
		if !harness.Has("wide__echo")(names) || harness.Has("wide__wide")(names) {
			t.Fatalf("%s: the tool over the bound must be left out, the others offered: %v", version, names)
		}
		if got := harness.Text(ag.Call(t, "wide__echo", map[string]any{"text": "fine"})); got != "fine" {
			t.Fatalf("%s: a tool of the server with one left out: %q", version, got)
		}
		// The answer holds the text twice (content and structured content): over the bound.
		for _, tool := range []string{"wide__echo", "typed__echo"} { // stdio (fast path); stateless HTTP (the SDK)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			res, err := ag.Session.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"text": strings.Repeat("x", 600<<10)}})
			cancel()
			msg := ""
			switch {
			case err != nil:
				msg = err.Error()
			case res.IsError:
				msg = harness.Text(res)
			}
			if !strings.Contains(msg, "exceeds --max-message-bytes (1 MiB)") {
				t.Fatalf("%s: %s answering over the bound: %v %q", version, tool, err, msg)
			}
			if got := harness.Text(ag.Call(t, tool, map[string]any{"text": "after"})); got != "after" {
				t.Fatalf("%s: %s after an answer over the bound: %q", version, tool, got)
			}
		}
	}
}

// Claude Code keeps 2 KB of a tool's description and of a server's instructions: the server's
// status message says which of its texts go past, naming the tool and the size, while the tool
// is listed and its description served whole. A description a tool hint sets is the one
// measured.
func TestClientTextLimitReachesStatus(t *testing.T) {
	ns := harness.NewNamespace(t)
	hinted := harness.FixtureServer(t, "hinted")
	long := strings.Repeat("h", 2500)
	hinted.ToolHints = []v1alpha1.ToolHint{{Tools: "echo", Description: &long}}
	key := harness.Create(t, ns, "texts", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{
		harness.FixtureServer(t, "wordy", "--description-bytes", "3000", "--instructions-bytes", "5000"),
		harness.FixtureServer(t, "terse"), hinted,
	}})
	obj := harness.WaitStatus(t, key, 60*time.Second, "wordy, terse and hinted Ready", func(o *v1alpha1.ProjectMCP) bool {
		return harness.PhaseIs("wordy", v1alpha1.PhaseReady)(o) && harness.PhaseIs("terse", v1alpha1.PhaseReady)(o) &&
			harness.PhaseIs("hinted", v1alpha1.PhaseReady)(o)
	})
	if h, _ := harness.ServerStatusOf(obj, "hinted"); !strings.Contains(h.Message, `tool "echo": a description of 2500 bytes`) {
		t.Errorf("hinted's status message must note echo's hinted description: %q", h.Message)
	}
	wordy, _ := harness.ServerStatusOf(obj, "wordy")
	for _, want := range []string{
		`tool "verbose": a description of 3000 bytes, over the 2048 (2 KB) Claude Code keeps`,
		"instructions of 5000 bytes, over the 2048 (2 KB) Claude Code keeps",
	} {
		if !strings.Contains(wordy.Message, want) {
			t.Errorf("wordy's status message must say %q: %q", want, wordy.Message)
		}
	}
	if terse, _ := harness.ServerStatusOf(obj, "terse"); strings.Contains(terse.Message, "Claude Code") {
		t.Errorf("terse's texts are short: %q", terse.Message)
	}

	ag := harness.ConnectAgent(t, key, "", nil)
	res, err := ag.Session.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(res.Tools, func(tool *mcp.Tool) bool { return tool.Name == "wordy__verbose" })
	if i < 0 || len(res.Tools[i].Description) != 3000 {
		t.Fatalf("wordy__verbose must be served with its whole description (index %d)", i)
	}
}
