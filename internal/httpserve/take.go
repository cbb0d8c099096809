package httpserve

import (
	"bytes"
	"errors"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// A long-lived stream on HTTP/1 (the gateway's 2026-07-28 listens and 2025-11-25 GET streams) is taken from net/http once its header is out: net/http's serving goroutine,
// its background reader and the connection's buffers go, and the stream goes on in the same
// chunked framing. Nothing waits on the connection while the stream is idle: the gateway's
// readiness (readiness_linux.go) starts the connection's reader once the client sends
// something or goes, and the reader tells the stream's owner when the client has gone. Where
// there is no readiness (a server not the gateway's own, another OS) or it cannot watch the
// connection (not an OS socket), the reader runs from the start.
//
// A stream that ends whole (its last chunk written) leaves the connection as net/http would:
// open for the client's next request. It goes back to the gateway's HTTP server (home), with
// whatever the client sent meanwhile, so a client that reuses it (as Go's transport and a
// replica's proxy do at once) is served, not cut off. TLS and HTTP/2 streams are not taken.

// Taken is a stream's connection once taken from net/http.
type Taken struct {
	conn    net.Conn
	home    func(net.Conn) bool // gives the connection back to the gateway's HTTP server
	gone    func()              // the client went: the stream's owner ends it
	watcher *Readiness          // starts the reader when there is something to read; nil: at once

	mu         sync.Mutex
	broken     bool   // a write failed, or the client sent too much: the connection closes
	clientGone bool   // the reader saw the connection end
	stopping   bool   // the stream is ending: the reader stops
	pending    []byte // what the client sent while the stream ran (its next request)
	// unwatch stops the watcher from starting the reader: true when it had not (nil once
	// called, or where the reader runs from the start).
	unwatch    func() bool
	readerDone chan struct{} // closed by the reader, once it has started and stopped
}

// maxPending bounds what a client may send on a connection while its stream runs.
const maxPending = 64 << 10

// take takes r's connection from net/http once what w holds is flushed; nil when it cannot
// be taken (TLS, HTTP/2, a writer that cannot hijack), and w carries the stream as before.
// Its reader is watched for (watcher, when not nil) or started with watch, once the stream's
// owner holds it (gone may call the owner).
func Take(w http.ResponseWriter, r *http.Request, home func(net.Conn) bool, watcher *Readiness, gone func()) *Taken {
	if r.TLS != nil || r.ProtoMajor != 1 {
		return nil
	}
	c, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return nil
	}
	t := &Taken{conn: c, home: home, gone: gone, watcher: watcher, readerDone: make(chan struct{})}
	// What net/http read past the request (its background reader's byte, or more) is the
	// client's next request's beginning.
	if n := brw.Reader.Buffered(); n > 0 {
		b, _ := brw.Peek(n)
		t.pending = append([]byte(nil), b...)
	}
	return t
}

// Watch starts the connection's reader once the connection has something to read (the client
// sent something, or went), or at once where the watcher cannot watch it.
func (t *Taken) Watch() {
	t.mu.Lock()
	defer t.mu.Unlock()
	// The watcher's goroutine does not wait for t.mu (a write holds it up to
	// StreamWriteTimeout): the reader starts, and looks at the stream under t.mu itself.
	if t.unwatch = t.watcher.add(t.conn, func() { go t.read() }); t.unwatch == nil {
		go t.read()
	}
}

// stopWatching stops the watcher (before the connection closes, or goes home); true when the
// reader has not started and will not. Called with t.mu held.
func (t *Taken) stopWatching() bool {
	unwatch := t.unwatch
	t.unwatch = nil
	return unwatch != nil && unwatch()
}

// read reads the connection until the client goes or the stream ends (stopping), keeping
// what the client sends meanwhile for the connection's next request.
func (t *Taken) read() {
	t.mu.Lock()
	stopping := t.stopping
	t.mu.Unlock()
	if stopping { // started by the watcher as the stream ended: what is there is the server's
		close(t.readerDone)
		return
	}
	buf := make([]byte, 64) // a client sends nothing on a stream but, rarely, its next request
	for {
		n, err := t.conn.Read(buf)
		t.mu.Lock()
		if n > 0 && !t.broken {
			if len(t.pending)+n > maxPending {
				t.broken, t.pending = true, nil
			} else {
				t.pending = append(t.pending, buf[:n]...)
			}
		}
		stopping := t.stopping
		if err != nil && !stopping {
			t.clientGone = true
		}
		t.mu.Unlock()
		if err != nil {
			close(t.readerDone)
			if !stopping {
				t.gone()
			}
			return
		}
	}
}

var ErrBroken = errors.New("the stream is broken")

// write writes data as one chunk, within StreamWriteTimeout; past it, or on any failure, the
// stream is broken and its connection closes (the reader then sees the end, and tells the
// owner).
func (t *Taken) Write(data []byte) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.broken || t.stopping {
		return ErrBroken
	}
	if len(data) == 0 {
		return nil
	}
	_ = t.conn.SetWriteDeadline(time.Now().Add(StreamWriteTimeout))
	if _, err := t.conn.Write(appendChunk(nil, data)); err != nil {
		t.broken = true
		idle := t.stopWatching()
		_ = t.conn.Close()
		if idle { // the reader tells the owner, as when it was reading
			go t.read()
		}
		return err
	}
	return nil
}

