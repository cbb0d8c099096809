package conn

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/trace"
	"golang.org/x/net/http/httpguts"

	"github.com/dsh-dev/projectmcp/internal/tracing"
)

// A direct carries a connection's requests to a plain-HTTP server reached without a proxy:
// each is written to a kept-alive TCP connection and its answer read from it on the caller's
// own goroutine. net/http's Transport hands each request to the connection's writer goroutine
// and each answer back from its reader goroutine: two handoffs, about a fifth of a loopback
// round trip on a two-core machine, and two goroutines for as long as a TCP connection is
// open, kept idle or carrying a connection's event stream. Forwarded requests go direct from
// the upstream (httpUpstream.do); the SDK client's own requests, its event stream included,
// and lists go direct below the layers that add headers and bound answers (directTransport).
// TLS and proxied servers, and a request the Transport would send in chunks, go through the
// Transport.
//
// A direct writes what the Transport would have: the same request line and headers (the
// server's configured headers included, and the call's trace context), and refuses the header
// values the Transport refuses. It asks for no compression (the Transport asks for gzip and
// undoes it): the answer is read as the server sends it.
type direct struct {
	conns   *idleConns
	host    string // host:port, as dialed
	headers http.Header
}

// newDirect is the direct for a server's URL u, or nil when its requests must go through the
// Transport: https, or a proxy in the environment for u.
func newDirect(u *url.URL, t *http.Transport, conns *idleConns, headers http.Header) *direct {
	if u.Scheme != "http" || conns == nil || !ascii(u.Host) { // the Transport writes a name in Unicode as punycode
		return nil
	}
	if t.Proxy != nil {
		if p, err := t.Proxy(&http.Request{Method: http.MethodPost, URL: u, Header: http.Header{}}); p != nil || err != nil {
			return nil
		}
	}
	return &direct{conns: conns, host: dialHost(u), headers: headers}
}

// dialHost is the host:port a plain-HTTP URL is dialed at.
func dialHost(u *url.URL) string {
	if u.Port() == "" {
		return net.JoinHostPort(u.Hostname(), "80")
	}
	return u.Host
}

func ascii(s string) bool {
	for i := range len(s) {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// roundTrip sends a forwarded request, req, whose body is body, with the server's configured
// headers and the call's trace context (see send).
func (d *direct) roundTrip(req *http.Request, body []byte) (*http.Response, error) {
	if trace.SpanContextFromContext(req.Context()).IsValid() { // the call's trace goes on to the server (W3C traceparent)
		tracing.ToHeaders(req.Context(), req.Header)
	}
	for k, v := range d.headers {
		req.Header[k] = v
	}
	return d.send(req, body)
}

// send sends req, whose body is body, as it is, and reads the answer's status and headers; the
// answer's body is read from the TCP connection, which goes back to the pool once the body
// has been read to its end and closed (a body closed before its end closes the connection).
// The request's context's end fails a read or write in progress.
func (d *direct) send(req *http.Request, body []byte) (*http.Response, error) {
	ctx := req.Context()
	head, err := requestHead(req, d.host, len(body))
	if err != nil {
		return nil, err
	}
	for fresh := false; ; fresh = true {
		c, err := d.conns.get(ctx, d.host, fresh)
		if err != nil {
			return nil, err
		}
		resp, stop, err, written := c.exchange(req, head, body)
		if err == nil {
			resp.Body = &directBody{ctx: ctx, body: resp.Body, c: c, pool: d.conns, keep: !resp.Close, stop: stop}
			return resp, nil
		}
		c.close()
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		if fresh || !c.reused || (written && !idempotent(req.Method)) {
			return nil, err
		}
		// A kept connection the server closed as the request went out: nothing reached it, or
		// the request may be sent again (as the Transport does).
	}
}

// idempotent reports the methods a failed request may be sent again by (the SDK's event
// stream's GET, its closing DELETE).
func idempotent(method string) bool {
	return method == http.MethodGet || method == http.MethodHead || method == http.MethodDelete
}

// directTransport is the HTTP transport below a connection's own layers (headers, bounds,
// same origin): a request to the direct's host that net/http would send with a
// Content-Length goes direct, any other through base.
type directTransport struct {
	d    *direct
	base http.RoundTripper
}

func (t directTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !t.takes(req) {
		return t.base.RoundTrip(req)
	}
	var body []byte
	if req.Body != nil && req.Body != http.NoBody {
		var err error
		body, err = io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, err
		}
		if int64(len(body)) != req.ContentLength {
			return nil, fmt.Errorf("http: ContentLength=%d with Body length %d", req.ContentLength, len(body))
		}
	}
	return t.d.send(req, body)
}

// takes reports whether req goes direct: to the direct's host over plain HTTP, with a body of
// known length or none, and nothing that changes how net/http writes it (a trailer, a transfer
// coding, Expect, a close).
func (t directTransport) takes(req *http.Request) bool {
	known := req.ContentLength > 0 || req.Body == nil || req.Body == http.NoBody
	return known && req.URL.Scheme == "http" && dialHost(req.URL) == t.d.host && !req.Close &&
		len(req.TransferEncoding) == 0 && req.Trailer == nil && req.Header.Get("Expect") == ""
}

// requestHead is the request line and headers of req, as net/http's Transport writes them for
// a body of n bytes, or the error the Transport gives for a header it refuses.
func requestHead(req *http.Request, host string, n int) ([]byte, error) {
	head := make([]byte, 0, 512)
	head = append(head, req.Method...)
	head = append(head, ' ')
	head = append(head, req.URL.RequestURI()...)
	head = append(head, " HTTP/1.1\r\nHost: "...)
	head = append(head, cmp.Or(req.Host, req.URL.Host)...)
	head = append(head, "\r\n"...)
	agent := "Go-http-client/1.1"
	if _, set := req.Header["User-Agent"]; set {
		agent = req.Header.Get("User-Agent")
	}
	if agent != "" {
		head = append(append(append(head, "User-Agent: "...), agent...), "\r\n"...)
	}
	if n > 0 || req.Method == http.MethodPost || req.Method == http.MethodPut || req.Method == http.MethodPatch {
		head = fmt.Appendf(head, "Content-Length: %d\r\n", n)
	}
	for k, vs := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return nil, fmt.Errorf("net/http: invalid header field name %q", k)
		}
		switch k {
		case "Host", "User-Agent", "Content-Length", "Transfer-Encoding", "Trailer":
			continue // written above, or never, as the Transport does
		}
		for _, v := range vs {
			if !httpguts.ValidHeaderFieldValue(v) {
				return nil, fmt.Errorf("net/http: invalid header field value for %q", k)
			}
			head = append(append(append(append(head, k...), ": "...), v...), "\r\n"...)
		}
	}
	return append(head, "\r\n"...), nil
}

