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

// A direct carries a connection's forwarded requests to a plain-HTTP server reached without a
// proxy: each is written to a kept-alive TCP connection and its answer read from it on the
// caller's own goroutine. net/http's Transport hands each request to the connection's writer
// goroutine and each answer back from its reader goroutine: two handoffs, about a fifth of a
// loopback round trip on a two-core machine. Everything else goes through
// the Transport as before: the SDK client's own requests and event stream, resumed streams,
// lists (whose items boundedBodies counts), notifications, TLS and proxied servers.
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
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "80")
	}
	return &direct{conns: conns, host: host, headers: headers}
}

func ascii(s string) bool {
	for i := range len(s) {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// roundTrip sends req, whose body is body, and reads the answer's status and headers; the
// answer's body is read from the TCP connection, which goes back to the pool once the body
// has been read to its end and closed (a body closed before its end closes the connection).
// ctx's end fails a read or write in progress.
func (d *direct) roundTrip(req *http.Request, body []byte) (*http.Response, error) {
	ctx := req.Context()
	if trace.SpanContextFromContext(ctx).IsValid() { // the call's trace goes on to the server (W3C traceparent)
		tracing.ToHeaders(ctx, req.Header)
	}
	for k, v := range d.headers {
		req.Header[k] = v
	}
	head, err := requestHead(req, d.host, len(body))
	if err != nil {
		return nil, err
	}
	for fresh := false; ; fresh = true {
		c, err := d.conns.get(ctx, d.host, fresh)
		if err != nil {
			return nil, err
		}
		resp, stop, err, written := c.exchange(ctx, head, body)
		if err == nil {
			resp.Body = &directBody{ctx: ctx, body: resp.Body, c: c, pool: d.conns, keep: !resp.Close, stop: stop}
			return resp, nil
		}
		c.close()
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		if written || fresh || !c.reused {
			return nil, err
		}
		// A kept connection the server closed as the request went out: nothing reached it.
	}
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
	head = append(head, "\r\nUser-Agent: Go-http-client/1.1\r\nContent-Length: "...)
	head = fmt.Appendf(head, "%d", n)
	head = append(head, "\r\n"...)
	for k, vs := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return nil, fmt.Errorf("net/http: invalid header field name %q", k)
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
}

// exchange writes a request and reads its answer's status and headers. Until stop, ctx's end
// fails the connection's reads and writes. written says whether any of the request may have
// reached the server.
func (c *directConn) exchange(ctx context.Context, head, body []byte) (resp *http.Response, stop func() bool, err error, written bool) {
	stop = context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	bufs := net.Buffers{head, body}
	if n, err := bufs.WriteTo(c.Conn); err != nil {
		stop()
		return nil, nil, err, n > 0
	}
	for {
		if resp, err = http.ReadResponse(c.br, nil); err != nil {
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
func (p *idleConns) get(ctx context.Context, host string, fresh bool) (*directConn, error) {
	for !fresh {
		c := p.take(host)
		if c == nil {
			break
		}
		if open(c.Conn) {
			c.reused = true
			return c, nil
		}
		c.close()
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
