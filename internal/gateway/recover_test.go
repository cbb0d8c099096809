package gateway

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/dsh-dev/projectmcp/internal/recovery"
	"github.com/dsh-dev/projectmcp/internal/registry"
)

// logLines is a logger that keeps what it is given.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, args)
	}, funcr.Options{})
}

func (l *logLines) matching(s string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}

// A handler that panics on the SDK's goroutine (outside net/http, where nothing else would
// recover it) fails its own request with an internal error, logged once with its stack; the
// session's next request is answered and the process goes on. Without the project's
// recovering middleware the panic ends the test binary.
func TestHandlerPanicFailsOnlyItsRequest(t *testing.T) {
	reg := registry.New(clocktesting.NewFakeClock(time.Now()), logr.Discard())
	defer reg.Shutdown()
	key := types.NamespacedName{Namespace: "ns", Name: "p"}
	reg.SetDesired(key, registry.Desired{})
	var logs logLines
	g := New(Options{Registry: reg, Log: logs.logger()})
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
	logged := logs.matching("boom in a handler")
	if len(logged) != 1 || !strings.Contains(logged[0], "recover_test.go") {
		t.Fatalf("the panic must be logged once with its stack, got %q", logged)
	}
}

// A panic in what the call's writer writes, on a goroutine of its own, is raised again on the
// calling goroutine, with the stack where it happened, for that goroutine's owner to recover.
func TestRelayCallRaisesPanicOnCaller(t *testing.T) {
	var got any
	func() {
		defer func() { got = recover() }()
		_, _ = relayCall(context.Background(), func(relayed) { panic("boom in write") },
			func(_ context.Context, put func(relayed)) (int, error) {
				put(relayed{log: &mcp.LoggingMessageParams{}})
				return 0, nil
			})
	}()
	p, ok := got.(*recovery.Panic)
	if !ok || p.Value != "boom in write" || !strings.Contains(string(p.Stack), "recover_test.go") {
		t.Fatalf("want the panic raised again with its stack, got %v", got)
	}
}

// A panic in send, which runs on the calling goroutine, reaches that goroutine's owner as it
// was raised, once the call's writer wrote what was queued and ended.
func TestRelayCallPanicInSendEndsTheWriter(t *testing.T) {
	var mu sync.Mutex
	var wrote int
	var got any
	func() {
		defer func() { got = recover() }()
		_, _ = relayCall(context.Background(), func(relayed) { mu.Lock(); wrote++; mu.Unlock() },
			func(_ context.Context, put func(relayed)) (int, error) {
				put(relayed{log: &mcp.LoggingMessageParams{}})
				panic("boom in send")
			})
	}()
	mu.Lock()
	defer mu.Unlock()
	if got != "boom in send" || wrote != 1 {
		t.Fatalf("panic %v, %d written: want the send's panic after the one queued line", got, wrote)
	}
}

// A panic in a call the gateway runs for a stateless session (a pendingCall) is the call's
// error, logged with its stack.
func TestPendingCallPanicIsItsError(t *testing.T) {
	var logs logLines
	in := &inputs{log: logs.logger(), parked: map[string]*pendingCall{}}
	pc := in.start(context.Background(), origin{method: "tools/call"}, nil, func(context.Context, origin) (any, error) {
		panic("boom in a call")
	})
	select {
	case <-pc.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the call never ended")
	}
	var rpcErr *jsonrpc.Error
	if !errors.As(pc.err, &rpcErr) || rpcErr.Code != jsonrpc.CodeInternalError || len(logs.matching("boom in a call")) != 1 {
		t.Fatalf("want an internal error, logged once: %v, %q", pc.err, logs.lines)
	}
}