// directConn is one TCP connection of a direct's.
type directConn struct {
	net.Conn
	br     *bufio.Reader
	host   string    // as dialed: the pool's key
	reused bool      // taken from the pool, not dialed for this request
	idle   time.Time // since when it is in the pool
	// rest is the body of the last answer when the connection was given back before that
	// body's end (directBody.release), at owed: the next request to take it reads the end
	// first (settle).
	rest io.ReadCloser
	owed time.Time
}

const (
	// maxRestWait is how long a connection may owe the end of its last answer: a server
	// still holding the stream open after that is not ending it, and the connection closes.
	maxRestWait = 10 * time.Second
	// restReadTimeout bounds reading that end once it has begun to arrive.
	restReadTimeout = 100 * time.Millisecond
)

// settle makes a kept connection ready for a request, reading the end of its last answer
// first when it owes it and that end has come. A connection not ready is to be closed, unless
// later: its end is still to come, and it may be taken again then.
func (c *directConn) settle() (ready, later bool) {
	quiet := open(c.Conn) // not quiet: the end has come, or the server closed it
	if c.rest == nil {
		return quiet, false
	}
	if quiet && c.br.Buffered() == 0 {
		return false, time.Since(c.owed) < maxRestWait
	}
	_ = c.SetReadDeadline(time.Now().Add(restReadTimeout))
	n, err := io.Copy(io.Discard, io.LimitReader(c.rest, drainBytes))
	_ = c.SetReadDeadline(time.Time{})
	c.rest = nil
	if err != nil || n == drainBytes || c.br.Buffered() != 0 {
		return false, false
	}
	return open(c.Conn), false
}

// exchange writes req and reads its answer's status and headers. Until stop, req's context's end
// fails the connection's reads and writes. written says whether any of the request may have
// reached the server.
func (c *directConn) exchange(req *http.Request, head, body []byte) (resp *http.Response, stop func() bool, err error, written bool) {
	stop = context.AfterFunc(req.Context(), func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	bufs := net.Buffers{head, body}
	if n, err := bufs.WriteTo(c.Conn); err != nil {
		stop()
		return nil, nil, err, n > 0
	}
	for {
		if resp, err = http.ReadResponse(c.br, req); err != nil {
			stop()
			return nil, nil, err, true
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			return resp, stop, nil, true
		}
		// An informational answer (103 Early Hints, say) comes before the answer.
	}
}

func (c *directConn) close() { _ = c.Close() }

// directBody is an answer's body on a direct: the connection goes back to the pool when the body
// was read to its end, and is closed otherwise. Once ctx ends, a read fails with its cause.
type directBody struct {
	ctx  context.Context
	body io.ReadCloser // http.ReadResponse's: its Close would read to the end
	c    *directConn
	pool *idleConns
	stop func() bool // ends ctx's hold on the connection; false once ctx ended
	keep bool        // the server keeps the connection open
	eof  bool
	done bool
}

func (b *directBody) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	switch {
	case errors.Is(err, io.EOF):
		b.eof = true
	case err != nil && b.ctx.Err() != nil:
		err = context.Cause(b.ctx)
	}
	return n, err
}

