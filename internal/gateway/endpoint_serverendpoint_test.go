package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/gateway"
	"github.com/dsh-dev/projectmcp/internal/testenv/harness"
	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// A per-server endpoint serves one server of the project under the names the server gives its
// tools and prompts: its tools, prompts, resources and instructions are what a session
// connected to the server directly gets, _meta included, a call by the server's own name works, a tool the server adds arrives by
// list_changed under its own name, and status lists the endpoint.
func TestGatewayServerEndpointIsTheServer(t *testing.T) {
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "drop-in", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "a"), harness.FixtureServer(t, "b")}})
	obj := harness.WaitStatus(t, key, 30*time.Second, "Ready with server endpoints", func(o *v1alpha1.ProjectMCP) bool {
		return harness.IsReady(o) && o.Status.Endpoint != "" && len(o.Status.Servers) == 2 && o.Status.Servers[0].Endpoint != ""
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
			a := harness.MustDial(t, agentClient("agent"), want, version, header)
			dt, dp, dr := lists(t, direct)
			gt, gp, gr := lists(t, a)
			sameJSON(t, "tools", dt, gt)
			sameJSON(t, "prompts", dp, gp)
			sameJSON(t, "resources", dr, gr)
			if d, g := instructionsOf(direct), instructionsOf(a); d != g {
				t.Errorf("instructions: %q directly, %q through the server's endpoint", d, g)
			}
			res, err := a.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "by its own name"}})
			if err != nil || harness.Text(res) != "by its own name" {
				t.Fatalf("a call by the server's own name: %s %v", harness.Text(res), err)
			}
		})
	}

	changed := make(chan struct{}, 8)
	client := mcp.NewClient(&mcp.Implementation{Name: "watcher", Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} }})
	watcher := harness.MustDial(t, client, want, "2025-11-25", nil)
	callOK(t, watcher, "add_tool", map[string]any{"name": "fresh"})
	for deadline := time.After(10 * time.Second); ; {
		tools, _, _ := lists(t, watcher)
		names := harness.NamesOf(tools, func(t *mcp.Tool) string { return t.Name })
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

// An MCP App reaches the host through both endpoints as it does directly: the tool's _meta
// (ui.resourceUri) as the server lists it, and the ui:// resource it names, listed and read
// the same.
func TestGatewayPassesMCPApps(t *testing.T) {
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "apps", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "a", "--app")}})
	obj := harness.WaitStatus(t, key, 30*time.Second, "Ready", func(o *v1alpha1.ProjectMCP) bool { return harness.IsReady(o) && o.Status.Endpoint != "" })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(version, func(t *testing.T) {
			header := http.Header(nil)
			if version == "2026-07-28" {
				header = http.Header{"X-ProjectMCP-Session": {"apps"}}
			}
			direct := directArgs(t, agentClient("agent"), version, "--name", "a", "--app")
			want := appView(t, ctx, direct, "show_app")
			if !strings.Contains(want, `"resourceUri":"ui://a/app"`) {
				t.Fatalf("the fixture's app tool lacks its _meta: %s", want)
			}
			for endpoint, name := range map[string]string{obj.Status.Endpoint: "a__show_app", v1alpha1.ServerEndpoint(obj.Status.Endpoint, "a"): "show_app"} {
				got := appView(t, ctx, harness.MustDial(t, agentClient("agent"), endpoint, version, header), name)
				if got != strings.Replace(want, `"name":"show_app"`, `"name":"`+name+`"`, 1) {
					t.Errorf("through %s:\n%s\ndirectly:\n%s", endpoint, got, want)
				}
			}
		})
	}
}

// appView is what a host reads of an MCP App: the tool as listed, the listed ui:// resource
// and the resource's contents, as JSON.
func appView(t *testing.T, ctx context.Context, s *mcp.ClientSession, tool string) string {
	t.Helper()
	tools, _, resources := lists(t, s)
	var out []any
	for _, tl := range tools {
		if tl.Name == tool {
			out = append(out, tl)
		}
	}
	for _, r := range resources {
		if strings.HasPrefix(r.URI, "ui://") {
			out = append(out, r)
		}
	}
	read, err := s.ReadResource(ctx, &mcp.ReadResourceParams{URI: "ui://a/app"})
	if err != nil {
		t.Fatalf("reading the app: %v", err)
	}
	out = append(out, read.Contents)
	data, _ := json.Marshal(out)
	return string(data)
}

