package gateway_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/testenv/harness"
)

// A request's member names are matched exactly on the message-level path, as the SDK's server
// and the servers upstream match them: a body that also carries "URI" or "Name" is routed by
// "uri" or "name", the member the server reads, so routing and forwarding never disagree.
func TestGatewayFastPathMatchesKeysExactly(t *testing.T) {
	ns := harness.NewNamespace(t)
	old := "--protocol" // servers of the session's revision, so the requests go at the message level
	key := harness.Create(t, ns, "exact", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{
		harness.FixtureServer(t, "a", old, "2025-11-25"), harness.FixtureServer(t, "b", old, "2025-11-25")}})
	harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	s := connectTo(t, harness.EndpointOf(key))
	pidA := harness.Text(callOK(t, s.Session, "a__pids", nil))
	pidB := harness.Text(callOK(t, s.Session, "b__pids", nil))

	for _, c := range []struct {
		what, body, want, not string
	}{
		{"resources/read with uri and URI",
			`{"jsonrpc":"2.0","id":7,"method":"resources/read","params":{"uri":"fixture://a/readme","URI":"fixture://b/readme"}}`,
			"fixture a", "fixture b"},
		{"tools/call with name and Name",
			`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"a__pids","Name":"b__pids","arguments":{}}}`,
			jsonText(pidA), jsonText(pidB)},
	} {
		got := postRead(t, harness.EndpointOf(key), s.Session.ID(), c.body)
		if !strings.Contains(got, c.want) || strings.Contains(got, c.not) {
			t.Errorf("%s: want the answer of the server the exact member names (%s), got %s", c.what, c.want, got)
		}
	}
}

// jsonText is s as it appears inside a JSON string.
func jsonText(s string) string { return strings.Trim(fmt.Sprintf("%q", s), `"`) }

// postRead sends one JSON-RPC request of a stateful 2025-11-25 session by hand and returns the
// response body (JSON or an event stream).
func postRead(t *testing.T, url, sid, body string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	req.Header.Set("Mcp-Session-Id", sid)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode >= 300 {
		t.Fatalf("%s: %d %s (%v)", body, resp.StatusCode, data, err)
	}
	return string(data)
}
