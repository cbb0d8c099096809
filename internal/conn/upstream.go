package conn

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/internal/jsonrpcwire"
)

// A session's upstream carries forwarded requests beside the SDK's client, without its typed
// layer. The SDK's connection is not wrapped (the SDK keeps unexported hooks on its own
// connections, which a wrapper would hide); each transport has an upstream of its own:
//
//   - stdio (stdioUpstream): forwarded requests are written to the server's stdin through
//     the same locked writer the SDK writes through, with string ids of their own
//     ("projectmcp-<n>", which the SDK's integer ids never are), and their responses are
//     taken out of the server's output before the SDK reads it (upstreamstdio.go).
//   - streamable HTTP (httpUpstream): forwarded requests are POSTed by the upstream itself,
//     on a 2025-11-25 session with the SDK session's id, and the response stream is read in
//     the caller's goroutine; what the server sends on it besides the response (progress, log
//     messages, its own requests) is handled as the SDK client would (upstreamhttp.go), and a
//     stream the server ends early is resumed (upstreamresume.go). A stateless 2026-07-28
//     session has no id; each request carries the session's _meta members instead, taken
//     from the SDK client's first request after the handshake (noteMeta), and the standard
//     Mcp-Method and Mcp-Name headers the server checks against the body.
//
// Legacy SSE has no upstream: Forward answers ErrNotRaw, and the caller uses the typed path.
type upstream interface {
	// call sends one request, params given as members without braces plus the request's own
	// _meta members (the session's, on 2026-07-28, are added), and waits for its result.
	call(ctx context.Context, method string, members, meta []byte) (json.RawMessage, error)
	// ready notes what the session agreed on, once it is Ready (before its first lists).
	ready(s *mcp.ClientSession)
	// takes reports whether requests can be forwarded on the session now.
	takes() bool
	// probedByRelist reports whether, on a 2026-07-28 session, the backstop re-list stands in
	// for the health probe (background.go).
	probedByRelist() bool
	// toolHeaders reports whether the SDK client sets headers on a call from the tools it has
	// listed itself (Mcp-Param on a 2026-07-28 streamable HTTP session: primeToolCache).
	toolHeaders() bool
}

// forwardIDPrefix begins the id of every forwarded request.
const forwardIDPrefix = "projectmcp-"

// newUpstream makes the upstream of a session over transport t (nil for a transport that has
// none), and returns the transport the SDK client is to connect through: t, or for stdio t
// with its output split and its input shared. resp answers what the server sends besides
// responses; o gives the bounds.
func newUpstream(t mcp.Transport, ep *endpoint, resp *responder, o *Options) (upstream, mcp.Transport) {
	switch t := t.(type) {
	case *mcp.IOTransport:
		u := &stdioUpstream{resp: resp, bound: o.MaxMessageBytes, items: o.MaxListItems, log: o.Log, pending: map[string]chan *jsonrpc.Response{}}
		return u, u.split(t)
	case *mcp.StreamableClientTransport:
		u := &httpUpstream{resp: resp, bound: o.MaxMessageBytes, http: t.HTTPClient, url: t.Endpoint, carrier: ep.carrier, headers: ep.headers, bearer: ep.bearer, serverRefused: ep.serverRefused}
		if u.http == nil {
			u.http = http.DefaultClient
		}
		return u, u.sdkTransport(t)
	}
	return nil, t
}

// upstreamBase is what the upstreams of both transports keep alike: the ids of the requests
// they forward, and the session's _meta members.
type upstreamBase struct {
	next atomic.Uint64
	// meta holds the _meta members the SDK client puts into every request on a 2026-07-28
	// session (protocol version, client info, capabilities), taken from the first request it
	// writes: forwarded requests need the same, and taking them from the SDK keeps them the
	// SDK's.
	meta atomic.Pointer[[]byte]
	// others are meta's members but the capabilities, read once per meta (withCapabilities).
	others atomic.Pointer[otherMembers]
	// discovered are the _meta members of the SDK client's server/discover, which carries
	// the newest version it speaks: the session's own once that is the version agreed (ready).
	discovered atomic.Pointer[discoveredMeta]
}

