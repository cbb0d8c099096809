package paths

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/gateway/access"
	"github.com/dsh-dev/projectmcp/internal/metrics"
	"github.com/dsh-dev/projectmcp/internal/tracing"
)

// Origin is who sent a forwarded request, and what it is: its MCP method (for metrics), the
// session it belongs to (for the slot) and, for a stateful session, who answers the server's
// own requests made meanwhile.
type Origin struct {
	method    string
	session   string
	stateless bool // a 2026-07-28 session (see sessionID)
	caller    conn.Caller
	// name and raw: the projected and the server's own name of the tool or prompt called.
	name, raw string
	// who: the identity the request is served as (its principal, for RBAC items and the audit).
	who access.Identity
	// header: the HTTP headers the request came with, for its trace context unless traced.
	header http.Header
	// traced: the context already carries the request's trace context, as the forward path's
	// does (it runs in the HTTP request's context, where serveProject read it); the SDK's
	// handlers' does not.
	traced bool
	// meta reads the request's own _meta, whose trace context (SEP-414) comes before the
	// headers'; nil when it has none.
	meta func(key string) string
	// caps: the session's client capabilities as a 2026-07-28 server is told them (relayable).
	caps func() json.RawMessage
	// item is the tool, prompt or resource the request uses, as RBAC names it (rbac.go).
	item access.Item
	// args are a tool call's or prompt's arguments as the session sent them, for the audit
	// log (--audit-arguments).
	args json.RawMessage
}

// OriginOf describes a request the SDK server decoded.
func OriginOf(req mcp.Request) Origin {
	o := Origin{method: methodOf(req)}
	o.session, o.stateless = SessionID(req)
	if ss, ok := req.GetSession().(*mcp.ServerSession); ok && ss.ID() != "" {
		o.caller = sessionCaller{ss}
		o.caps = sessionCapabilities(ss)
	}
	if extra := req.GetExtra(); extra != nil {
		o.header = extra.Header
		o.who = access.FromSDK(extra.Header)
	}
	if m := MetaOf(req); m != nil {
		if _, ok := m["traceparent"]; ok {
			o.meta = func(key string) string { v, _ := m[key].(string); return v }
		}
		if caps, ok := m[mcp.MetaKeyClientCapabilities]; ok && o.stateless {
			o.caps = func() json.RawMessage {
				raw, _ := json.Marshal(caps)
				return relayable(raw)
			}
		}
	}
	return o
}

// forward sends one request of a session to the session's slot for server. It waits through
// a repoint or rebuild (registry.Await), and sends once more, on the new connection, when a
// swap replaced the connection before the request was sent (conn.ErrDestroyed: the old server
// never saw it). The server's own requests made meanwhile (sampling, elicitation) go to this
// session (conn.WithCaller).
func dispatch[T any](ctx context.Context, p *Paths, o Origin, server string, do func(context.Context, *conn.Conn) (T, error)) (res T, err error) {
	if err = p.admit(ctx, o); err != nil {
		p.audit(o, server, time.Now(), "denied")
		return res, err
	}
	if o.meta != nil {
		ctx = tracing.FromMeta(ctx, o.meta)
	}
	if o.header != nil && !o.traced && !trace.SpanContextFromContext(ctx).IsValid() {
		ctx = tracing.FromHeaders(ctx, o.header)
	}
	if o.caps != nil {
		ctx = conn.WithClientCapabilities(ctx, o.caps)
	}
	ctx, end := Span(ctx, p.key, "projectmcp.forward "+o.method, o.session, func() []attribute.KeyValue {
		attrs := []attribute.KeyValue{attribute.String("mcp.method.name", o.method), attribute.String("projectmcp.server", server)}
		if o.name != "" {
			attrs = append(attrs, attribute.String("projectmcp.name", o.name), attribute.String("projectmcp.raw_name", o.raw))
		}
		return attrs
	})
	defer func() { end(err) }()
	start, session, timedOut := time.Now(), ctx, false
	defer func() {
		if _, again := retry(err); again || errors.Is(err, ErrMoved) {
			return // the typed path, or the project's next replica, sends it again and counts it then
		}
		m := metrics.ServerOf(p.key.Namespace, p.key.Name, server)
		outcome := outcomeOf(session, err, timedOut)
		if o.method == "tools/call" {
			if err == nil && isError(res) {
				outcome = metrics.ToolError
			}
			m.ToolCall(outcome, time.Since(start))
		}
		m.Forwarded(o.method, outcome)
		p.audit(o, server, start, outcome.String())
	}()
	if limit := p.opts.CallTimeout; limit > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, limit)
		defer cancel()
		defer func() {
			if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
				timedOut = true
				err = fmt.Errorf("MCP server %q did not answer within %s (the gateway's --call-timeout)", server, limit)
			}
		}()
	}
	if o.caller != nil {
		ctx = conn.WithCaller(ctx, o.caller)
	}
	ctx = conn.WithSession(ctx, o.session) // the session's turn on the shared connection (conn's fair queue)
	for attempt := 0; ; attempt++ {
		c := p.ep.Await(ctx, o.session, server)
		if c == nil && p.ep.Moved() {
			var zero T
			return zero, ErrMoved
		}
		if c == nil {
			var zero T
			return zero, fmt.Errorf("%w: MCP server %q is not available to this session", conn.ErrUnavailable, server)
		}
		res, err = do(ctx, c)
		if attempt == 0 && errors.Is(err, conn.ErrDestroyed) {
			continue
		}
		if errors.Is(err, conn.ErrDestroyed) && p.ep.Moved() {
			err = ErrMoved // the handoff's drain refused it: nothing was sent
		}
		return res, err
	}
}

