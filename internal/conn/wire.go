package conn

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The wire carries forwarded requests on the connection's own transport without the SDK's
// typed client: the SDK client decodes a result into Go types (and each content item once
// more), which the gateway would only encode again for the session. Forwarded requests go out
// with string ids of their own ("projectmcp-<n>"), which the SDK client (integer ids) never
// uses, and their responses are taken off the stream before the client sees them; everything
// else (initialize, lists, pings, notifications, a server's own requests) still flows through
// the SDK client, so the transport, the session handling and the protocol revisions stay the
// SDK's.
const wireIDPrefix = "projectmcp-"

// wireTransport wraps a transport so that the Conn can send raw requests on it.
type wireTransport struct {
	inner mcp.Transport
	wire  *wire
}

func (t *wireTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	transport := t.inner
	if stdio, ok := transport.(*mcp.IOTransport); ok {
		transport = splitStdio(t.wire, stdio)
	}
	inner, err := transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	t.wire.inner = inner
	if t.wire.pumped != nil {
		go t.wire.pump() // ends when the wire is closed or the connection fails
	}
	return t.wire, nil
}

// wire is one session's connection: the SDK client reads and writes through it, and raw
// requests share it.
type wire struct {
	inner mcp.Connection
	next  atomic.Uint64

	// On streamable HTTP a raw request is POSTed by the wire itself (post), and what the
	// server sends on that POST's stream besides the response (its own requests, progress,
	// log messages) is handed to the SDK client through injected. pumped carries the inner
	// connection's messages then, so that Read can wait for both.
	http     *http.Client
	url      string
	version  atomic.Pointer[string] // the agreed protocol version, once < 2026-07-28 (see direct)
	pumped   chan readResult
	injected chan jsonrpc.Message
	stop     chan struct{}
	stopOnce sync.Once

	mu      sync.Mutex
	pending map[string]chan *jsonrpc.Response
	err     error // set once reading has failed: the connection is gone

	// meta holds the _meta members the SDK client puts into every request on a 2026-07-28
	// session (protocol version, client info, capabilities), taken from the first request it
	// sends: raw requests need the same, and taking them from the SDK keeps them the SDK's.
	meta atomic.Pointer[[]byte]
}

type readResult struct {
	msg jsonrpc.Message
	err error
}

// newWire makes the wire for a transport; a streamable HTTP one gets raw POSTs of its own.
func newWire(t mcp.Transport) *wire {
	w := &wire{pending: map[string]chan *jsonrpc.Response{}}
	if st, ok := t.(*mcp.StreamableClientTransport); ok {
		w.http, w.url = st.HTTPClient, st.Endpoint
		if w.http == nil {
			w.http = http.DefaultClient
		}
		w.pumped = make(chan readResult)
		w.injected = make(chan jsonrpc.Message)
		w.stop = make(chan struct{})
	}
	return w
}

// pump reads the inner connection for Read until it fails or the wire is closed.
func (w *wire) pump() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-w.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	for {
		msg, err := w.inner.Read(ctx)
		select {
		case w.pumped <- readResult{msg, err}:
		case <-w.stop:
			return
		}
		if err != nil {
			return
		}
	}
}

