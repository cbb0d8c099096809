package conn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/jsonrpcwire"
	"github.com/dsh-dev/projectmcp/internal/tracing"
)

// The wire carries forwarded requests beside the SDK's client, without its typed layer: the
// SDK client decodes a result into Go types (and each content item once more), which the
// gateway would only encode again for the session. The SDK's connection is not wrapped (the
// SDK keeps unexported hooks on its own connections, which a wrapper would hide); instead:
//
//   - stdio: raw requests are written to the server's stdin through the same locked writer
//     the SDK writes through, with string ids of their own ("projectmcp-<n>", which the SDK's
//     integer ids never are), and their responses are taken out of the server's output
//     before the SDK reads it (wirestdio.go).
//   - streamable HTTP: raw requests are POSTed by the wire itself, on a 2025-11-25 session
//     with the SDK session's id, and the response stream is read in the caller's goroutine;
//     what the server sends on it besides the response (progress, log messages, its own
//     requests) is handled as the SDK client would (wirepost.go). A stateless 2026-07-28
//     session has no id; each request carries the session's _meta members instead, taken
//     from the SDK client's first request after the handshake (metaNoter), and the standard
//     Mcp-Method and Mcp-Name headers the server checks against the body.
//
// Legacy SSE answers ErrNotRaw, and the caller uses the SDK's typed path.
const wireIDPrefix = "projectmcp-"

// wire is one session's raw side.
type wire struct {
	c    *Conn
	next atomic.Uint64

	// stdio
	stdin   *lockedWriter
	mu      sync.Mutex
	pending map[string]chan *jsonrpc.Response
	err     error // set once the server's output has ended: the connection is gone
	// meta holds the _meta members the SDK client puts into every request on a 2026-07-28
	// session (protocol version, client info, capabilities), taken from the first request it
	// writes: raw requests need the same, and taking them from the SDK keeps them the SDK's.
	meta atomic.Pointer[[]byte]
	// discovered are the _meta members of the SDK client's server/discover, which carries
	// the newest version it speaks: the session's own once that is the version agreed (ready).
	discovered atomic.Pointer[discoveredMeta]

	// streamable HTTP
	http      *http.Client
	url       string
	version   string        // the agreed protocol version, once Ready
	sessionID func() string // the SDK session's id
}

// newWire makes the raw side of a session over transport t, and returns the transport the
// SDK client is to connect through (for stdio: t with its output split and its input shared).
func newWire(c *Conn, t mcp.Transport) (*wire, mcp.Transport) {
	w := &wire{c: c, pending: map[string]chan *jsonrpc.Response{}}
	switch t := t.(type) {
	case *mcp.IOTransport:
		w.stdin = &lockedWriter{w: t.Writer, wire: w}
		return w, splitStdio(w, t)
	case *mcp.StreamableClientTransport:
		w.http, w.url = t.HTTPClient, t.Endpoint
		if w.http == nil {
			w.http = http.DefaultClient
		}
		sdk, noting := *t, *w.http // copies: the endpoint's transport is not changed
		noting.Transport = metaNoter{base: w.http.Transport, w: w}
		sdk.HTTPClient = &noting
		return w, &sdk
	}
	return w, t
}

// metaNoter is the HTTP transport of the SDK client on a streamable HTTP session: it hands the
// SDK's first request after the handshake to noteMeta, as lockedWriter does on stdio, and is a
// pass-through from then on.
type metaNoter struct {
	base http.RoundTripper // nil: http.DefaultTransport
	w    *wire
}

func (m metaNoter) RoundTrip(req *http.Request) (*http.Response, error) {
	if m.w.meta.Load() == nil && req.Method == http.MethodPost && req.GetBody != nil {
		if body, err := req.GetBody(); err == nil {
			data, _ := io.ReadAll(io.LimitReader(body, metaNoteBytes))
			body.Close()
			m.w.noteMeta(data)
		}
	}
	if m.base == nil {
		return http.DefaultTransport.RoundTrip(req)
	}
	return m.base.RoundTrip(req)
}