// methodOf names a forwarded request's MCP method, for metrics.
func methodOf(req mcp.Request) string {
	switch req.(type) {
	case *mcp.CallToolRequest:
		return "tools/call"
	case *mcp.GetPromptRequest:
		return "prompts/get"
	case *mcp.ReadResourceRequest:
		return "resources/read"
	case *mcp.CompleteRequest:
		return "completion/complete"
	case *mcp.SubscribeRequest:
		return "resources/subscribe"
	}
	return "other"
}

// outcomeOf is how a forwarded request ended, for metrics: session is the context of the
// session's request, timedOut whether the gateway's call timeout ended it.
func outcomeOf(session context.Context, err error, timedOut bool) metrics.Outcome {
	switch {
	case err == nil:
		return metrics.OK
	case errors.Is(err, conn.ErrUnavailable):
		return metrics.Unavailable
	case timedOut:
		return metrics.Timeout
	case session.Err() != nil:
		return metrics.Cancelled
	}
	return metrics.Error
}

// isError reports whether a tool call's result is a tool error: the server's isError, typed
// or as the server sent it. A forwarded result is decoded only when it may have isError true.
func isError(res any) bool {
	switch r := res.(type) {
	case *mcp.CallToolResult:
		return r != nil && r.IsError
	case conn.RawResult:
		return rawIsError(r)
	}
	return false
}

var isErrorKey = []byte(`"isError"`)

// rawIsError reports whether a forwarded tools/call result has isError true at its top level.
func rawIsError(res []byte) bool {
	for rest := res; ; {
		i := bytes.Index(rest, isErrorKey)
		if i < 0 {
			return false
		}
		rest = rest[i+len(isErrorKey):]
		v := bytes.TrimLeft(rest, " \t\r\n")
		if len(v) == 0 || v[0] != ':' {
			continue
		}
		if bytes.HasPrefix(bytes.TrimLeft(v[1:], " \t\r\n"), []byte("true")) {
			// A candidate: it may belong to a nested object, so decode the top level.
			var top struct {
				IsError bool `json:"isError"`
			}
			return json.Unmarshal(res, &top) == nil && top.IsError
		}
	}
}

