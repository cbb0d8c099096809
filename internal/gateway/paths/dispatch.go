package paths

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/gateway/access"
	"github.com/dsh-dev/projectmcp/internal/metrics"
	"github.com/dsh-dev/projectmcp/internal/tracing"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/types"
)

// Span starts a span of an operation on one of the project's sessions; end ends it, with err's
// status when err is not nil. The attributes (attrs' and the project's and session's) are set
// only on a span that records: with tracing off, every forwarded call would build them for
// nothing.
func Span(ctx context.Context, key types.NamespacedName, name, session string, attrs func() []attribute.KeyValue) (_ context.Context, end func(err error)) {
	ctx, span := tracing.Tracer().Start(ctx, name)
	if span.IsRecording() {
		var kv []attribute.KeyValue
		if attrs != nil {
			kv = attrs()
		}
		span.SetAttributes(append(kv, attribute.String("projectmcp.project", key.String()), attribute.String("projectmcp.session", session))...)
	}
	return ctx, func(err error) {
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

// admit refuses a request whose item the caller may not use.
func (p *Paths) admit(ctx context.Context, o Origin) error {
	if o.item.Resource == "" && !access.UsesItem(o.method) {
		return nil
	}
	ia, on := p.ep.RBAC()
	if !on {
		return nil
	}
	if o.item.Resource == "" {
		return fmt.Errorf("projectmcp: %s names no tool, prompt or resource the project's RBAC policy can check", o.method)
	}
	if !ia.Permit(ctx, o.who, p.key, []access.Item{o.item})[0] {
		return &access.DeniedItem{Project: p.key.Name, Item: o.item}
	}
	return nil
}

// dispatch sends one request of a session to the session's slot for server, on both paths:
// admitted (RBAC items), traced, bounded by the call timeout, counted and audited. It waits through
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
	if limit := p.opts.CallTimeout; limit > 0 && !o.task {
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
	ctx = conn.WithSession(ctx, o.session, o.who.Principal) // the session's turn on the shared connection (conn's fair queue)
	for attempt := 0; ; attempt++ {
		c, refused := p.ep.Await(ctx, o.session, server)
		if c == nil && p.ep.Moved() {
			var zero T
			return zero, ErrMoved
		}
		if c == nil && refused != nil {
			var zero T
			return zero, fmt.Errorf("%w: %w", conn.ErrUnavailable, refused)
		}
		if c == nil {
			var zero T
			return zero, fmt.Errorf("%w: MCP server %q is not available to this session", conn.ErrUnavailable, server)
		}
		var serverTimedOut bool
		res, serverTimedOut, err = withServerTimeout(ctx, c, do)
		timedOut = timedOut || serverTimedOut
		if attempt == 0 && errors.Is(err, conn.ErrDestroyed) {
			continue
		}
		if errors.Is(err, conn.ErrDestroyed) && p.ep.Moved() {
			err = ErrMoved // the handoff's drain refused it: nothing was sent
		}
		return res, err
	}
}

// withServerTimeout sends one request under the server's own deadline (its spec's timeout,
// from a client's per-server "timeout"), when it has one: a request past it is cancelled
// upstream, as a session's cancellation is, and answered with an error naming the server and
// the deadline. timedOut is whether the deadline ended it.
func withServerTimeout[T any](ctx context.Context, c *conn.Conn, do func(context.Context, *conn.Conn) (T, error)) (res T, timedOut bool, err error) {
	limit := c.Timeout()
	if limit <= 0 {
		res, err = do(ctx, c)
		return res, false, err
	}
	bounded, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	res, err = do(bounded, c)
	if err != nil && errors.Is(bounded.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
		return res, true, fmt.Errorf("MCP server %q did not answer within %s (its timeout in the project's config)", c.Server(), limit)
	}
	return res, false, err
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
