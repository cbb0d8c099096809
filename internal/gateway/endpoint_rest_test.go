package gateway_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/gateway"
	"github.com/dsh-dev/projectmcp/internal/testenv/harness"
)

// The project endpoint with ?except= serves every server of the project but those named,
// under projected names: a call to a named server's tool is refused, and a server added to
// the spec while a session is open comes to it by list_changed, callable at once. This is
// the entry connect writes beside the per-server ones, so that a server added mid-session is
// offered to an agent that has no entry of its own for it yet.
func TestGatewayExceptEndpointServesTheRest(t *testing.T) {
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "rest", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "a"), harness.FixtureServer(t, "b")}})
	obj := harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	endpoint := obj.Status.Endpoint + "?" + gateway.ExceptParam + "=a"

	changed := make(chan struct{}, 8)
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			select {
			case changed <- struct{}{}:
			default:
			}
		}})
	s := harness.MustDial(t, client, endpoint, "2025-11-25", nil)
	names := toolNames(t, s)
	if !slices.Contains(names, "b__echo") || slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, "a__") }) {
		t.Fatalf("tools with except=a: %v, want b's and none of a's", names)
	}
	if got := harness.Text(callOK(t, s, "b__echo", map[string]any{"text": "the rest"})); got != "the rest" {
		t.Fatalf("b__echo: %q", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "a__echo", Arguments: map[string]any{"text": "x"}}); err == nil && !res.IsError {
		t.Fatalf("a__echo answered through the endpoint that leaves a out: %q", harness.Text(res))
	}

	harness.Update(t, key, func(o *v1alpha1.ProjectMCP) {
		o.Spec.Servers = append(o.Spec.Servers, harness.FixtureServer(t, "c"))
	})
	for deadline := time.After(30 * time.Second); !slices.Contains(names, "c__echo"); names = toolNames(t, s) {
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("the added server's tools never came by list_changed: %v", names)
		}
	}
	if slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, "a__") }) {
		t.Fatalf("a's tools came with c's: %v", names)
	}
	if got := harness.Text(callOK(t, s, "c__echo", map[string]any{"text": "added"})); got != "added" {
		t.Fatalf("c__echo: %q", got)
	}

	resp, err := http.Post(obj.Status.Endpoint+"?"+gateway.ExceptParam+"=not/a/name", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("except naming no server name: %d, want 400", resp.StatusCode)
	}
}

func toolNames(t *testing.T, s *mcp.ClientSession) []string {
	t.Helper()
	tools, _, _ := lists(t, s)
	return harness.NamesOf(tools, func(t *mcp.Tool) string { return t.Name })
}
