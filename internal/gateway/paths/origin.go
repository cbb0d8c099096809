package paths

import (
	"encoding/json"
	"net/http"

	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/gateway/access"
	"github.com/modelcontextprotocol/go-sdk/mcp"
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
	// item is the tool, prompt or resource the request uses, as RBAC names it (access.Item).
	item access.Item
	// args are a tool call's or prompt's arguments as the session sent them, for the audit
	// log (--audit-arguments).
	args json.RawMessage
	// task: a tools/call the gateway runs as a task of the server's (taskbridge.go), whose
	// requests to the server the call timeout bounds each, not the call: a task may work for
	// longer, and its server answers all the while.
	task bool
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

// Session is the session o names (its ref).
func (o Origin) Session() string { return o.session }

// SessionOf is the stateful session a call's caller (conn.SessionOf) is, when the request path
// made it for the session's own requests (not for a call's stream); nil for any other.
func SessionOf(c conn.Caller) *mcp.ServerSession {
	if sc, ok := c.(sessionCaller); ok {
		return sc.ss
	}
	return nil
}

// Who is the identity o's request is served as.
func (o Origin) Who() access.Identity { return o.who }
