package conn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ServerRequestTimeout bounds a server's request to a session (sampling, elicitation, roots):
// a session that never answers costs the server an error after this long, nothing more.
var ServerRequestTimeout = 5 * time.Minute

// Caller is the session a forwarded request comes from. A server's own requests (sampling,
// elicitation) made while that request is in flight are sent to it: the connection is shared
// by every session of the project, so the request in flight is what tells them apart. Roots
// are the connection's own, never a caller's (roots).
type Caller interface {
	CreateMessage(context.Context, *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error)
	Elicit(context.Context, *mcp.ElicitParams) (*mcp.ElicitResult, error)
}

// A RawAsker is a Caller that takes a server's request as the server sent it and gives the
// session's answer as the session sent it (a call's own stream): nothing of either is lost
// to a decoding on the way, and the server, not the gateway, judges the answer.
type RawAsker interface {
	AskRaw(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error)
}

// A CallOf is the Caller of one call of a session (its requests go on that call's stream):
// Session is the session's own Caller. Where nothing ties a server's request to a call
// (callerFor) the connection counts sessions, so two calls of one session are one session,
// and the request goes to the session's Caller.
type CallOf interface {
	Caller
	Session() Caller
}

// SessionOf is the Caller of the session caller's call belongs to (caller itself when it is
// a session's).
func SessionOf(caller Caller) Caller {
	if call, ok := caller.(CallOf); ok {
		return call.Session()
	}
	return caller
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

// A request's log sink takes the log lines the server sends on the request's own stream, in
// place of OnNotice: a 2026-07-28 session gets its log lines with its request, at the level
// the request names (which the request carries to the server, in place of the connection's).
type requestLogsKey struct{}

type requestLogs struct {
	level mcp.LoggingLevel
	put   func(*mcp.LoggingMessageParams)
}

// WithLogSink has the log lines a server sends with the requests made with ctx go to put, and
// asks the server for those of level and above.
func WithLogSink(ctx context.Context, level mcp.LoggingLevel, put func(*mcp.LoggingMessageParams)) context.Context {
	return context.WithValue(ctx, requestLogsKey{}, &requestLogs{level: level, put: put})
}

// capabilitiesKey carries the client capabilities a 2026-07-28 server is told with a request,
// in place of the gateway's own: those of the session the request comes from, as far as the
// gateway relays them, so the server asks that session for nothing it did not declare.
type capabilitiesKey struct{}

// WithClientCapabilities has requests made with ctx tell a 2026-07-28 server what caps gives
// (a JSON object) as the client's capabilities. caps is called only for such a server, once
// per request sent: a 2025-11-25 server, told the connection's capabilities at initialize,
// costs nothing.
func WithClientCapabilities(ctx context.Context, caps func() json.RawMessage) context.Context {
	return context.WithValue(ctx, capabilitiesKey{}, caps)
}

func capabilitiesFrom(ctx context.Context) func() json.RawMessage {
	caps, _ := ctx.Value(capabilitiesKey{}).(func() json.RawMessage)
	return caps
}

// responder answers for the connection what a server sends the client of its own accord:
// its requests (sampling and elicitation go to the session they belong to, roots/list gets the
// project's roots, ping an answer) and its notifications (list changes, progress, log lines,
// resource updates). It serves both paths: the SDK client's handlers (clientOptions) and the
// streams of forwarded requests (notification, serverRequest). It holds no state of its own.
type responder struct {
	ctx      context.Context // the connection's: a request answered on stdio ends with it
	flight   *flight         // who has requests in flight (attribute)
	progress *progressRelay
	signals  *signals
	secrets  *scrubber
	onNotice func(Notice)
	roots    []*mcp.Root // Options.Roots
	// streams: the transport ties a server's request to the call it is for (streamable HTTP:
	// the call's own stream).
	streams bool
}

// callerFor finds the session a 2025-11-25 server's request belongs to: the caller of the
// request it arrived with, when the SDK hands over that request's context. A streamable HTTP
// server sends a request that belongs to a call on that call's own stream, so one that came
// another way (the GET stream, whose messages the specification says are unrelated to the
// client's requests) belongs to no session and is refused. stdio and legacy SSE carry nothing
// that ties a request to a call: there it goes to the only session with a request in flight
// on the connection (flight.attribute).
func (r *responder) callerFor(ctx context.Context, method string) (Caller, error) {
	if caller := callerFrom(ctx); caller != nil {
		return caller, nil
	}
	if r.streams {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest,
			Message: fmt.Sprintf("projectmcp: %s outside the stream of a request: send it on the stream of the request it is for, so the gateway can tell which agent session that is", method)}
	}
	return r.flight.attribute(method)
}

