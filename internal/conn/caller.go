package conn

import (
	"context"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ServerRequestTimeout bounds a server's request to a session (sampling, elicitation, roots):
// a session that never answers costs the server an error after this long, nothing more.
var ServerRequestTimeout = 5 * time.Minute

// Caller is the session a forwarded request comes from. A server's own requests (sampling,
// elicitation, roots) made while that request is in flight are sent to it: the connection is
// shared by every session of the project, so the request in flight is what tells them apart.
type Caller interface {
	CreateMessage(context.Context, *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error)
	Elicit(context.Context, *mcp.ElicitParams) (*mcp.ElicitResult, error)
	ListRoots(context.Context, *mcp.ListRootsParams) (*mcp.ListRootsResult, error)
}

type callerKey struct{}

// WithCaller marks the requests sent with ctx as coming from caller.
func WithCaller(ctx context.Context, caller Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, caller)
}

func callerFrom(ctx context.Context) Caller {
	c, _ := ctx.Value(callerKey{}).(Caller)
	return c
}

// callerFor finds the session a 2025-11-25 server's request belongs to: the caller of the
// request it arrived with, when the SDK hands over that request's context, else the only
// session with a request in flight on this connection. With none, or several that cannot be
// told apart, it answers the server with a clear error.
func (c *Conn) callerFor(ctx context.Context, method string) (Caller, error) {
	if caller := callerFrom(ctx); caller != nil {
		return caller, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch len(c.callers) {
	case 0:
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest,
			Message: fmt.Sprintf("projectmcp: %s while no agent session has a request in flight on this connection", method)}
	case 1:
		for caller := range c.callers {
			return caller, nil
		}
	}
	return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest,
		Message: fmt.Sprintf("projectmcp: %s while %d agent sessions have requests in flight on this shared connection; it cannot tell which one it is for", method, len(c.callers))}
}

// serverRequests are the client handlers that route a server's requests to a session (on
// 2025-11-25 servers, which send them as requests of their own).
func (c *Conn) serverRequests(opts *mcp.ClientOptions) {
	opts.CreateMessageHandler = func(ctx context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
		return ask(c, ctx, "sampling/createMessage", func(ctx context.Context, caller Caller) (*mcp.CreateMessageResult, error) {
			return caller.CreateMessage(ctx, req.Params)
		})
	}
	opts.ElicitationHandler = func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		return ask(c, ctx, "elicitation/create", func(ctx context.Context, caller Caller) (*mcp.ElicitResult, error) {
			return caller.Elicit(ctx, req.Params)
		})
	}
	// 2026-07-28 servers ask inside a result instead (inputRequests): such a result goes back
	// to the session as it is, with the server's requestState, and the session's next request
	// carries the answers (the gateway passes both through; the SDK asks a 2025-11-25 session
	// itself). So the input requests reach the session that made the call by construction.
	opts.MultiRoundTrip = &mcp.MultiRoundTripOptions{Disabled: true}
}

// ask sends one server request to the session it belongs to, bounded by ServerRequestTimeout.
func ask[T any](c *Conn, ctx context.Context, method string, do func(context.Context, Caller) (T, error)) (T, error) {
	caller, err := c.callerFor(ctx, method)
	if err != nil {
		var zero T
		return zero, err
	}
	ctx, cancel := context.WithTimeout(ctx, ServerRequestTimeout)
	defer cancel()
	return do(ctx, caller)
}

// roots answers a 2025-11-25 server's roots/list: the session's roots, or the project's own
// when no session's request is in flight.
func (c *Conn) roots(ctx context.Context, params *mcp.ListRootsParams) (*mcp.ListRootsResult, error) {
	caller, err := c.callerFor(ctx, "roots/list")
	if err != nil {
		return &mcp.ListRootsResult{Roots: c.opts.Roots}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, ServerRequestTimeout)
	defer cancel()
	return caller.ListRoots(ctx, params)
}

// rootsMiddleware answers a 2025-11-25 server's roots/list (see roots).
func (c *Conn) rootsMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method != "roots/list" {
			return next(ctx, method, req)
		}
		params, _ := req.GetParams().(*mcp.ListRootsParams)
		return c.roots(ctx, params)
	}
}