// finish ends the stream: whole (its last chunk written, the connection home) when it is
// and the client is still there, else the connection closes. It returns once the reader has
// stopped or the connection is closed.
func (t *Taken) Finish(whole bool) {
	t.mu.Lock()
	whole = whole && !t.broken && !t.clientGone && !t.stopping
	if whole {
		_ = t.conn.SetWriteDeadline(time.Now().Add(StreamWriteTimeout))
		_, err := t.conn.Write([]byte("0\r\n\r\n"))
		whole = err == nil
	}
	t.stopping = true
	idle := t.stopWatching() // the reader never started: nothing was read from the connection
	t.mu.Unlock()
	if !whole {
		_ = t.conn.Close()
		return
	}
	if !idle {
		_ = t.conn.SetReadDeadline(time.Now()) // the reader stops, keeping what it read
		<-t.readerDone
	}
	t.mu.Lock()
	pending, broken := t.pending, t.broken
	t.mu.Unlock()
	_ = t.conn.SetDeadline(time.Time{})
	c := t.conn
	if len(pending) > 0 {
		c = &prefixedConn{Conn: t.conn, first: bytes.NewReader(pending)}
	}
	if broken || t.home == nil || !t.home(c) {
		_ = t.conn.Close()
	}
}

// prefixedConn is a connection whose first bytes were read already.
type prefixedConn struct {
	net.Conn
	first *bytes.Reader
}

func (c *prefixedConn) Read(p []byte) (int, error) {
	if c.first.Len() > 0 {
		return c.first.Read(p)
	}
	return c.Conn.Read(p)
}

// appendChunk appends one chunk of HTTP/1.1's chunked transfer coding, as net/http writes one.
func appendChunk(out, data []byte) []byte {
	out = strconv.AppendInt(out, int64(len(data)), 16)
	out = append(append(out, "\r\n"...), data...)
	return append(out, "\r\n"...)
}

// HomeListener is the gateway's listener: the connections it accepts, and the connections
// taken streams give back (give) for their next request.
//
// net/http's Shutdown closes an idle connection at once, but one that has not begun its first
// request only once it is 5 s old: to it, a given-back connection is new. So the listener
// keeps the given-back connections until the server has seen them begin a request (begun),
// and the gateway closes those still waiting when it stops (closeWaiting), as Shutdown
// closes idle ones.
type HomeListener struct {
	net.Listener
	conns chan net.Conn
	errs  chan error
	done  chan struct{}
	once  sync.Once

	mu      sync.Mutex
	waiting map[net.Conn]struct{} // given back, no request begun on them since
	given   atomic.Int64          // len(waiting): begun, on every request, looks at it alone
}

// NewHomeListener accepts on ln with a goroutine of its own, which ends when ln closes.
func NewHomeListener(ln net.Listener) *HomeListener {
	l := &HomeListener{Listener: ln, conns: make(chan net.Conn), errs: make(chan error), done: make(chan struct{}),
		waiting: map[net.Conn]struct{}{}}
	go l.accept()
	return l
}

func (l *HomeListener) accept() {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			select {
			case l.errs <- err: // http.Server decides: it waits and accepts again on a temporary one
			case <-l.done:
				return
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		select {
		case l.conns <- c:
		case <-l.done:
			_ = c.Close()
			return
		}
	}
}

func (l *HomeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case err := <-l.errs:
		return nil, err
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *HomeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// give hands a connection to the server for its next request; false once the listener is
// closed (the caller closes it).
func (l *HomeListener) Give(c net.Conn) bool {
	l.mu.Lock()
	l.waiting[c] = struct{}{}
	l.given.Store(int64(len(l.waiting)))
	l.mu.Unlock()
	select {
	case l.conns <- c:
		return true
	case <-l.done:
		l.Begun(c, http.StateClosed)
		return false
	}
}

// begun is the server's ConnState hook: a connection given back is no longer waiting once a
// request has begun on it, or it has closed.
func (l *HomeListener) Begun(c net.Conn, state http.ConnState) {
	if state == http.StateNew || l.given.Load() == 0 {
		return
	}
	l.mu.Lock()
	delete(l.waiting, c)
	l.given.Store(int64(len(l.waiting)))
	l.mu.Unlock()
}

// closeWaiting closes the given-back connections no request has begun on: the server is
// stopping, and they are as idle as the idle ones Shutdown closes.
func (l *HomeListener) CloseWaiting() {
	l.mu.Lock()
	waiting := l.waiting
	l.waiting = map[net.Conn]struct{}{}
	l.given.Store(0)
	l.mu.Unlock()
	for c := range waiting {
		_ = c.Close()
	}
}

// Watched says whether the watcher, not a reader of its own, waits on the connection (what an
// idle stream costs; tests look).
func (t *Taken) Watched() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.unwatch != nil
}

// Pending is how many bytes the client sent while the stream ran (its next request).
func (t *Taken) Pending() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.pending)
}
