package controllers

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
)

// endpointOf is a project's endpoint on the test controller's gateway, known before status has it.
func endpointOf(key types.NamespacedName) string {
	return "http://" + gatewayAddr + gateway.Path(key)
}

// dial opens an MCP client session; "2025-11-25" makes a stateful client, "" a stateless one.
func dial(endpoint, version string, header http.Header) (*mcp.ClientSession, error) {
	return dialWith(mcp.NewClient(&mcp.Implementation{Name: "early-agent", Version: "1.0"}, nil), endpoint, version, header)
}

// dialWith is dial with a client of the caller's own (handlers, capabilities).
func dialWith(client *mcp.Client, endpoint, version string, header http.Header) (*mcp.ClientSession, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{Transport: headerRT{header}}},
		&mcp.ClientSessionOptions{ProtocolVersion: version})
}

// mustDial is dialWith for a session the test needs: it fails the test, and closes the
// session when the test ends.
func mustDial(t testing.TB, client *mcp.Client, endpoint, version string, header http.Header) *mcp.ClientSession {
	t.Helper()
	s, err := dialWith(client, endpoint, version, header)
	if err != nil {
		t.Fatalf("connect to %s: %v", endpoint, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// namesOf lists the names of items (tools, prompts).
func namesOf[T any](items []T, name func(T) string) []string {
	var names []string
	for _, it := range items {
		names = append(names, name(it))
	}
	return names
}

// firstTools is a session's first tools/list.
func firstTools(t testing.TB, s *mcp.ClientSession) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := s.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	return namesOf(res.Tools, func(tl *mcp.Tool) string { return tl.Name })
}

type dialed struct {
	session *mcp.ClientSession
	err     error
}

// dialAsync connects in the background; the result arrives on the channel.
func dialAsync(t testing.TB, endpoint, version string, header http.Header) <-chan dialed {
	out := make(chan dialed, 1)
	go func() {
		s, err := dial(endpoint, version, header)
		out <- dialed{s, err}
		close(out)
	}()
	t.Cleanup(func() {
		if d, ok := <-out; ok && d.session != nil {
			_ = d.session.Close()
		}
	})
	return out
}

// awaitDial waits for a background connect that must still be waiting while the project is
// held, and must succeed once it is released.
func awaitDial(t testing.TB, ch <-chan dialed) *mcp.ClientSession {
	t.Helper()
	select {
	case d := <-ch:
		if d.err != nil {
			t.Fatalf("connect: %v", d.err)
		}
		t.Cleanup(func() { _ = d.session.Close() })
		return d.session
	case <-time.After(30 * time.Second):
		t.Fatal("connect did not finish")
	}
	return nil
}

// stillWaiting fails when a background connect has already returned.
func stillWaiting(t testing.TB, what string, ch <-chan dialed) {
	t.Helper()
	select {
	case d := <-ch:
		t.Fatalf("%s returned before the project's first reconcile: %v", what, d.err)
	default:
	}
}

// A session that arrives after the ProjectMCP is created but before its first reconcile waits
// for it (no 404), and its first tools/list has the ready server's tools; both revisions.
func TestGatewaySessionBeforeFirstReconcile(t *testing.T) {
	ns := newNamespace(t)
	key := types.NamespacedName{Namespace: ns, Name: "early"}
	release := hold(t, key)
	create(t, ns, key.Name, v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{fixtureServer(t, "a")}})

	stateful := dialAsync(t, endpointOf(key), "2025-11-25", nil)
	stateless := dialAsync(t, endpointOf(key), "", http.Header{gateway.SessionHeader: {"early"}})
	time.Sleep(500 * time.Millisecond) // the requests are in; the reconcile is held
	if ctl.registry.Known(key) {
		t.Fatal("the reconcile was not held back")
	}
	stillWaiting(t, "a stateful connect", stateful)
	stillWaiting(t, "a stateless connect", stateless)
	release()

	for what, ch := range map[string]<-chan dialed{"stateful": stateful, "stateless": stateless} {
		s := awaitDial(t, ch)
		if names := firstTools(t, s); !slices.Contains(names, "a__echo") {
			t.Fatalf("%s: the first tools/list must have the server's tools: %v", what, names)
		}
		res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "a__echo", Arguments: map[string]any{"text": what}})
		if err != nil || res.IsError || text(res) != what {
			t.Fatalf("%s: call: %v %+v", what, err, res)
		}
	}
}

// A project that does not exist gets 404 at once, without waiting for a reconcile that will
// never come; so does a request naming a session of a project not set up yet.
func TestGatewayUnknownProject404(t *testing.T) {
	ns := newNamespace(t)
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
	if code, took := post(endpointOf(types.NamespacedName{Namespace: ns, Name: "nope"}), nil); code != http.StatusNotFound || took > 3*time.Second {
		t.Fatalf("a project that does not exist: %d after %s, want 404 at once", code, took)
	}
	key := types.NamespacedName{Namespace: ns, Name: "held"}
	hold(t, key)
	create(t, ns, key.Name, v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{fixtureServer(t, "a")}})
	if code, took := post(endpointOf(key), http.Header{"Mcp-Session-Id": {"OLDSESSION"}}); code != http.StatusNotFound || took > 3*time.Second {
		t.Fatalf("an unknown session of a project not set up yet: %d after %s, want 404 at once", code, took)
	}
}
