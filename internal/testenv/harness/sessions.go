package harness

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/gateway"
)

// Agent is an MCP client session against the gateway, as an agent host would open one.
type Agent struct {
	Session *mcp.ClientSession
	Changed chan struct{} // one value per list_changed received
}

// ConnectAgent connects a Go SDK client to a project's endpoint (from its status). version:
// the 2025-11-25 revision (revision.Stateful) makes a stateful client; "" the SDK's default
// (2026-07-28, stateless).
func ConnectAgent(t testing.TB, key types.NamespacedName, version string, header http.Header) *Agent {
	t.Helper()
	obj := WaitStatus(t, key, 30*time.Second, "an endpoint", func(o *v1alpha1.ProjectMCP) bool { return o.Status.Endpoint != "" })
	a := &Agent{Changed: make(chan struct{}, 64)}
	client := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "1.0"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { a.Changed <- struct{}{} },
	})
	hc := &http.Client{Transport: HeaderRT{header}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var err error
	a.Session, err = client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: obj.Status.Endpoint, HTTPClient: hc},
		&mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("connect to %s: %v", obj.Status.Endpoint, err)
	}
	t.Cleanup(func() { _ = a.Session.Close() })
	return a
}

// AgentOf wraps a connected session as an Agent; its Changed hears nothing unless the
// session's client sends list_changed there.
func AgentOf(s *mcp.ClientSession) *Agent {
	return &Agent{Session: s, Changed: make(chan struct{}, 64)}
}

// HeaderRT is a round tripper that adds its headers to every request.
type HeaderRT struct{ H http.Header }

// RoundTrip sends req with the headers added, through http.DefaultTransport.
func (r HeaderRT) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	for k, v := range r.H {
		req.Header[k] = v
	}
	return http.DefaultTransport.RoundTrip(req)
}

// Tools lists the session's tools by name.
func (a *Agent) Tools(t testing.TB) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var names []string
	for tool, err := range a.Session.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tool.Name)
	}
	return names
}

// Call calls a tool, failing the test on a protocol error (a tool error is a result).
func (a *Agent) Call(t testing.TB, tool string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := a.Session.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	return res
}

// WaitTools waits (through list_changed notifications) until the tool list satisfies cond.
func (a *Agent) WaitTools(t testing.TB, what string, cond func([]string) bool) []string {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		names := a.Tools(t)
		if cond(names) {
			return names
		}
		select {
		case <-a.Changed:
		case <-deadline:
			t.Fatalf("timed out waiting for %s; tools %v", what, names)
		}
	}
}

// Text is the text of a result's first content, "" when that is not text.
func Text(res *mcp.CallToolResult) string {
	if res == nil || len(res.Content) == 0 {
		return ""
	}
	if tc, ok := res.Content[0].(*mcp.TextContent); ok {
		return tc.Text
	}
	return ""
}

// Has is a WaitTools condition: the list holds name.
func Has(name string) func([]string) bool {
	return func(names []string) bool { return slices.Contains(names, name) }
}

// HasNot is a WaitTools condition: the list does not hold name.
func HasNot(name string) func([]string) bool {
	return func(names []string) bool { return !slices.Contains(names, name) }
}

// EndpointOf is a project's endpoint on the test controller's gateway, known before status has it.
func EndpointOf(key types.NamespacedName) string {
	return "http://" + GatewayAddr + gateway.Path(key)
}

// Dial opens an MCP client session; 2025-11-25 (revision.Stateful) makes a stateful client, ""
// a stateless one.
func Dial(endpoint, version string, header http.Header) (*mcp.ClientSession, error) {
	return DialWith(mcp.NewClient(&mcp.Implementation{Name: "early-agent", Version: "1.0"}, nil), endpoint, version, header)
}

// DialWith is Dial with a client of the caller's own (handlers, capabilities).
func DialWith(client *mcp.Client, endpoint, version string, header http.Header) (*mcp.ClientSession, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{Transport: HeaderRT{header}}},
		&mcp.ClientSessionOptions{ProtocolVersion: version})
}

// MustDial is DialWith for a session the test needs: it fails the test, and closes the
// session when the test ends.
func MustDial(t testing.TB, client *mcp.Client, endpoint, version string, header http.Header) *mcp.ClientSession {
	t.Helper()
	s, err := DialWith(client, endpoint, version, header)
	if err != nil {
		t.Fatalf("connect to %s: %v", endpoint, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// NamesOf lists the names of items (tools, prompts).
func NamesOf[T any](items []T, name func(T) string) []string {
	var names []string
	for _, it := range items {
		names = append(names, name(it))
	}
	return names
}

// FirstTools is a session's first tools/list.
func FirstTools(t testing.TB, s *mcp.ClientSession) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := s.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	return NamesOf(res.Tools, func(tl *mcp.Tool) string { return tl.Name })
}

// Dialed is the outcome of a DialAsync.
type Dialed struct {
	Session *mcp.ClientSession
	Err     error
}

// DialAsync connects in the background; the result arrives on the channel.
func DialAsync(t testing.TB, endpoint, version string, header http.Header) <-chan Dialed {
	out := make(chan Dialed, 1)
	go func() {
		s, err := Dial(endpoint, version, header)
		out <- Dialed{s, err}
		close(out)
	}()
	t.Cleanup(func() {
		if d, ok := <-out; ok && d.Session != nil {
			_ = d.Session.Close()
		}
	})
	return out
}

// AwaitDial waits for a background connect that must still be waiting while the project is
// held, and must succeed once it is released.
func AwaitDial(t testing.TB, ch <-chan Dialed) *mcp.ClientSession {
	t.Helper()
	select {
	case d := <-ch:
		if d.Err != nil {
			t.Fatalf("connect: %v", d.Err)
		}
		t.Cleanup(func() { _ = d.Session.Close() })
		return d.Session
	case <-time.After(30 * time.Second):
		t.Fatal("connect did not finish")
	}
	return nil
}

// StillWaiting fails when a background connect has already returned.
func StillWaiting(t testing.TB, what string, ch <-chan Dialed) {
	t.Helper()
	select {
	case d := <-ch:
		t.Fatalf("%s returned before the project's first reconcile: %v", what, d.Err)
	default:
	}
}