// clientOptions are the SDK client's handlers: notifications are noted (a list change only
// signals, the supervisor re-lists: handlers run one at a time per session) or passed on, and
// the server's requests are routed to a session (on 2025-11-25 servers, which send them as
// requests of their own).
func (r *responder) clientOptions() *mcp.ClientOptions {
	opts := &mcp.ClientOptions{
		ToolListChangedHandler:     func(context.Context, *mcp.ToolListChangedRequest) { r.signals.announce(ToolList) },
		PromptListChangedHandler:   func(context.Context, *mcp.PromptListChangedRequest) { r.signals.announce(PromptList) },
		ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) { r.signals.announce(ResourceList) },
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
			r.onNotice(Notice{ResourceUpdated: req.Params})
		},
		LoggingMessageHandler: func(_ context.Context, req *mcp.LoggingMessageRequest) {
			r.onNotice(Notice{Log: req.Params})
		},
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			r.progress.relay(req.Params)
		},
		// Declared, so servers offer the features that use them.
		CreateMessageHandler: func(ctx context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			return ask(r, ctx, "sampling/createMessage", func(ctx context.Context, caller Caller) (*mcp.CreateMessageResult, error) {
				return caller.CreateMessage(ctx, req.Params)
			})
		},
		ElicitationHandler: func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return ask(r, ctx, "elicitation/create", func(ctx context.Context, caller Caller) (*mcp.ElicitResult, error) {
				return caller.Elicit(ctx, req.Params)
			})
		},
		// 2026-07-28 servers ask inside a result (inputRequests): such a result goes back to
		// the session as it is, with the server's requestState, and the session's next request
		// carries the answers (the gateway passes both through, the state sealed to the
		// session; the SDK asks a 2025-11-25 session itself). So the input requests reach the
		// session that made the call by construction.
		MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true},
	}
	return opts
}

// ask sends one server request to the session it belongs to, bounded by ServerRequestTimeout.
func ask[T any](r *responder, ctx context.Context, method string, do func(context.Context, Caller) (T, error)) (T, error) {
	caller, err := r.callerFor(ctx, method)
	if err != nil {
		var zero T
		return zero, err
	}
	ctx, cancel := context.WithTimeout(ctx, ServerRequestTimeout)
	defer cancel()
	return do(ctx, caller)
}

// rootsList answers a 2025-11-25 server's roots/list with the project's own root, never a
// session's: in that revision roots belong to the connection, and the connection serves every
// session of the project, so whatever one session answered would set what the server reaches
// for all of them (a filesystem server replaces its directories with the client's roots).
// Sessions' own roots reach only 2026-07-28 servers, which ask inside a call's result.
func (r *responder) rootsList() *mcp.ListRootsResult {
	roots := r.roots
	if roots == nil {
		roots = []*mcp.Root{} // an empty list, not null: roots is an array
	}
	return &mcp.ListRootsResult{Roots: roots}
}

// rootsMiddleware answers a 2025-11-25 server's roots/list (see rootsList).
func (r *responder) rootsMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method != "roots/list" {
			return next(ctx, method, req)
		}
		return r.rootsList(), nil
	}
}

