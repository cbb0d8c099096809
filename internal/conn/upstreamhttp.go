package conn

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	segjson "github.com/segmentio/encoding/json"
	"go.opentelemetry.io/otel/trace"

	"github.com/dsh-dev/projectmcp/internal/bound"
	"github.com/dsh-dev/projectmcp/internal/httpcarrier"
	"github.com/dsh-dev/projectmcp/internal/jsonrpcwire"
	"github.com/dsh-dev/projectmcp/internal/revision"
)

// httpUpstream is a streamable HTTP session's upstream: each forwarded request is POSTed on
// its own, with the session's headers, and its answer (JSON, or an event stream) is read in
// the caller's goroutine.
type httpUpstream struct {
	upstreamBase
	resp  *responder // what the server sends on a request's stream besides the response
	bound int64      // MaxMessageBytes
	http  *http.Client
	url   string
	// carrier carries the requests whose answers their reader bounds, with headers added
	// (nil: every request goes through http)
	carrier *httpcarrier.Carrier
	headers http.Header
	bearer  Bearer // the server's OAuth token source (nil: none)
	// serverRefused is told of a 401 or 403 to a forwarded request (nil: nobody listens)
	serverRefused func(error)
	// redirected: the server redirected a request sent on the carrier; every request goes
	// through http
	redirected atomic.Bool
	version    string        // the agreed protocol version, once Ready
	sessionID  func() string // the SDK session's id
}

// sdkTransport is t with an HTTP client that notes the session's _meta members from the SDK
// client's requests (metaNoter).
func (u *httpUpstream) sdkTransport(t *mcp.StreamableClientTransport) *mcp.StreamableClientTransport {
	sdk, noting := *t, *u.http // copies: the endpoint's transport is not changed
	noting.Transport = metaNoter{base: u.http.Transport, up: u}
	sdk.HTTPClient = &noting
	return &sdk
}

// metaNoter is the HTTP transport of the SDK client on a streamable HTTP session: it hands the
// SDK's first request after the handshake to noteMeta, as lockedWriter does on stdio, and is a
// pass-through from then on.
type metaNoter struct {
	base http.RoundTripper // nil: http.DefaultTransport
	up   *httpUpstream
}