// A list's caching hints (2026-07-28) are its server's on a per-server endpoint, and on the
// project endpoint the most cautious of its servers': the lowest ttlMs, private if any is.
func TestGatewayMergesCacheHints(t *testing.T) {
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "hints", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{
		harness.FixtureServer(t, "a", "--list-ttl-ms", "5000", "--list-cache-scope", "public"),
		harness.FixtureServer(t, "b", "--list-ttl-ms", "2000", "--list-cache-scope", "private"),
	}})
	obj := harness.WaitStatus(t, key, 30*time.Second, "Ready", func(o *v1alpha1.ProjectMCP) bool {
		return harness.IsReady(o) && o.Status.Endpoint != "" && len(o.Status.Servers) == 2 && o.Status.Servers[0].Endpoint != ""
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sessions := 0
	hints := func(endpoint string) string {
		sessions++
		s := harness.MustDial(t, mcp.NewClient(&mcp.Implementation{Name: "hints", Version: "1"}, nil), endpoint, "2026-07-28",
			http.Header{gateway.SessionHeader: {fmt.Sprint("hints-", sessions)}})
		tools, err := s.ListTools(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		prompts, err := s.ListPrompts(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("tools %d %s, prompts %d %s", tools.TTLMs, tools.CacheScope, prompts.TTLMs, prompts.CacheScope)
	}
	if got, want := hints(obj.Status.Endpoint), "tools 2000 private, prompts 2000 private"; got != want {
		t.Errorf("the project endpoint's hints: %s, want %s", got, want)
	}
	for _, st := range obj.Status.Servers {
		want := map[string]string{"a": "tools 5000 public, prompts 5000 public", "b": "tools 2000 private, prompts 2000 private"}[st.Name]
		if got := hints(st.Endpoint); got != want {
			t.Errorf("%s's endpoint's hints: %s, want %s", st.Name, got, want)
		}
	}
}

// A per-server endpoint sends a name its server does not list on to the server, but never one
// the server's allow/deny filter withholds: that one is unknown, as on the project endpoint,
// and the server never runs it.
func TestGatewayServerEndpointWithholdsFilteredTools(t *testing.T) {
	ns := harness.NewNamespace(t)
	filtered := harness.FixtureServer(t, "withheld")
	filtered.Tools = &v1alpha1.ToolFilter{Deny: []string{"stderr"}}
	key := harness.Create(t, ns, "withheld", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{filtered}})
	obj := harness.WaitStatus(t, key, 30*time.Second, "Ready", func(o *v1alpha1.ProjectMCP) bool {
		return harness.IsReady(o) && len(o.Status.Servers) == 1 && o.Status.Servers[0].Endpoint != ""
	})
	s := connectTo(t, obj.Status.Servers[0].Endpoint).Session
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "stderr", Arguments: map[string]any{"text": "must not run", "lines": 1}})
	if err == nil || !strings.Contains(err.Error(), `unknown tool "stderr"`) {
		t.Fatalf("a withheld tool: %v", err)
	}
	if strings.Contains(harness.Logs.String(), "must not run") {
		t.Fatal("the server ran a tool its filter withholds")
	}
	if got := harness.Text(callOK(t, s, "echo", map[string]any{"text": "offered"})); got != "offered" {
		t.Fatalf("an offered tool: %q", got)
	}
}

// A server's endpoint goes with the server: renamed in the spec, the old name's endpoint
// answers 404 and a session that was open on it is gone, while the new name's serves.
func TestGatewayServerEndpointGoesWithItsServer(t *testing.T) {
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "renamed", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "n0")}})
	obj := harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range 3 {
		name, next := fmt.Sprint("n", i), fmt.Sprint("n", i+1)
		endpoint := v1alpha1.ServerEndpoint(obj.Status.Endpoint, name)
		s := harness.MustDial(t, agentClient("agent"), endpoint, "2025-11-25", nil)
		if _, err := s.ListTools(ctx, nil); err != nil {
			t.Fatalf("%s's endpoint: %v", name, err)
		}
		harness.Update(t, key, func(o *v1alpha1.ProjectMCP) { o.Spec.Servers = []v1alpha1.MCPServer{harness.FixtureServer(t, next)} })
		testutil.Eventually(t, 30*time.Second, name+"'s endpoint to answer 404", func() bool {
			resp, err := http.Post(endpoint, "application/json", nil)
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusNotFound
		})
		if _, err := s.ListTools(ctx, nil); err == nil {
			t.Fatalf("a session of %s's endpoint still lists after the server left", name)
		}
		obj = harness.WaitStatus(t, key, 30*time.Second, next+" ready", harness.IsReady)
	}
	s := harness.MustDial(t, agentClient("agent"), v1alpha1.ServerEndpoint(obj.Status.Endpoint, "n3"), "2025-11-25", nil)
	if got := harness.Text(callOK(t, s, "echo", map[string]any{"text": "renamed"})); got != "renamed" {
		t.Fatalf("the last name's endpoint: %q", got)
	}
}
