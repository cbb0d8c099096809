package gateway

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/dsh-dev/projectmcp/internal/registry"
	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// A handler that panics on the SDK's goroutine (outside net/http, where nothing else would
// recover it) fails its own request with an internal error, logged once with its stack; the
// session's next request is answered and the process goes on. Without the project's
// recovering middleware the panic ends the test binary.
func TestHandlerPanicFailsOnlyItsRequest(t *testing.T) {
	reg := registry.New(clocktesting.NewFakeClock(time.Now()), logr.Discard())
	defer reg.Shutdown()
	key := types.NamespacedName{Namespace: "ns", Name: "p"}
	reg.SetDesired(key, registry.Desired{})
	var logs testutil.LogLines
	g := New(Options{Registry: reg, Log: logs.Logger()})
	srv := httptest.NewServer(g)
	defer func() {
		g.shutdown()
		srv.CloseClientConnections()
		srv.Close()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: srv.URL + Path(key)}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()

	g.mu.Lock()
	p := g.projects[key]
	g.mu.Unlock()
	schema := map[string]any{"type": "object"}
	p.server.AddTool(&mcp.Tool{Name: "boom", InputSchema: schema}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		panic("boom in a handler")
	})
	p.server.AddTool(&mcp.Tool{Name: "fine", InputSchema: schema}, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "fine"}}}, nil
	})

	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "boom"})
	var rpcErr *jsonrpc.Error
	if !errors.As(err, &rpcErr) || rpcErr.Code != jsonrpc.CodeInternalError || strings.Contains(rpcErr.Message, "boom in a handler") {
		t.Fatalf("the panicking call: want an internal error that does not quote the panic, got %v", err)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fine"})
	if err != nil || len(res.Content) != 1 {
		t.Fatalf("the next call: %v", err)
	}
	logged := logs.Matching("boom in a handler")
	if len(logged) != 1 || !strings.Contains(logged[0], "recover_test.go") {
		t.Fatalf("the panic must be logged once with its stack, got %q", logged)
	}
}