// callForwarded forwards a call the SDK's server took from the session (a 2026-07-28
// session's call to a server speaking 2025-11-25, mostly) to such a server, and decodes its
// result for the SDK to send on. Over streamable HTTP the server's own requests during the call (sampling,
// elicitation) then arrive on the call's own stream, which tells whose they are; the
// SDK's client hands its handlers no trace of the call, and the connection could only guess
// (the one session with a request in flight, else an error). A server speaking 2026-07-28, or
// a connection that takes typed requests only, is ErrOtherRevision or ErrNotRaw before anything
// is sent, and the caller uses the SDK's client.
func callForwarded(ctx context.Context, c *conn.Conn, raw string, args json.RawMessage, onProgress func(*mcp.ProgressNotificationParams)) (*mcp.CallToolResult, error) {
	res, err := c.Forward(ctx, "tools/call", callMembers(raw, args, nil, nil), onProgress, conn.LegacyExact)
	if err != nil {
		return nil, err
	}
	var out mcp.CallToolResult
	if err := json.Unmarshal(res, &out); err != nil {
		return nil, fmt.Errorf("the server's result is not a tools/call result: %v", err)
	}
	return &out, nil
}

// metaLevel is the log level a 2026-07-28 request asks for in its _meta, or "".
func metaLevel(req mcp.Request) mcp.LoggingLevel {
	if m := MetaOf(req); m != nil {
		if l, ok := m[mcp.MetaKeyLogLevel].(string); ok {
			return mcp.LoggingLevel(l)
		}
	}
	return ""
}

// ToolHandler forwards a call on a projected tool to the session's slot for the server. Failures
// of the server (down, gone, protocol errors) come back as tool errors naming the server, so
// the agent sees them as it sees any failing tool.
func (p *Paths) ToolHandler(server, raw string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		args := req.Params.Arguments
		if len(args) == 0 || string(args) == "null" {
			args = json.RawMessage("{}")
		}
		o := OriginOf(req)
		o.name, o.raw = req.Params.Name, raw
		o.item, o.args = access.Item{Resource: access.ResourceTools, Server: server, Name: raw}, args
		token := req.Params.GetProgressToken()
		level := mcp.LoggingLevel("")
		if o.stateless {
			level = metaLevel(req)
		}
		var write func(relayed) // by the call's own writer, which serves this session alone (relayCall)
		if (token != nil || level != "") && req.Session != nil {
			write = func(e relayed) {
				switch {
				case e.progress != nil && token != nil:
					_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
						ProgressToken: token, Progress: e.progress.Progress, Total: e.progress.Total, Message: e.progress.Message,
					})
				case e.log != nil:
					_ = req.Session.Log(ctx, e.log) // on the request's stream, at the request's level
				}
			}
		}
		send := func(ctx context.Context, c *conn.Conn) (*mcp.CallToolResult, error) {
			return relayCall(ctx, write, func(ctx context.Context, put func(relayed)) (*mcp.CallToolResult, error) {
				if level != "" {
					ctx = logsTo(ctx, put, level)
				}
				onProgress := progressTo(put, token != nil)
				if len(req.Params.InputResponses) == 0 && len(req.Params.RequestState) == 0 {
					if res, err := callForwarded(ctx, c, raw, args, onProgress); !retried(err) {
						return res, err
					}
				}
				return c.Call(ctx, &mcp.CallToolParams{Name: raw, Arguments: args,
					InputResponses: req.Params.InputResponses, RequestState: req.Params.RequestState}, onProgress)
			})
		}
		res, round, err := inRounds(ctx, p, o, req.ClientCapabilities(), req.Params.RequestState, req.Params.InputResponses, server, send)
		switch {
		case round != nil:
			return &mcp.CallToolResult{InputRequests: round.requests, RequestState: round.state}, nil
		case err != nil:
			rpcErr, text := failureOf(err, true, ctx.Err() != nil)
			if rpcErr != nil {
				return nil, rpcErr
			}
			return errorResult(text), nil
		}
		return &mcp.CallToolResult{Content: res.Content, StructuredContent: res.StructuredContent, IsError: res.IsError,
			InputRequests: res.InputRequests, RequestState: res.RequestState}, nil
	}
}

