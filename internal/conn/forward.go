package conn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/jsonrpcwire"
	"github.com/dsh-dev/projectmcp/internal/revision"
	"github.com/dsh-dev/projectmcp/internal/tracing"
)

// A forwarded request is sent to the server as JSON-RPC bytes and its result returned as the
// server sent it, past the SDK's typed path: the SDK client decodes a result into Go types
// (and each content item once more), which the gateway would only encode again for the
// session. The connection's upstream (upstream.go) carries forwarded requests beside the SDK
// client, on the same session.

// ErrNotRaw is Forward's answer, before anything is sent, on a session it cannot forward
// requests on (legacy SSE; a 2026-07-28 HTTP session before its _meta is known): the caller
// uses the typed path.
var ErrNotRaw = errors.New("the connection takes no raw requests")

// ErrOtherRevision is Forward's answer, before anything is sent, when the server speaks
// another protocol revision than the one the caller can take results in.
var ErrOtherRevision = errors.New("the server speaks another protocol revision")

// ErrAsksInput is Forward's answer when a server speaking 2026-07-28 answered an AcceptsStateful caller
// with input requests (MRTR), which a 2025-11-25 session cannot take: the request was sent, and
// the caller is to send it again on a path that asks the session itself (the SDK's).
var ErrAsksInput = errors.New("the server asks the session for input")

// Accepts is which results a Forward caller takes, by the protocol revision
// (internal/revision) whose shape they have: each revision's results have fields of their own,
// which a session of the other must not see.
type Accepts int

const (
	// AcceptsAny: a result of either revision, as the server sent it.
	AcceptsAny Accepts = iota
	// AcceptsStateful: 2025-11-25 and older. A 2026-07-28 server's result is reshaped
	// (statefulShape).
	AcceptsStateful
	// AcceptsStateless: 2026-07-28. A server speaking an older revision is ErrOtherRevision.
	AcceptsStateless
	// AcceptsStatefulOnly: 2025-11-25 and older, from a server speaking such a revision too; a
	// 2026-07-28 server is ErrOtherRevision (nothing is reshaped).
	AcceptsStatefulOnly
)

func (r Accepts) admits(version string) bool {
	switch r {
	case AcceptsStateless:
		return revision.Of(version) >= revision.Stateless
	case AcceptsStatefulOnly:
		return revision.Of(version) < revision.Stateless
	}
	return true
}

// statefulShape makes a 2026-07-28 server's tools/call result what a 2025-11-25 session gets
// from that server directly: without resultType and without the server's serverInfo in _meta
// (a 2025-11-25 session learns it at initialize). A result asking for input is ErrAsksInput.
func statefulShape(res json.RawMessage) (json.RawMessage, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(res, &top); err != nil {
		return nil, fmt.Errorf("the server's result is not a JSON object: %v", err)
	}
	if ir, ok := top["inputRequests"]; (ok && string(ir) != "null") || string(top["resultType"]) == `"input_required"` {
		return nil, ErrAsksInput
	}
	delete(top, "resultType")
	if m, ok := top["_meta"]; ok {
		var meta map[string]json.RawMessage
		if json.Unmarshal(m, &meta) == nil {
			delete(meta, mcp.MetaKeyServerInfo)
			if len(meta) == 0 {
				delete(top, "_meta")
			} else {
				top["_meta"], _ = json.Marshal(meta) // members as received: cannot fail
			}
		}
	}
	return json.Marshal(top)
}

// RawResult is a forwarded request's result as the server sent it.
type RawResult = json.RawMessage

// Forward sends one request to the server without decoding its result, with Call's rules
// (ErrUnavailable while not Ready, ErrDestroyed once Destroy began, one retry when the server
// forgot the session). members are the request's params members without braces, e.g.
// `"name":"echo","arguments":{}`; Forward adds the _meta the session needs (2026-07-28 request
// metadata, the log level, the progress token when onProgress is not nil, ctx's trace
// context). An AcceptsStateless caller on a connection speaking an older revision gets ErrOtherRevision,
// and any caller on one that takes no forwarded requests ErrNotRaw, before anything is sent; a
// AcceptsStateful caller gets a 2026-07-28 server's result reshaped (statefulShape), or ErrAsksInput.
func (c *Conn) Forward(ctx context.Context, method string, members []byte, onProgress func(*mcp.ProgressNotificationParams), rev Accepts) (RawResult, error) {
	var meta []byte
	if onProgress != nil {
		token, done := c.progress.watch(onProgress)
		defer done()
		meta = jsonrpcwire.AppendMember(meta, "progressToken", jsonrpcwire.AppendQuoted(nil, token))
	}
	if level := c.subs.requestLevel(ctx); level != "" {
		meta = jsonrpcwire.AppendMember(meta, mcp.MetaKeyLogLevel, jsonrpcwire.AppendQuoted(nil, string(level)))
	}
	if fields := tracing.Fields(ctx); fields != nil { // the forwarding span's trace context (SEP-414)
		for _, k := range tracing.MetaKeys {
			if v := fields[k]; v != "" {
				meta = jsonrpcwire.AppendMember(meta, k, jsonrpcwire.AppendQuoted(nil, v))
			}
		}
	}
	return roundTrip(c, ctx, func(ctx context.Context, s *mcp.ClientSession) (RawResult, error) {
		c.mu.Lock()
		current, up := c.live.session == s, c.live.up
		c.mu.Unlock()
		if !current {
			return nil, mcp.ErrConnectionClosed
		}
		if !rev.admits(s.InitializeResult().ProtocolVersion) {
			return nil, ErrOtherRevision
		}
		if up == nil || !up.takes() {
			return nil, ErrNotRaw
		}
		res, err := up.call(ctx, method, members, meta)
		var rpcErr *jsonrpc.Error
		if errors.As(err, &rpcErr) {
			return nil, rpcErr
		}
		if err == nil && rev == AcceptsStateful && revision.Of(s.InitializeResult().ProtocolVersion) >= revision.Stateless {
			return statefulShape(res)
		}
		return res, err
	})
}

// Takes reports, before anything is sent, whether Forward can take a request of a caller
// taking results in rev on the connection's current session: nil, ErrOtherRevision or
// ErrNotRaw (what Forward would answer), or ErrUnavailable while no session is Ready. The
// session can change between Takes and Forward (a reconnect), so Forward checks again.
func (c *Conn) Takes(rev Accepts) error {
	c.mu.Lock()
	s, up, phase := c.live.session, c.live.up, c.state.Phase
	c.mu.Unlock()
	switch {
	case s == nil || phase != v1alpha1.PhaseReady:
		return ErrUnavailable
	case !rev.admits(s.InitializeResult().ProtocolVersion):
		return ErrOtherRevision
	case up == nil || !up.takes():
		return ErrNotRaw
	}
	return nil
}
