package gateway_test

import (
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/buckets"
	"github.com/dsh-dev/projectmcp/internal/gateway"
	"github.com/dsh-dev/projectmcp/internal/testenv/harness"
)

// A gateway among replicas (Options.Serving): a request for a project this replica no longer
// serves is answered moved, a 503 the Router in front sends on to the next holder, and
// nothing reaches the server; a requestState issued under an earlier claim on the project
// is refused as issued before the project moved.
func TestGatewayAnswersMovedAndStatesCarryTheEpoch(t *testing.T) {
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "moved", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "a", "--protocol", "2025-11-25")}})
	harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	var epoch atomic.Int64
	var here atomic.Bool
	epoch.Store(1)
	here.Store(true)
	_, base := serveGateway(t, gateway.Options{Registry: harness.Ctl.Registry, InputTimeout: time.Minute, CallTimeout: time.Minute,
		Serving: func(k types.NamespacedName) (int64, bool) { return epoch.Load(), k != key || here.Load() }})
	endpoint := base + gateway.Path(key)

	s := byHand(t, endpoint, "one")
	id, state := asked(t, s, "a__elicit", "elicitation/create")
	if !strings.HasPrefix(state, "projectmcp-input.") || !strings.Contains(state, ".1.") {
		t.Fatalf("the state %q does not carry the claim's epoch", state)
	}
	epoch.Store(2) // the bucket went away and came back: the call was stopped with the move
	_, err := resume(s, "a__elicit", state, mcp.InputResponseMap{id: &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": "late"}}})
	refused(t, "a state of the claim before", err, "issued before this project moved between replicas (epoch 1, now 2)")

	here.Store(false)
	req, _ := http.NewRequest(http.MethodPost, endpoint, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a__echo","arguments":{"text":"x"}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get(buckets.HeaderMoved) == "" || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("a call of a project this replica stopped serving: %d %v %s, want 503 marked moved", resp.StatusCode, resp.Header, body)
	}
	if !strings.Contains(string(body), "moving to another replica") {
		t.Fatalf("the moved answer says %q", body)
	}
}
