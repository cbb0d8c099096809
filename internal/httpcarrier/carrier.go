// Package httpcarrier carries HTTP/1.1 requests to a plain-HTTP server on kept-alive TCP
// connections of its own, each request written and its answer read on the caller's goroutine:
// the client side of a connection to a remote MCP server, where net/http's Transport would hand
// each request to a writer goroutine and each answer back from a reader goroutine.
//
// It is an engine apart from the connection it serves (internal/conn, which decides what goes
// through it) because it is measured, not reasoned about: every change to it is held to the
// call path's benchmarks (make bench: BenchmarkGatewayCallOverhead in internal/gateway,
// BenchmarkCallPathProcesses in cmd/projectmcp) and to the goroutines and memory a connection
// costs at scale (make bench-scale). It knows nothing of MCP or of projectmcp.
package httpcarrier

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
	"time"
	"unicode/utf8"

	"golang.org/x/net/http/httpguts"
)

// A Carrier carries a connection's requests to a plain-HTTP server reached without a proxy:
// each is written to a kept-alive TCP connection and its answer read from it on the caller's
// own goroutine. net/http's Transport hands each request to the connection's writer goroutine
// and each answer back from its reader goroutine: two handoffs, about a fifth of a loopback
// round trip on a two-core machine, and two goroutines for as long as a TCP connection is
// open, kept idle or carrying a connection's event stream. TLS and proxied servers, and a
// request the Transport would send in chunks, go through the Transport.
//
// A Carrier writes what the Transport would have: the same request line and headers, and
// refuses the header values the Transport refuses. It asks for no compression (the Transport
// asks for gzip and undoes it): the answer is read as the server sends it.
type Carrier struct {
	pool *Pool
	host string // host:port, as dialed
}