// metaNoteBytes bounds what metaNoter reads of a request: the SDK's requests after the
// handshake are small (a list, a ping); a larger one is passed by unnoted.
const metaNoteBytes = 1 << 20

// discoveredMeta are server/discover's _meta members and the version they name.
type discoveredMeta struct {
	members []byte
	version string
}

// ready notes what the session agreed on, once it is Ready (and before its first lists, which
// go raw). A 2026-07-28 HTTP session's _meta members come from the SDK's subscriptions/listen
// when the server offers list_changed; otherwise, when its server/discover named the version
// agreed, from there: the SDK client sends the same with every request (the version agreed,
// its info, its capabilities for that version), so raw requests need not wait for the SDK's
// first one.
func (w *wire) ready(s *mcp.ClientSession) {
	w.version = s.InitializeResult().ProtocolVersion
	w.sessionID = s.ID
	if d := w.discovered.Load(); d != nil && d.version == w.version && w.meta.Load() == nil {
		w.meta.CompareAndSwap(nil, &d.members)
	}
}

// raw reports whether requests can be sent raw on this session: on stdio, and on streamable
// HTTP once the session is Ready, at 2026-07-28 once the session's _meta members are known.
func (w *wire) raw() bool {
	if w.stdin != nil {
		return true
	}
	if w.http == nil || w.version == "" {
		return false
	}
	if w.version < "2026-07-28" {
		return true
	}
	m := w.meta.Load()
	return m != nil && len(*m) > 0
}

// lockedWriter is the server's stdin, shared by the SDK client and raw requests: each Write is
// one whole message, and no two interleave.
type lockedWriter struct {
	mu   sync.Mutex
	w    io.WriteCloser
	wire *wire
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	if l.wire.meta.Load() == nil {
		l.wire.noteMeta(p)
	}
	return l.write(p)
}

func (l *lockedWriter) write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) Close() error { return l.w.Close() }

// sessionMetaKeys are the _meta members a 2026-07-28 client sends with every request.
var sessionMetaKeys = []string{mcp.MetaKeyProtocolVersion, mcp.MetaKeyClientInfo, mcp.MetaKeyClientCapabilities}

// noteMeta takes the session's _meta members from the SDK client's first request after the
// handshake (server/discover carries the newest version whatever is then agreed).
func (w *wire) noteMeta(line []byte) {
	var msg struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			Meta map[string]json.RawMessage `json:"_meta"`
		} `json:"params"`
	}
	if json.Unmarshal(line, &msg) != nil || len(msg.ID) == 0 || msg.Method == "" || msg.Method == "initialize" {
		return
	}
	members := []byte{}
	for _, k := range sessionMetaKeys {
		if v, ok := msg.Params.Meta[k]; ok {
			members = jsonrpcwire.AppendMember(members, k, v)
		}
	}
	if msg.Method == "server/discover" {
		var version string
		_ = json.Unmarshal(msg.Params.Meta[mcp.MetaKeyProtocolVersion], &version)
		w.discovered.Store(&discoveredMeta{members: members, version: version})
		return
	}
	w.meta.Store(&members)
}

// withCapabilities is the session's _meta members with what caps gives in place of the
// capabilities they name (unchanged when caps is nil or the members cannot be read).
func withCapabilities(session []byte, capsOf func() json.RawMessage) []byte {
	if capsOf == nil {
		return session
	}
	caps := capsOf()
	var m map[string]json.RawMessage
	if json.Unmarshal(append(append([]byte{'{'}, session...), '}'), &m) != nil {
		return session
	}
	m[mcp.MetaKeyClientCapabilities] = caps
	out := make([]byte, 0, len(session)+len(caps))
	for _, k := range sessionMetaKeys {
		if v, ok := m[k]; ok {
			out = jsonrpcwire.AppendMember(out, k, v)
		}
	}
	return out
}

// AppendMember appends `,"key":value` to the members of a JSON object being written (without
// the comma when dst is empty).
func AppendMember(dst []byte, key string, value json.RawMessage) []byte {
	return jsonrpcwire.AppendMember(dst, key, value)
}

