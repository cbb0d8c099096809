package controllers

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
)

// A per-server endpoint serves one server of the project under the names the server gives its
// tools and prompts: its tools, prompts, resources and instructions are what a session
// connected to the server directly gets (tool and prompt _meta apart, which no endpoint passes
// on yet), a call by the server's own name works, a tool the server adds arrives by
// list_changed under its own name, and status lists the endpoint.
func TestGatewayServerEndpointIsTheServer(t *testing.T) {
	ns := newNamespace(t)
	key := create(t, ns, "drop-in", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{fixtureServer(t, "a"), fixtureServer(t, "b")}})
	obj := waitStatus(t, key, 30*time.Second, "Ready with server endpoints", func(o *v1alpha1.ProjectMCP) bool {
		return isReady(o) && o.Status.Endpoint != "" && len(o.Status.Servers) == 2 && o.Status.Servers[0].Endpoint != ""
	})
	want := v1alpha1.ServerEndpoint(obj.Status.Endpoint, "a")
	if got := obj.Status.Servers[0].Endpoint; got != want {
		t.Fatalf("status.servers[a].endpoint = %q, want %q", got, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(version, func(t *testing.T) {
			direct := directWith(t, agentClient("agent"), "a", version)
			header := http.Header(nil)
			if version == "2026-07-28" {
				header = http.Header{"X-ProjectMCP-Session": {"drop-in"}}
			}
			a := mustDial(t, agentClient("agent"), want, version, header)
			dt, dp, dr := lists(t, direct)
			gt, gp, gr := lists(t, a)
			sameJSON(t, "tools", withoutMeta(t, dt), withoutMeta(t, gt))
			sameJSON(t, "prompts", withoutMeta(t, dp), withoutMeta(t, gp))
			sameJSON(t, "resources", dr, gr)
			if d, g := instructionsOf(direct), instructionsOf(a); d != g {
				t.Errorf("instructions: %q directly, %q through the server's endpoint", d, g)
			}
			res, err := a.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "by its own name"}})
			if err != nil || text(res) != "by its own name" {
				t.Fatalf("a call by the server's own name: %s %v", text(res), err)
			}
		})
	}

	changed := make(chan struct{}, 8)
	client := mcp.NewClient(&mcp.Implementation{Name: "watcher", Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} }})
	watcher := mustDial(t, client, want, "2025-11-25", nil)
	callOK(t, watcher, "add_tool", map[string]any{"name": "fresh"})
	for deadline := time.After(10 * time.Second); ; {
		tools, _, _ := lists(t, watcher)
		names := namesOf(tools, func(t *mcp.Tool) string { return t.Name })
		if slices.Contains(names, "fresh") {
			break
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("the added tool never came under its own name: %v", names)
		}
	}

	resp, err := http.Post(v1alpha1.ServerEndpoint(obj.Status.Endpoint, "nope"), "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("a server the project does not have: %d, want 404", resp.StatusCode)
	}
}

// lists are a session's tools, prompts and resources.
func lists(t *testing.T, s *mcp.ClientSession) ([]*mcp.Tool, []*mcp.Prompt, []*mcp.Resource) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	tools, err := s.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	prompts, err := s.ListPrompts(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	resources, err := s.ListResources(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	return tools.Tools, prompts.Prompts, resources.Resources
}

// withoutMeta is items as JSON objects without their _meta.
func withoutMeta[T any](t *testing.T, items []T) []map[string]any {
	t.Helper()
	data, _ := json.Marshal(items)
	var out []map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	for _, item := range out {
		delete(item, "_meta")
	}
	return out
}

func sameJSON(t *testing.T, what string, direct, through any) {
	t.Helper()
	d, _ := json.Marshal(direct)
	g, _ := json.Marshal(through)
	if string(d) != string(g) {
		t.Errorf("%s: through the server's endpoint\n%s\ndirectly\n%s", what, g, d)
	}
}

func instructionsOf(s *mcp.ClientSession) string {
	if r := s.InitializeResult(); r != nil {
		return r.Instructions
	}
	return ""
}