// notification handles a notification a server sent on the stream of a forwarded request, as
// the SDK client's handlers (clientOptions) handle the others; a log line there belongs to the
// request's session (ctx carries its caller).
func (r *responder) notification(ctx context.Context, method string, params json.RawMessage) {
	switch method {
	case "notifications/tools/list_changed":
		r.signals.announce(ToolList)
	case "notifications/prompts/list_changed":
		r.signals.announce(PromptList)
	case "notifications/resources/list_changed":
		r.signals.announce(ResourceList)
	case "notifications/progress":
		var p mcp.ProgressNotificationParams
		if json.Unmarshal(params, &p) == nil {
			r.progress.relay(&p)
		}
	case "notifications/message":
		var p mcp.LoggingMessageParams
		if json.Unmarshal(params, &p) != nil {
			return
		}
		if sink, ok := ctx.Value(requestLogsKey{}).(*requestLogs); ok {
			sink.put(&p)
			return
		}
		r.onNotice(Notice{Log: &p, InRequest: true, Caller: callerFrom(ctx)})
	case "notifications/resources/updated":
		var p mcp.ResourceUpdatedNotificationParams
		if json.Unmarshal(params, &p) == nil {
			r.onNotice(Notice{ResourceUpdated: &p})
		}
	}
}

// askAsSent sends a server's request to its session as the server sent it when the session's
// caller takes it so (RawAsker); ok is false when it does not (the typed path answers).
func (r *responder) askAsSent(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, *jsonrpc.Error, bool) {
	caller, err := r.callerFor(ctx, method)
	if err != nil {
		return nil, nil, false // the typed path finds the same and says so
	}
	asker, ok := caller.(RawAsker)
	if !ok {
		return nil, nil, false
	}
	ctx, cancel := context.WithTimeout(ctx, ServerRequestTimeout)
	defer cancel()
	res, err := asker.AskRaw(ctx, method, params)
	if err != nil {
		var rpcErr *jsonrpc.Error
		if errors.As(err, &rpcErr) {
			return nil, rpcErr, true
		}
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: r.secrets.scrub(err.Error())}, true
	}
	return res, nil, true
}

// serverRequest answers a request a server sent on the stream of a forwarded request (or, on
// stdio, among its output), as the SDK client's handlers (clientOptions, rootsMiddleware)
// answer the others; ctx carries the caller of the forwarded request, so the request goes to
// exactly that session.
func (r *responder) serverRequest(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, *jsonrpc.Error) {
	if method == "sampling/createMessage" || method == "elicitation/create" {
		if res, rpcErr, ok := r.askAsSent(ctx, method, params); ok {
			return res, rpcErr
		}
	}
	var res any
	var err error
	switch method {
	case "ping":
		res = struct{}{}
	case "sampling/createMessage":
		var p mcp.CreateMessageParams
		if err = json.Unmarshal(params, &p); err == nil {
			res, err = ask(r, ctx, method, func(ctx context.Context, caller Caller) (*mcp.CreateMessageResult, error) {
				return caller.CreateMessage(ctx, &p)
			})
		}
	case "elicitation/create":
		var p mcp.ElicitParams
		if err = json.Unmarshal(params, &p); err == nil {
			res, err = ask(r, ctx, method, func(ctx context.Context, caller Caller) (*mcp.ElicitResult, error) {
				return caller.Elicit(ctx, &p)
			})
		}
	case "roots/list":
		res = r.rootsList()
	default:
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: fmt.Sprintf("projectmcp: method %q is not offered to servers", method)}
	}
	if err != nil {
		var rpcErr *jsonrpc.Error
		if errors.As(err, &rpcErr) {
			return nil, rpcErr
		}
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: r.secrets.scrub(err.Error())}
	}
	data, err := json.Marshal(res)
	if err != nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}
	}
	return data, nil
}