// inRounds runs a session's request on server: a stateful session's through forward, a
// stateless one's through statelessRound, as a 2025-11-25 server may ask the session for input
// while the request runs, and the request then runs on while the session is asked in its
// result (round: input.go). A requestState of the server's own (2026-07-28) passes through in
// send. A resumption the gateway refuses is an *inputError.
func inRounds[T any](ctx context.Context, p *Paths, o Origin, caps *mcp.ClientCapabilities, state string,
	responses mcp.InputResponseMap, server string, send func(context.Context, *conn.Conn) (T, error)) (res T, round *inputRound, err error) {
	if !o.stateless {
		res, err = dispatch(ctx, p, o, server, send)
		return res, nil, err
	}
	if !isInputState(state) {
		state = ""
	}
	return statelessRound(ctx, p, o, caps, state, responses, server, send)
}

// PromptHandler forwards prompts/get on a projected prompt under the server's own name.
func (p *Paths) PromptHandler(server, raw string) mcp.PromptHandler {
	return func(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		o := OriginOf(req)
		o.name, o.raw = req.Params.Name, raw
		o.item = access.Item{Resource: access.ResourcePrompts, Server: server, Name: raw}
		if p.opts.AuditArguments {
			o.args, _ = json.Marshal(req.Params.Arguments)
		}
		res, round, err := inRounds(ctx, p, o, req.ClientCapabilities(), req.Params.RequestState, req.Params.InputResponses, server,
			func(ctx context.Context, c *conn.Conn) (*mcp.GetPromptResult, error) {
				return c.GetPrompt(ctx, &mcp.GetPromptParams{Name: raw, Arguments: req.Params.Arguments,
					InputResponses: req.Params.InputResponses, RequestState: req.Params.RequestState})
			})
		switch {
		case err != nil:
			return nil, RequestError(ctx, err)
		case round != nil:
			return &mcp.GetPromptResult{InputRequests: round.requests, RequestState: round.state}, nil
		}
		return &mcp.GetPromptResult{Description: res.Description, Messages: res.Messages,
			InputRequests: res.InputRequests, RequestState: res.RequestState}, nil
	}
}

// ResourceHandler forwards resources/read, URI unchanged, to the server that lists the URI or
// whose template matched it (the SDK server routes by exact URI, then by template).
func (p *Paths) ResourceHandler(server string) mcp.ResourceHandler {
	return func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		o := OriginOf(req)
		o.name = req.Params.URI
		o.item = p.ep.Routes().ResourceItem(server, req.Params.URI)
		res, round, err := inRounds(ctx, p, o, req.ClientCapabilities(), req.Params.RequestState, req.Params.InputResponses, server,
			func(ctx context.Context, c *conn.Conn) (*mcp.ReadResourceResult, error) {
				return c.ReadResource(ctx, &mcp.ReadResourceParams{URI: req.Params.URI,
					InputResponses: req.Params.InputResponses, RequestState: req.Params.RequestState})
			})
		switch {
		case err != nil:
			return nil, RequestError(ctx, err)
		case round != nil:
			return &mcp.ReadResourceResult{InputRequests: round.requests, RequestState: round.state}, nil
		}
		return &mcp.ReadResourceResult{Contents: res.Contents, InputRequests: res.InputRequests, RequestState: res.RequestState}, nil
	}
}

// sessionCaller sends a server's requests to a stateful agent session, when the session
// declared the capability (else the server gets a clear error, as the session would give).
type sessionCaller struct{ ss *mcp.ServerSession }

func (s sessionCaller) capabilities() *mcp.ClientCapabilities {
	if ip := s.ss.InitializeParams(); ip != nil && ip.Capabilities != nil {
		return ip.Capabilities
	}
	return &mcp.ClientCapabilities{}
}

func lacks(capability string) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "projectmcp: the agent session did not declare the " + capability + " capability"}
}

func (s sessionCaller) CreateMessage(ctx context.Context, p *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error) {
	if s.capabilities().Sampling == nil {
		return nil, lacks("sampling")
	}
	return s.ss.CreateMessage(ctx, p)
}

func (s sessionCaller) Elicit(ctx context.Context, p *mcp.ElicitParams) (*mcp.ElicitResult, error) {
	if s.capabilities().Elicitation == nil {
		return nil, lacks("elicitation")
	}
	return s.ss.Elicit(ctx, p)
}
