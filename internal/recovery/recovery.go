// Package recovery keeps a panic in code run for one request to that request. The SDK runs
// its servers' and clients' handlers on goroutines of its own, outside net/http's recovery,
// and the gateway runs calls on goroutines of its own too: a panic on any of them ends the
// process, and with it every project's sessions and connections. Here a panic becomes a
// JSON-RPC internal error for the request it happened in, logged once with its stack.
package recovery

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Middleware recovers a panic in the handlers it wraps (a server's or a client's, and all
// they call on the handler's goroutine): the request gets a JSON-RPC internal error, and the
// panic is logged once with its stack. Outermost, it covers every other middleware.
func Middleware(log logr.Logger) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (res mcp.Result, err error) {
			defer func() {
				if v := recover(); v != nil {
					res, err = nil, Error(log, method, v)
				}
			}()
			return next(ctx, method, req)
		}
	}
}

// Error logs a panic recovered while handling what (a method, mostly) and returns the
// JSON-RPC error its request gets, which says nothing of the panic: its value may carry what
// the request was about. Call it with recover's value.
func Error(log logr.Logger, what string, v any) *jsonrpc.Error {
	logPanic(log, what, v)
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "projectmcp: internal error handling " + what}
}

// Run runs f, and logs a panic in it rather than letting it end the process: for the work of
// a goroutine that has no request to fail (a session's writer sending it a notification).
func Run(log logr.Logger, what string, f func()) {
	defer func() {
		if v := recover(); v != nil {
			logPanic(log, what, v)
		}
	}()
	f()
}

// Panic is a panic recovered on one goroutine to be raised again on another, the one whose
// owner recovers it: its stack is the first goroutine's.
type Panic struct {
	Value any
	Stack []byte
}

// Capture makes recover's value a Panic, with the stack of the goroutine that panicked (a
// Panic already is one).
func Capture(v any) *Panic {
	if p, ok := v.(*Panic); ok {
		return p
	}
	return &Panic{Value: v, Stack: debug.Stack()}
}

func (p *Panic) Error() string { return fmt.Sprintf("%v\n\n%s", p.Value, p.Stack) }

// logPanic logs a recovered panic with the stack of the goroutine it happened on.
func logPanic(log logr.Logger, what string, v any) {
	p := Capture(v)
	log.Error(fmt.Errorf("panic: %v", p.Value), "Recovered a panic; only its request fails", "handling", what, "stack", string(p.Stack))
}