func (m metaNoter) RoundTrip(req *http.Request) (*http.Response, error) {
	if m.up.meta.Load() == nil && req.Method == http.MethodPost && req.GetBody != nil {
		if body, err := req.GetBody(); err == nil {
			data, _ := io.ReadAll(io.LimitReader(body, metaNoteBytes))
			body.Close()
			m.up.noteMeta(data)
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

func (u *httpUpstream) ready(s *mcp.ClientSession) {
	u.version = s.InitializeResult().ProtocolVersion
	u.sessionID = s.ID
	u.agreed(u.version)
}

// takes: once the session is Ready, and at 2026-07-28 once its _meta members are known.
func (u *httpUpstream) takes() bool {
	if u.version == "" {
		return false
	}
	return revision.Of(u.version) < revision.Stateless || u.metaKnown()
}

// probedByRelist: a 2026-07-28 HTTP connection has no ping and no session to lose.
func (u *httpUpstream) probedByRelist() bool { return true }

// toolHeaders: the SDK client sets Mcp-Param headers from its own tools/list at 2026-07-28.
func (u *httpUpstream) toolHeaders() bool { return revision.Of(u.version) >= revision.Stateless }

func (u *httpUpstream) call(ctx context.Context, method string, members, meta []byte) (json.RawMessage, error) {
	if !strings.HasSuffix(method, "/list") { // a list's items are counted as they come (bound.Bodies)
		ctx = bound.ByReader(ctx)
	}
	return u.post(ctx, u.nextID(), method, u.params(ctx, members, meta))
}

// cancel tells the server a forwarded request is abandoned, as the SDK client does for its own.
func (u *httpUpstream) cancel(id string, why error) {
	ctx, stop := context.WithTimeout(context.Background(), cancelNoticeTimeout)
	defer stop()
	u.send(ctx, jsonrpcwire.Notification("notifications/cancelled", cancelParams(id, why)), "notifications/cancelled")
}

// cancelNoticeTimeout bounds sending notifications/cancelled for an abandoned request.
const cancelNoticeTimeout = 5 * time.Second

// post sends one forwarded request on its own POST and reads its response: JSON, or an event
// stream whose other messages (the server's own requests, notifications) are handled as the
// SDK client would handle them.
func (u *httpUpstream) post(ctx context.Context, id, method string, params json.RawMessage) (json.RawMessage, error) {
	resp, err := u.do(ctx, jsonrpcwire.Request(id, method, params), method, params)
	if err != nil {
		if ctx.Err() != nil { // abandoned before the server answered (it may send nothing until the result)
			u.cancel(id, ctx.Err())
			return nil, context.Cause(ctx)
		}
		return nil, fmt.Errorf("sending %q: %w", method, err)
	}
	defer resp.Body.Close()
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch {
	case resp.StatusCode == http.StatusNotFound && u.sessionID() != "":
		return nil, fmt.Errorf("sending %q: the server no longer knows the session: %w", method, mcp.ErrSessionMissing)
	case resp.StatusCode < 200 || resp.StatusCode >= 300:
		err := u.failed(resp, ct, id, method)
		if refusedStatus(resp.StatusCode) && u.serverRefused != nil {
			u.serverRefused(err)
		}
		return nil, err
	case ct == "application/json":
		r, err := readResponse(io.LimitReader(resp.Body, u.limit()+1), id, u.limit())
		if err != nil {
			return nil, err
		}
		return r.result()
	case ct == "text/event-stream":
		return u.follow(ctx, resp.Body, id)
	}
	return nil, fmt.Errorf("sending %q: the server answered with content type %s, not JSON or an event stream", method, orNone(ct))
}

// do POSTs one message with the session's headers. From 2026-07-28 on a request or a
// notification also carries the standard headers the server checks against the body:
// Mcp-Method (method, "" for a response), and Mcp-Name for the methods that name something
// in their params. A request whose answer its reader bounds goes on the carrier, when there is
// one, with the server's configured headers and the call's trace context; a server that
// redirects it gets it, and every request after, through the HTTP client, which follows
// redirects (to the server's own origin: policy.SameOrigin).
func (u *httpUpstream) do(ctx context.Context, body []byte, method string, params json.RawMessage) (*http.Response, error) {
	req, err := u.request(ctx, body, method, params)
	if err != nil || u.carrier == nil || !bound.IsByReader(ctx) || u.redirected.Load() {
		if err != nil {
			return nil, err
		}
		return u.http.Do(req)
	}
	traced := trace.SpanContextFromContext(ctx).IsValid()
	addHeaders(req, traced, u.headers)
	send := func(req *http.Request) (*http.Response, error) { return u.carrier.Send(req, body) }
	resp, err := sendBearer(u.bearer, req, send, func() (*http.Request, error) {
		again, err := u.request(ctx, body, method, params)
		if err == nil {
			addHeaders(again, traced, u.headers)
		}
		return again, err
	})
	if err != nil || !redirect(resp.StatusCode) {
		return resp, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainBytes))
	resp.Body.Close()
	u.redirected.Store(true)
	if req, err = u.request(ctx, body, method, params); err != nil {
		return nil, err
	}
	return u.http.Do(req)
}

// request is the POST of one message with the session's headers (see do).
func (u *httpUpstream) request(ctx context.Context, body []byte, method string, params json.RawMessage) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	u.sessionHeaders(req.Header)
	if method != "" && revision.Of(u.version) >= revision.Stateless {
		req.Header.Set("Mcp-Method", method)
		if name := nameOf(method, params); name != "" {
			req.Header.Set("Mcp-Name", name)
		}
	}
	return req, nil
}

// failed is the error of a forwarded request the server answered with a status other than
// 2xx. A JSON-RPC error in the body is the server's answer; any other body is not repeated
// (it may be anything, and errors reach status and the agent).
func (u *httpUpstream) failed(resp *http.Response, ct, id, method string) error {
	if ct == "application/json" {
		if r, err := readResponse(io.LimitReader(resp.Body, bound.ErrorBodyBytes), id, u.limit()); err == nil && r.Error != nil {
			return r.Error
		}
	}
	return fmt.Errorf("sending %q: the server answered HTTP %d (%s)", method, resp.StatusCode, orNone(ct))
}

// refusedStatus reports whether a server's answer refuses the session's credentials: the
// connection is then made again, with its variables read and its headersHelper run again.
func refusedStatus(status int) bool {
	return status == http.StatusUnauthorized || status == http.StatusForbidden
}

// redirect reports whether an HTTP status is a redirect the HTTP client follows.
func redirect(status int) bool {
	switch status {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return true
	}
	return false
}

// sessionHeaders are what every request of the session carries: the version agreed and the
// session's id (none on a stateless session).
func (u *httpUpstream) sessionHeaders(h http.Header) {
	h.Set("Mcp-Protocol-Version", u.version)
	if sid := u.sessionID(); sid != "" {
		h.Set("Mcp-Session-Id", sid)
	}
}

// nameOf is what a request's Mcp-Name header says: the name of tools/call and prompts/get, the
// URI of resources/read; "" for other methods, whose params are not read. A tool call's name
// comes first in its params (the gateway writes it so: callMembers), and then only it is read,
// not the arguments after it.
func nameOf(method string, params json.RawMessage) string {
	var key string
	switch method {
	case "tools/call", "prompts/get":
		key = "name"
	case "resources/read":
		key = "uri"
	default:
		return ""
	}
	var v string
	if rest, ok := bytes.CutPrefix(params, []byte(`{"`+key+`":`)); ok && len(rest) > 0 && rest[0] == '"' {
		if _, err := segjson.Parse(rest, &v, segjson.DontMatchCaseInsensitiveStructFields); err == nil {
			return v // the first value alone: what follows it is the rest of the params
		}
	}
	var p map[string]json.RawMessage
	if json.Unmarshal(params, &p) == nil {
		_ = json.Unmarshal(p[key], &v)
	}
	return v
}

// send POSTs a notification (method) or a response (method ""), whose answer is only a
// status.
func (u *httpUpstream) send(ctx context.Context, body []byte, method string) {
	resp, err := u.do(ctx, body, method, nil)
	if err != nil {
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainBytes))
	resp.Body.Close()
}

