package gateway_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/testenv/harness"
	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// A server's own timeout (a client's per-server "timeout", carried into the spec) bounds its
// calls below the gateway's --call-timeout: a call past it is cancelled upstream (the server
// sees the cancellation) and answered with an error naming the server and the deadline, on
// both protocol revisions' paths, and the session goes on.
func TestGatewayServerTimeout(t *testing.T) {
	const limit = 300 * time.Millisecond
	ns := harness.NewNamespace(t)
	slow := harness.FixtureServer(t, "slow")
	slow.Timeout = &metav1.Duration{Duration: limit}
	key := harness.Create(t, ns, "servertimeout", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{slow}})
	harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		ag := harness.ConnectAgent(t, key, version, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		res, err := ag.Session.CallTool(ctx, &mcp.CallToolParams{Name: "slow__hang", Arguments: map[string]any{}})
		cancel()
		want := `MCP server "slow" did not answer within ` + limit.String() + " (its timeout in the project's config)"
		if err != nil || !res.IsError || !strings.Contains(harness.Text(res), want) {
			t.Fatalf("%s: a call past the server's timeout: %q (%v), want %q", version, harness.Text(res), err, want)
		}
		if harness.CallTimeout <= limit {
			t.Fatalf("the suite's --call-timeout %s must be longer than the server's own", harness.CallTimeout)
		}
		if got := harness.Text(ag.Call(t, "slow__echo", map[string]any{"text": "after"})); got != "after" {
			t.Fatalf("%s: the session must go on: %q", version, got)
		}
	}
	testutil.Eventually(t, 10*time.Second, "the server to see both cancellations", func() bool {
		return strings.Count(harness.Logs.String(), "fixture slow: hang cancelled") >= 2
	})
}
