package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/gateway"
	"github.com/dsh-dev/projectmcp/internal/testenv/harness"
)

// A stateless (2026-07-28) session's first tools/call on a project whose server is still
// starting (made again under its name here; a replica taking a bucket over builds its projects
// so) waits for the server within the ready budget, as a stateful session's initialize does,
// and is answered by the tool, not refused as an unknown one.
func TestGatewayStatelessFirstCallWaitsForTheServers(t *testing.T) {
	ns := harness.NewNamespace(t)
	spec := v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "a", "--init-delay", "1500ms")}}
	key := harness.Create(t, ns, "cold", spec)
	obj := harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	// Two clients of one stateless session (the same SessionHeader): its requests may come
	// together.
	var clients [2]*mcp.ClientSession
	for i := range clients {
		s, err := harness.Dial(obj.Status.Endpoint, "2026-07-28", http.Header{gateway.SessionHeader: {"cold-start"}})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		clients[i] = s
	}
	call := func(s *mcp.ClientSession, what string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "a__echo", Arguments: map[string]any{"text": what}})
		if err != nil || res.IsError || harness.Text(res) != what {
			return fmt.Errorf("%s: %v %v", what, harness.Text(res), err)
		}
		return nil
	}
	if err := call(clients[0], "while Ready"); err != nil {
		t.Fatal(err)
	}

	// The project made again under its name: the session's next request is the first the new
	// project's endpoint sees, while its server still starts. (A replica taking a bucket over
	// builds its projects so, and the sessions of a 2026-07-28 client just go on.) The other
	// client's request comes while the first one's mount waits for the server: it finds the
	// session mounted, and waits for the server too.
	harness.DeleteAndWait(t, key)
	harness.Create(t, ns, "cold", spec)
	first := make(chan error, 1)
	go func() { first <- call(clients[0], "the first call while the server starts") }()
	time.Sleep(300 * time.Millisecond) // the first request is the one that mounts
	if err := call(clients[1], "a call of the same session meanwhile"); err != nil {
		t.Error(err)
	}
	if err := <-first; err != nil {
		t.Error(err)
	}
}