// upstreamResponse is a response as an upstream reads it: the result stays as received.
type upstreamResponse struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *jsonrpc.Error  `json:"error"`
}

func (r *upstreamResponse) result() (json.RawMessage, error) {
	if r.Error != nil {
		return nil, r.Error
	}
	if len(r.Result) == 0 {
		return nil, errors.New("the server's response has neither result nor error")
	}
	return r.Result, nil
}

// readResponse reads one JSON response of at most limit bytes, which must answer id.
func readResponse(r io.Reader, id string, limit int64) (*upstreamResponse, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, bound.TooLarge(limit)
	}
	var resp upstreamResponse
	if err := jsonrpcwire.DecodeExact(data, &resp); err != nil {
		return nil, fmt.Errorf("the server's response is not JSON-RPC: %v", err)
	}
	if !jsonrpcwire.StringID(resp.ID, id) {
		return nil, fmt.Errorf("the server answered a request it was not sent (id %s)", resp.ID)
	}
	return &resp, nil
}

// readStream reads an event stream until the response to id; every other message goes to
// the SDK client. at follows the events' ids and the server's retry, for resuming the stream.
// A stream that ends before the response is ErrStreamEnded (with the read error, if any).
func (u *httpUpstream) readStream(ctx context.Context, body io.Reader, id string, at *streamCursor) (json.RawMessage, error) {
	buf := lineBuffers.Get().(*[]byte)
	defer lineBuffers.Put(buf) // nothing read keeps a line: an event's fields are copies
	sc := bufio.NewScanner(body)
	sc.Buffer((*buf)[:0], int(min(u.limit(), 1<<31-1)))
	var ev sseEvent
	for {
		more := sc.Scan()
		if line := sc.Bytes(); more && len(line) > 0 {
			ev.take(line, at)
			if int64(len(ev.data)) > u.limit() { // the bound is on the event, whatever its lines
				return nil, bound.TooLarge(u.limit())
			}
			continue
		}
		// An event ends at a blank line (or the end of the stream); its id counts even
		// without data (a server's priming event is only an id).
		if ev.hasID {
			at.lastID, ev.hasID = string(ev.id), false
		}
		if len(ev.data) > 0 {
			if res, done, err := u.event(ctx, ev.data, id); done {
				return res, err
			}
			ev.data = ev.data[:0]
		}
		if !more {
			break
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, bound.TooLarge(u.limit())
		}
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		return nil, fmt.Errorf("%w: %w", ErrStreamEnded, err)
	}
	return nil, ErrStreamEnded
}