// params makes a params object of members and two lists of _meta members (the session's and
// the request's own; either may be empty).
func params(members, session, meta []byte) []byte {
	p := make([]byte, 0, len(members)+len(session)+len(meta)+16)
	p = append(p, '{')
	p = append(p, members...)
	if len(session)+len(meta) > 0 {
		if len(members) > 0 {
			p = append(p, ',')
		}
		p = append(p, `"_meta":{`...)
		p = append(p, session...)
		if len(session) > 0 && len(meta) > 0 {
			p = append(p, ',')
		}
		p = append(p, meta...)
		p = append(p, '}')
	}
	return append(p, '}')
}

func (w *wire) deliver(id string, resp *jsonrpc.Response) {
	w.mu.Lock()
	ch := w.pending[id]
	delete(w.pending, id)
	w.mu.Unlock()
	if ch != nil {
		ch <- resp // buffered: never blocks the reader
	}
	// A response nobody waits for (the request was cancelled, or never sent) is dropped.
}

// fail ends every raw request waiting on stdio: the server's output has ended.
func (w *wire) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = fmt.Errorf("%w: %w", mcp.ErrConnectionClosed, err)
	}
	for id, ch := range w.pending {
		close(ch)
		delete(w.pending, id)
	}
}

// call sends one request, params given as members without braces plus the request's own
// _meta members (the session's, on 2026-07-28, are added here), and waits for its result.
func (w *wire) call(ctx context.Context, method string, members, meta []byte) (json.RawMessage, error) {
	id := wireIDPrefix + strconv.FormatUint(w.next.Add(1), 10)
	var session []byte
	if sm := w.meta.Load(); sm != nil {
		session = withCapabilities(*sm, capabilitiesFrom(ctx))
	}
	p := params(members, session, meta)
	if w.stdin == nil {
		return w.post(ctx, id, method, p)
	}
	ch := make(chan *jsonrpc.Response, 1)
	w.mu.Lock()
	if w.err != nil {
		err := w.err
		w.mu.Unlock()
		return nil, err
	}
	w.pending[id] = ch
	w.mu.Unlock()
	line := append(jsonrpcwire.Request(id, method, p), '\n')
	if _, err := w.stdin.write(line); err != nil {
		w.forget(id)
		return nil, fmt.Errorf("%w: writing to the server: %w", mcp.ErrConnectionClosed, err)
	}
	select {
	case resp, ok := <-ch:
		if !ok {
			w.mu.Lock()
			err := w.err
			w.mu.Unlock()
			return nil, err
		}
		if resp.Error != nil {
			return nil, resp.Error
		}
		if len(resp.Result) == 0 {
			return nil, errors.New("the server's response has neither result nor error")
		}
		return resp.Result, nil
	case <-ctx.Done():
		w.forget(id)
		w.cancel(id, ctx.Err())
		return nil, context.Cause(ctx)
	}
}

func (w *wire) forget(id string) {
	w.mu.Lock()
	delete(w.pending, id)
	w.mu.Unlock()
}

// cancel tells the server a raw request is abandoned, as the SDK client does for its own.
func (w *wire) cancel(id string, why error) {
	p, _ := json.Marshal(map[string]any{"requestId": id, "reason": why.Error()})
	if w.stdin != nil {
		_, _ = w.stdin.write(append(jsonrpcwire.Notification("notifications/cancelled", p), '\n'))
		return
	}
	ctx, stop := context.WithTimeout(context.Background(), cancelNoticeTimeout)
	defer stop()
	w.send(ctx, jsonrpcwire.Notification("notifications/cancelled", p), "notifications/cancelled")
}

// cancelNoticeTimeout bounds sending notifications/cancelled for an abandoned raw request.
const cancelNoticeTimeout = 5 * time.Second

// ErrNotRaw is Forward's answer, before anything is sent, on a session it cannot send raw
// requests on (legacy SSE; a 2026-07-28 HTTP session before its _meta is known): the caller
// uses the typed path.
var ErrNotRaw = errors.New("the connection takes no raw requests")

