package recovery

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// On a client (as internal/conn wires its connections), a handler of the server's requests
// that panics fails that request alone: the server gets an internal error, its next request
// is answered, and the process goes on.
func TestClientHandlerPanicFailsOnlyItsRequest(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var asked atomic.Int32
	client := mcp.NewClient(&mcp.Implementation{Name: "c", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			if asked.Add(1) == 1 {
				panic("boom in a client handler")
			}
			return &mcp.ElicitResult{Action: "decline"}, nil
		},
	})
	client.AddReceivingMiddleware(Middleware(logr.Discard()))
	server := mcp.NewServer(&mcp.Implementation{Name: "s", Version: "1"}, nil)
	ct, st := mcp.NewInMemoryTransports()
	ss, err := server.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := client.Connect(ctx, ct, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()

	_, err = ss.Elicit(ctx, &mcp.ElicitParams{Message: "first", RequestedSchema: map[string]any{"type": "object"}})
	var rpcErr *jsonrpc.Error
	if !errors.As(err, &rpcErr) || rpcErr.Code != jsonrpc.CodeInternalError {
		t.Fatalf("the request whose handler panicked: want an internal error, got %v", err)
	}
	if res, err := ss.Elicit(ctx, &mcp.ElicitParams{Message: "second", RequestedSchema: map[string]any{"type": "object"}}); err != nil || res.Action != "decline" {
		t.Fatalf("the next request: %v %v", res, err)
	}
}