// lineBuffers are the first buffers of the streams' line scanners, which take a larger one of
// their own for a longer line: a call's stream is read without a buffer of its own.
var lineBuffers = sync.Pool{New: func() any { b := make([]byte, 4096); return &b }}

// sseEvent is the event of a stream being read: its data lines joined, and its id.
type sseEvent struct {
	data  []byte
	id    []byte
	hasID bool
}

// take reads one line of the event; the server's retry: goes to at. event: and comments need
// nothing here, and an id holding NUL is ignored (as the event stream format says).
func (e *sseEvent) take(line []byte, at *streamCursor) {
	if rest, ok := sseField(line, "data"); ok {
		if len(e.data) > 0 {
			e.data = append(e.data, '\n')
		}
		e.data = append(e.data, rest...)
	} else if rest, ok := sseField(line, "id"); ok && bytes.IndexByte(rest, 0) < 0 {
		e.id, e.hasID = append(e.id[:0], rest...), true
	} else if rest, ok := sseField(line, "retry"); ok {
		at.setRetry(rest)
	}
}

// sseField is the value of an event stream line naming field, without the one space that may
// follow the colon.
func sseField(line []byte, field string) ([]byte, bool) {
	rest, ok := bytes.CutPrefix(line, []byte(field))
	if !ok {
		return nil, false
	}
	if rest, ok = bytes.CutPrefix(rest, []byte(":")); !ok {
		return nil, false
	}
	return bytes.TrimPrefix(rest, []byte(" ")), true
}

// event handles one event of a forwarded request's stream; done when it was the response.
func (u *httpUpstream) event(ctx context.Context, data []byte, id string) (json.RawMessage, bool, error) {
	var r upstreamResponse
	if err := jsonrpcwire.DecodeExact(data, &r); err != nil {
		return nil, true, fmt.Errorf("the server sent an event that is not JSON-RPC: %v", err)
	}
	if r.Method == "" {
		if jsonrpcwire.StringID(r.ID, id) {
			res, err := r.result()
			return res, true, err
		}
		return nil, false, nil // a response to nothing this stream asked: dropped
	}
	if len(r.ID) == 0 {
		u.resp.notification(ctx, r.Method, r.Params)
		return nil, false, nil
	}
	// The server asks something of the session while the call runs; the server waits for the
	// answer before going on with the call.
	result, rpcErr := u.resp.serverRequest(ctx, r.Method, r.Params)
	u.send(ctx, jsonrpcwire.ResponseTo(r.ID, result, rpcErr), "")
	return nil, false, nil
}

// drainBytes bounds what is read after a response to let its connection be reused.
const drainBytes = 64 << 10

// limit is the bound on one message from the server.
func (u *httpUpstream) limit() int64 { return u.bound }

func orNone(ct string) string {
	if ct == "" {
		return "no content type"
	}
	return ct
}