// ErrOtherRevision is Forward's answer, before anything is sent, when the server speaks
// another protocol revision than the one the caller can take results in.
var ErrOtherRevision = errors.New("the server speaks another protocol revision")

// ErrAsksInput is Forward's answer when a server speaking 2026-07-28 answered a Legacy caller
// with input requests (MRTR), which a 2025-11-25 session cannot take: the request was sent, and
// the caller is to send it again on a path that asks the session itself (the SDK's).
var ErrAsksInput = errors.New("the server asks the session for input")

// Revision is the protocol revision a Forward caller takes results in: each revision's
// results have fields of their own, which a session of the other must not see.
type Revision int

const (
	AnyRevision Revision = iota
	// Legacy: 2025-11-25 and older. A 2026-07-28 server's result is reshaped (legacyShape).
	Legacy
	// Newest: 2026-07-28. A server speaking an older revision is ErrOtherRevision.
	Newest
	// LegacyExact: 2025-11-25 and older, from a server speaking such a revision too; a
	// 2026-07-28 server is ErrOtherRevision (nothing is reshaped).
	LegacyExact
)

func (r Revision) admits(version string) bool {
	switch r {
	case Newest:
		return version >= "2026-07-28"
	case LegacyExact:
		return version < "2026-07-28"
	}
	return true
}

// legacyShape makes a 2026-07-28 server's tools/call result what a 2025-11-25 session gets
// from that server directly: without resultType and without the server's serverInfo in _meta
// (a 2025-11-25 session learns it at initialize). A result asking for input is ErrAsksInput.
func legacyShape(res json.RawMessage) (json.RawMessage, error) {
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
				top["_meta"], _ = json.Marshal(meta) // raw members: cannot fail
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
// context). A Newest caller on a connection speaking an older revision gets ErrOtherRevision,
// and any caller on one that takes no raw requests ErrNotRaw, before anything is sent; a
// Legacy caller gets a 2026-07-28 server's result reshaped (legacyShape), or ErrAsksInput.
func (c *Conn) Forward(ctx context.Context, method string, members []byte, onProgress func(*mcp.ProgressNotificationParams), rev Revision) (RawResult, error) {
	var meta []byte
	if onProgress != nil {
		token, done := c.watchProgress(onProgress)
		defer done()
		meta = jsonrpcwire.AppendMember(meta, "progressToken", jsonrpcwire.AppendQuoted(nil, token))
	}
	if level := c.requestLevel(ctx); level != "" {
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
		w := c.wireOf(s)
		if w == nil {
			return nil, mcp.ErrConnectionClosed
		}
		if !rev.admits(s.InitializeResult().ProtocolVersion) {
			return nil, ErrOtherRevision
		}
		if !w.raw() {
			return nil, ErrNotRaw
		}
		res, err := w.call(ctx, method, members, meta)
		var wireErr *jsonrpc.Error
		if errors.As(err, &wireErr) {
			return nil, wireErr
		}
		if err == nil && rev == Legacy && s.InitializeResult().ProtocolVersion >= "2026-07-28" {
			return legacyShape(res)
		}
		return res, err
	})
}

// Takes reports, before anything is sent, whether Forward can take a request of a caller
// taking results in rev on the connection's current session: nil, ErrOtherRevision or
// ErrNotRaw (what Forward would answer), or ErrUnavailable while no session is Ready. The
// session can change between Takes and Forward (a reconnect), so Forward checks again.
func (c *Conn) Takes(rev Revision) error {
	c.mu.Lock()
	s, w, phase := c.session, c.wire, c.state.Phase
	c.mu.Unlock()
	switch {
	case s == nil || w == nil || phase != v1alpha1.PhaseReady:
		return ErrUnavailable
	case !rev.admits(s.InitializeResult().ProtocolVersion):
		return ErrOtherRevision
	case !w.raw():
		return ErrNotRaw
	}
	return nil
}

// wireOf is the wire of session s, or nil once s is no longer the connection's session.
func (c *Conn) wireOf(s *mcp.ClientSession) *wire {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.session != s {
		return nil
	}
	return c.wire
}