// release gives the connection back before the body's end, which the server is to send
// without waiting for anything more (an event stream's end after the response read from it):
// the next request on the connection reads it first, once it has come (settle). The caller
// then has its answer without waiting for the server to end the stream, as it would through
// a proxy passing each event on.
func (b *directBody) release() {
	if b.done || b.eof { // an end that came with the last event was read with it
		_ = b.Close()
		return
	}
	b.done = true
	if b.stop() && b.keep {
		b.c.rest, b.c.owed = b.body, time.Now()
		b.pool.put(b.c)
		return
	}
	b.c.close()
}

func (b *directBody) Close() error {
	if b.done {
		return nil
	}
	b.done = true
	if b.stop() && b.eof && b.keep && b.c.br.Buffered() == 0 {
		_ = b.body.Close() // at its end: reads nothing
		b.pool.put(b.c)
		return nil
	}
	b.c.close()
	return nil
}

// idleConns are the TCP connections directs keep open between requests, by host: at most
// maxIdlePerHost each, for at most idleTimeout each. Their owner is the shared transport whose
// connections they are (sharedTransport), which closes them with its own.
type idleConns struct {
	dial func(ctx context.Context, network, addr string) (net.Conn, error)

	mu     sync.Mutex
	hosts  map[string][]*directConn // oldest first
	timer  *time.Timer              // prunes connections idle too long; nil while none are kept
	closed bool
}

// idleTimeout is how long a kept connection may stay idle, as net/http's DefaultTransport.
const idleTimeout = 90 * time.Second

func newIdleConns(dial func(ctx context.Context, network, addr string) (net.Conn, error)) *idleConns {
	if dial == nil {
		d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
		dial = d.DialContext
	}
	return &idleConns{dial: dial, hosts: map[string][]*directConn{}}
}

// get is a kept connection to host still open, or a new one (always a new one when fresh).
// A kept connection whose last answer's end is still to come is passed over and kept.
func (p *idleConns) get(ctx context.Context, host string, fresh bool) (*directConn, error) {
	var later []*directConn
	defer func() {
		for _, c := range later {
			p.put(c)
		}
	}()
	for !fresh {
		c := p.take(host)
		if c == nil {
			break
		}
		switch ready, wait := c.settle(); {
		case ready:
			c.reused = true
			return c, nil
		case wait:
			later = append(later, c)
		default:
			c.close()
		}
	}
	nc, err := p.dial(ctx, "tcp", host)
	if err != nil {
		return nil, err
	}
	return &directConn{Conn: nc, br: bufio.NewReaderSize(nc, connBufferSize), host: host}, nil
}

// take is the connection to host put last, if any.
func (p *idleConns) take(host string) *directConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	kept := p.hosts[host]
	if len(kept) == 0 {
		return nil
	}
	c := kept[len(kept)-1]
	kept[len(kept)-1] = nil
	if len(kept) == 1 {
		delete(p.hosts, host)
	} else {
		p.hosts[host] = kept[:len(kept)-1]
	}
	return c
}

// put keeps c for the next request to its host, or closes it when the host has
// maxIdlePerHost kept already or the pool is closed.
func (p *idleConns) put(c *directConn) {
	c.reused, c.idle = false, time.Now()
	host := c.host
	p.mu.Lock()
	if p.closed || len(p.hosts[host]) >= maxIdlePerHost {
		p.mu.Unlock()
		c.close()
		return
	}
	p.hosts[host] = append(p.hosts[host], c)
	if p.timer == nil {
		p.timer = time.AfterFunc(idleTimeout, p.prune)
	}
	p.mu.Unlock()
}

// prune closes the connections idle for idleTimeout or longer, and arms itself again while
// any are kept.
func (p *idleConns) prune() {
	var stale []*directConn
	now := time.Now()
	p.mu.Lock()
	next := time.Duration(0)
	for host, kept := range p.hosts {
		i := 0
		for ; i < len(kept) && now.Sub(kept[i].idle) >= idleTimeout; i++ {
			stale = append(stale, kept[i])
		}
		if kept = kept[i:]; len(kept) == 0 {
			delete(p.hosts, host)
			continue
		}
		p.hosts[host] = kept
		if left := idleTimeout - now.Sub(kept[0].idle); next == 0 || left < next {
			next = left
		}
	}
	p.timer = nil
	if next > 0 && !p.closed {
		p.timer = time.AfterFunc(next, p.prune)
	}
	p.mu.Unlock()
	for _, c := range stale {
		c.close()
	}
}

// close closes every kept connection, and any put after.
func (p *idleConns) close() {
	p.mu.Lock()
	p.closed = true
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
	hosts := p.hosts
	p.hosts = map[string][]*directConn{}
	p.mu.Unlock()
	for _, kept := range hosts {
		for _, c := range kept {
			c.close()
		}
	}
}