// New is the carrier for a server's URL u, its connections kept in pool, or nil when its
// requests must go through t: https, or a proxy of t's for u.
func New(u *url.URL, t *http.Transport, pool *Pool) *Carrier {
	if u.Scheme != "http" || pool == nil || !ascii(u.Host) { // the Transport writes a name in Unicode as punycode
		return nil
	}
	if t.Proxy != nil {
		if p, err := t.Proxy(&http.Request{Method: http.MethodPost, URL: u, Header: http.Header{}}); p != nil || err != nil {
			return nil
		}
	}
	return &Carrier{pool: pool, host: dialHost(u)}
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

// Send sends req, whose body is body, as it is, and reads the answer's status and headers; the
// answer's body is read from the TCP connection, which goes back to the pool once the body
// has been read to its end and closed (a body closed before its end closes the connection).
// The request's context's end fails a read or write in progress.
func (c *Carrier) Send(req *http.Request, body []byte) (*http.Response, error) {
	ctx := req.Context()
	head, err := requestHead(req, len(body))
	if err != nil {
		return nil, err
	}
	for fresh := false; ; fresh = true {
		tc, err := c.pool.get(ctx, c.host, fresh)
		if err != nil {
			return nil, err
		}
		resp, stop, err, written := tc.exchange(req, head, body)
		if err == nil {
			resp.Body = &answer{ctx: ctx, body: resp.Body, c: tc, pool: c.pool, keep: !resp.Close, stop: stop}
			return resp, nil
		}
		tc.close()
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		if fresh || !tc.reused || (written && !idempotent(req.Method)) {
			return nil, err
		}
		// A kept connection the server closed as the request went out: nothing reached it, or
		// the request may be sent again (as the Transport does).
	}
}

// idempotent reports the methods a failed request may be sent again by (an event stream's
// GET, a session's closing DELETE).
func idempotent(method string) bool {
	return method == http.MethodGet || method == http.MethodHead || method == http.MethodDelete
}

// Transport is an HTTP transport that sends through a carrier what it can: a request to the
// carrier's host that net/http would send with a Content-Length goes on the Carrier, any
// other through Base.
type Transport struct {
	Carrier *Carrier
	Base    http.RoundTripper
}

func (t Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !t.takes(req) {
		return t.Base.RoundTrip(req)
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
	return t.Carrier.Send(req, body)
}

// takes reports whether req goes on the carrier: to its host over plain HTTP, with a body of
// known length or none, and nothing that changes how net/http writes it (a trailer, a transfer
// coding, Expect, a close).
func (t Transport) takes(req *http.Request) bool {
	known := req.ContentLength > 0 || req.Body == nil || req.Body == http.NoBody
	return known && req.URL.Scheme == "http" && dialHost(req.URL) == t.Carrier.host && !req.Close &&
		len(req.TransferEncoding) == 0 && req.Trailer == nil && req.Header.Get("Expect") == ""
}

// requestHead is the request line and headers of req, as net/http's Transport writes them for
// a body of n bytes, or the error the Transport gives for a header it refuses.
func requestHead(req *http.Request, n int) ([]byte, error) {
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

// tcpConn is one TCP connection of a carrier's.
type tcpConn struct {
	net.Conn
	br     *bufio.Reader
	host   string    // as dialed: the pool's key
	reused bool      // taken from the pool, not dialed for this request
	idle   time.Time // since when it is in the pool
	// rest is the body of the last answer when the connection was given back before that
	// body's end (answer.release), at owed: the next request to take it reads the end first
	// (settle).
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

// restBytes bounds what is read of an owed end: a connection owing more is closed.
const restBytes = 64 << 10

// settle makes a kept connection ready for a request, reading the end of its last answer
// first when it owes it and that end has come. A connection not ready is to be closed, unless
// later: its end is still to come, and it may be taken again then.
func (c *tcpConn) settle() (ready, later bool) {
	quiet := open(c.Conn) // not quiet: the end has come, or the server closed it
	if c.rest == nil {
		return quiet, false
	}
	if quiet && c.br.Buffered() == 0 {
		return false, time.Since(c.owed) < maxRestWait
	}
	_ = c.SetReadDeadline(time.Now().Add(restReadTimeout))
	n, err := io.Copy(io.Discard, io.LimitReader(c.rest, restBytes))
	_ = c.SetReadDeadline(time.Time{})
	c.rest = nil
	if err != nil || n == restBytes || c.br.Buffered() != 0 {
		return false, false
	}
	return open(c.Conn), false
}

// exchange writes req and reads its answer's status and headers. Until stop, req's context's end
// fails the connection's reads and writes. written says whether any of the request may have
// reached the server.
func (c *tcpConn) exchange(req *http.Request, head, body []byte) (resp *http.Response, stop func() bool, err error, written bool) {
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

func (c *tcpConn) close() { _ = c.Close() }

// answer is an answer's body on a carrier: the connection goes back to the pool when the body
// was read to its end, and is closed otherwise. Once ctx ends, a read fails with its cause.
type answer struct {
	ctx  context.Context
	body io.ReadCloser // http.ReadResponse's: its Close would read to the end
	c    *tcpConn
	pool *Pool
	stop func() bool // ends ctx's hold on the connection; false once ctx ended
	keep bool        // the server keeps the connection open
	eof  bool
	done bool
}

func (b *answer) Read(p []byte) (int, error) {
	n, err := b.body.Read(p)
	switch {
	case errors.Is(err, io.EOF):
		b.eof = true
	case err != nil && b.ctx.Err() != nil:
		err = context.Cause(b.ctx)
	}
	return n, err
}

// Release gives the TCP connection of an answer's body carried by a carrier back before the
// body's end, which the server is to send without waiting for anything more (an event
// stream's end after the response read from it): the next request on the connection reads it
// first, once it has come (settle). The caller then has its answer without waiting for the
// server to end the stream, as it would through a proxy passing each event on. It reports
// false, and does nothing, for a body a carrier did not read.
func Release(body io.ReadCloser) bool {
	b, ok := body.(*answer)
	if ok {
		b.release()
	}
	return ok
}

func (b *answer) release() {
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

func (b *answer) Close() error {
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