// read returns the next message from the server.
func (w *wire) read(ctx context.Context) (jsonrpc.Message, error) {
	if w.pumped == nil {
		return w.inner.Read(ctx)
	}
	select {
	case r := <-w.pumped:
		return r.msg, r.err
	case msg := <-w.injected:
		return msg, nil
	case <-w.stop:
		return nil, mcp.ErrConnectionClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Read hands the SDK client every message except the responses to raw requests.
func (w *wire) Read(ctx context.Context) (jsonrpc.Message, error) {
	for {
		msg, err := w.read(ctx)
		if err != nil {
			w.fail(err)
			return nil, err
		}
		if resp, ok := msg.(*jsonrpc.Response); ok {
			if id, ok := resp.ID.Raw().(string); ok && strings.HasPrefix(id, wireIDPrefix) {
				w.deliver(id, resp)
				continue
			}
		}
		return msg, nil
	}
}

// Write passes the SDK client's messages on, noting the per-request _meta of its first request.
func (w *wire) Write(ctx context.Context, msg jsonrpc.Message) error {
	if w.meta.Load() == nil {
		// Not the handshake: server/discover carries the newest version whatever is then agreed.
		if req, ok := msg.(*jsonrpc.Request); ok && req.IsCall() && req.Method != "initialize" && req.Method != "server/discover" {
			w.noteMeta(req.Params)
		}
	}
	return w.inner.Write(ctx, msg)
}

func (w *wire) Close() error {
	if w.stop != nil {
		w.stopOnce.Do(func() { close(w.stop) })
	}
	return w.inner.Close()
}
func (w *wire) SessionID() string { return w.inner.SessionID() }

// sessionMetaKeys are the _meta members a 2026-07-28 client sends with every request.
var sessionMetaKeys = []string{mcp.MetaKeyProtocolVersion, mcp.MetaKeyClientInfo, mcp.MetaKeyClientCapabilities}

func (w *wire) noteMeta(params json.RawMessage) {
	var p struct {
		Meta map[string]json.RawMessage `json:"_meta"`
	}
	members := []byte{}
	if json.Unmarshal(params, &p) == nil {
		for _, k := range sessionMetaKeys {
			if v, ok := p.Meta[k]; ok {
				members = appendMember(members, k, v)
			}
		}
	}
	w.meta.Store(&members)
}

// appendMember appends `,"key":value` (without the comma when dst is empty).
func appendMember(dst []byte, key string, value json.RawMessage) []byte {
	if len(dst) > 0 {
		dst = append(dst, ',')
	}
	dst = appendQuoted(dst, key)
	dst = append(dst, ':')
	return append(dst, value...)
}

func (w *wire) deliver(id string, resp *jsonrpc.Response) {
	w.mu.Lock()
	ch := w.pending[id]
	delete(w.pending, id)
	w.mu.Unlock()
	if ch != nil {
		ch <- resp // buffered: never blocks the reader
	}
	// A response nobody waits for (the request was cancelled) is dropped.
}

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

// call sends one request with params given as the members of its params object (without
// braces; _meta members appended here) and waits for its result. When ctx ends first, the
// server is told with notifications/cancelled.
func (w *wire) call(ctx context.Context, method string, members []byte, meta []byte) (json.RawMessage, error) {
	id := wireIDPrefix + strconv.FormatUint(w.next.Add(1), 10)
	ch := make(chan *jsonrpc.Response, 1)
	w.mu.Lock()
	if w.err != nil {
		err := w.err
		w.mu.Unlock()
		return nil, err
	}
	w.pending[id] = ch
	w.mu.Unlock()

	params := make([]byte, 0, len(members)+len(meta)+16)
	params = append(params, '{')
	params = append(params, members...)
	if len(meta) > 0 {
		if len(members) > 0 {
			params = append(params, ',')
		}
		params = append(params, `"_meta":{`...)
		params = append(params, meta...)
		params = append(params, '}')
	}
	params = append(params, '}')
	if v := w.version.Load(); v != nil {
		w.forget(id) // post reads its own response
		return w.post(ctx, *v, id, method, params)
	}
	rid, _ := jsonrpc.MakeID(id)
	if err := w.inner.Write(ctx, &jsonrpc.Request{ID: rid, Method: method, Params: params}); err != nil {
		w.forget(id)
		return nil, err
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
		return nil, ctx.Err()
	}
}

func (w *wire) forget(id string) {
	w.mu.Lock()
	delete(w.pending, id)
	w.mu.Unlock()
}

// cancel tells the server a raw request is abandoned, as the SDK client does for its own.
func (w *wire) cancel(id string, why error) {
	params, _ := json.Marshal(map[string]any{"requestId": id, "reason": why.Error()})
	ctx, stop := context.WithTimeout(context.Background(), cancelNoticeTimeout)
	defer stop()
	_ = w.inner.Write(ctx, &jsonrpc.Request{Method: "notifications/cancelled", Params: params})
}

// cancelNoticeTimeout bounds sending notifications/cancelled for an abandoned raw request.
const cancelNoticeTimeout = 5 * time.Second

// ErrOtherRevision is Forward's answer, before anything is sent, when the server speaks
// another protocol revision than the one the caller can take results in.
var ErrOtherRevision = errors.New("the server speaks another protocol revision")

// Revision is the protocol revision a Forward caller takes results in: each revision's
// results have fields of their own, which a session of the other must not see.
type Revision int

const (
	AnyRevision Revision = iota
	Legacy               // 2025-11-25 and older
	Newest               // 2026-07-28
)

func (r Revision) admits(version string) bool {
	return r == AnyRevision || (r == Newest) == (version >= "2026-07-28")
}

// RawResult is a forwarded request's result as the server sent it.
type RawResult = json.RawMessage

// Forward sends one request to the server without decoding its result, with Call's rules
// (ErrUnavailable while not Ready, ErrDestroyed once Destroy began, one retry when the server
// forgot the session). members are the request's params members without braces, e.g.
// `"name":"echo","arguments":{}`; Forward adds the _meta the session needs (2026-07-28 request
// metadata, the log level, the progress token when onProgress is not nil). A connection that
// speaks another revision than rev sends nothing and answers ErrOtherRevision.
func (c *Conn) Forward(ctx context.Context, method string, members []byte, onProgress func(*mcp.ProgressNotificationParams), rev Revision) (RawResult, error) {
	var meta []byte
	if onProgress != nil {
		token := fmt.Sprintf("%s-%d", c.id, c.nextToken.Add(1))
		c.mu.Lock()
		c.progress[token] = onProgress
		c.mu.Unlock()
		defer func() {
			c.mu.Lock()
			delete(c.progress, token)
			c.mu.Unlock()
		}()
		meta = appendMember(meta, "progressToken", appendQuoted(nil, token))
	}
	c.mu.Lock()
	level := c.level
	c.mu.Unlock()
	if level != "" {
		meta = appendMember(meta, mcp.MetaKeyLogLevel, appendQuoted(nil, string(level)))
	}
	return roundTrip(c, ctx, func(ctx context.Context, s *mcp.ClientSession) (RawResult, error) {
		w := c.wireOf(s)
		if w == nil {
			return nil, mcp.ErrConnectionClosed
		}
		if !rev.admits(s.InitializeResult().ProtocolVersion) {
			return nil, ErrOtherRevision
		}
		m := meta
		if sm := w.meta.Load(); sm != nil && len(*sm) > 0 {
			m = bytes.Clone(*sm)
			if len(meta) > 0 {
				m = append(append(m, ','), meta...)
			}
		}
		res, err := w.call(ctx, method, members, m)
		var wireErr *jsonrpc.Error
		if errors.As(err, &wireErr) {
			return nil, wireErr
		}
		return res, err
	})
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