// discoveredMeta are server/discover's _meta members and the version they name.
type discoveredMeta struct {
	members []byte
	version string
}

// nextID is the id of the next forwarded request.
func (b *upstreamBase) nextID() string {
	return forwardIDPrefix + strconv.FormatUint(b.next.Add(1), 10)
}

// agreed notes the version the session agreed on. A 2026-07-28 HTTP session's _meta members
// come from the SDK's subscriptions/listen when the server offers list_changed; otherwise,
// when its server/discover named the version agreed, from there: the SDK client sends the
// same with every request (the version agreed, its info, its capabilities for that version),
// so forwarded requests need not wait for the SDK's first one.
func (b *upstreamBase) agreed(version string) {
	if d := b.discovered.Load(); d != nil && d.version == version && b.meta.Load() == nil {
		b.meta.CompareAndSwap(nil, &d.members)
	}
}

// metaKnown reports whether the session's _meta members are known.
func (b *upstreamBase) metaKnown() bool {
	m := b.meta.Load()
	return m != nil && len(*m) > 0
}

// sessionMetaKeys are the _meta members a 2026-07-28 client sends with every request.
var sessionMetaKeys = []string{mcp.MetaKeyProtocolVersion, mcp.MetaKeyClientInfo, mcp.MetaKeyClientCapabilities}

// noteMeta takes the session's _meta members from the SDK client's first request after the
// handshake (server/discover carries the newest version whatever is then agreed).
func (b *upstreamBase) noteMeta(line []byte) {
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
		b.discovered.Store(&discoveredMeta{members: members, version: version})
		return
	}
	b.meta.Store(&members)
}

// params makes the params of a forwarded request sent with ctx: members, the session's _meta
// members (on 2026-07-28, with the capabilities of ctx's caller: withCapabilities) and the
// request's own.
func (b *upstreamBase) params(ctx context.Context, members, meta []byte) []byte {
	var session []byte
	if sm := b.meta.Load(); sm != nil {
		o := b.others.Load()
		if o == nil || o.of != sm { // the members are read once, not per request
			o = &otherMembers{of: sm}
			o.members, o.ok = othersOf(*sm)
			b.others.Store(o)
		}
		session = o.withCapabilities(*sm, capabilitiesFrom(ctx))
	}
	return params(members, session, meta)
}

// otherMembers are a session's _meta members but its capabilities (of: those members).
type otherMembers struct {
	of      *[]byte
	members []byte
	ok      bool // false: the members could not be read
}

// othersOf reads a session's _meta members (sessionMetaKeys) and gives them without the
// capabilities, in sessionMetaKeys' order; false when they cannot be read.
func othersOf(session []byte) ([]byte, bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal(append(append([]byte{'{'}, session...), '}'), &m) != nil {
		return nil, false
	}
	out := make([]byte, 0, len(session))
	for _, k := range sessionMetaKeys {
		if v, ok := m[k]; ok && k != mcp.MetaKeyClientCapabilities {
			out = jsonrpcwire.AppendMember(out, k, v)
		}
	}
	return out, true
}

// withCapabilities is the session's _meta members with what caps gives in place of the
// capabilities they name (unchanged when caps is nil or the members cannot be read). The
// capabilities come last in sessionMetaKeys, so they follow the others.
func (o *otherMembers) withCapabilities(session []byte, capsOf func() json.RawMessage) []byte {
	if capsOf == nil || !o.ok {
		return session
	}
	caps := capsOf()
	out := make([]byte, 0, len(o.members)+len(caps)+len(mcp.MetaKeyClientCapabilities)+4)
	return jsonrpcwire.AppendMember(append(out, o.members...), mcp.MetaKeyClientCapabilities, caps)
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
