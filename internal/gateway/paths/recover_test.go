package paths

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsh-dev/projectmcp/internal/recovery"
	"github.com/dsh-dev/projectmcp/internal/testutil"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

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
	var logs testutil.LogLines
	in := &inputs{log: logs.Logger(), parked: map[string]*pendingCall{}}
	pc := in.start(context.Background(), Origin{method: "tools/call"}, nil, func(context.Context, Origin) (any, error) {
		panic("boom in a call")
	})
	select {
	case <-pc.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the call never ended")
	}
	var rpcErr *jsonrpc.Error
	if !errors.As(pc.err, &rpcErr) || rpcErr.Code != jsonrpc.CodeInternalError || len(logs.Matching("boom in a call")) != 1 {
		t.Fatalf("want an internal error, logged once: %v, %q", pc.err, logs.Lines())
	}
}
