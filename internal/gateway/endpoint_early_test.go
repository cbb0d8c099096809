package gateway_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/gateway"
	"github.com/dsh-dev/projectmcp/internal/testenv/harness"
)

// A session that arrives after the ProjectMCP is created but before its first reconcile waits
// for it (no 404), and its first tools/list has the ready server's tools; both revisions.
func TestGatewaySessionBeforeFirstReconcile(t *testing.T) {
	ns := harness.NewNamespace(t)
	key := types.NamespacedName{Namespace: ns, Name: "early"}
	release := harness.Hold(t, key)
	harness.Create(t, ns, key.Name, v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "a")}})

	stateful := harness.DialAsync(t, harness.EndpointOf(key), "2025-11-25", nil)
	stateless := harness.DialAsync(t, harness.EndpointOf(key), "", http.Header{gateway.SessionHeader: {"early"}})
	time.Sleep(500 * time.Millisecond) // the requests are in; the reconcile is held
	if harness.Ctl.Registry.Known(key) {
		t.Fatal("the reconcile was not held back")
	}
	harness.StillWaiting(t, "a stateful connect", stateful)
	harness.StillWaiting(t, "a stateless connect", stateless)
	release()

	for what, ch := range map[string]<-chan harness.Dialed{"stateful": stateful, "stateless": stateless} {
		s := harness.AwaitDial(t, ch)
		if names := harness.FirstTools(t, s); !slices.Contains(names, "a__echo") {
			t.Fatalf("%s: the first tools/list must have the server's tools: %v", what, names)
		}
		res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "a__echo", Arguments: map[string]any{"text": what}})
		if err != nil || res.IsError || harness.Text(res) != what {
			t.Fatalf("%s: call: %v %+v", what, err, res)
		}
	}
}

// A project that does not exist gets 404 at once, without waiting for a reconcile that will
// never come; so does a request naming a session of a project not set up yet.
func TestGatewayUnknownProject404(t *testing.T) {
	ns := harness.NewNamespace(t)
	post := func(endpoint string, header http.Header) (int, time.Duration) {
		req, _ := http.NewRequest(http.MethodPost, endpoint, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for k, v := range header {
			req.Header[k] = v
		}
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, time.Since(start)
	}
	// The budget a waiting request would use is the default readyTimeout (5 s); "at once" is
	// checked against it, with room for a slow machine.
	if code, took := post(harness.EndpointOf(types.NamespacedName{Namespace: ns, Name: "nope"}), nil); code != http.StatusNotFound || took > 3*time.Second {
		t.Fatalf("a project that does not exist: %d after %s, want 404 at once", code, took)
	}
	key := types.NamespacedName{Namespace: ns, Name: "held"}
	harness.Hold(t, key)
	harness.Create(t, ns, key.Name, v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "a")}})
	if code, took := post(harness.EndpointOf(key), http.Header{"Mcp-Session-Id": {"OLDSESSION"}}); code != http.StatusNotFound || took > 3*time.Second {
		t.Fatalf("an unknown session of a project not set up yet: %d after %s, want 404 at once", code, took)
	}
}
