package gateway

import (
	"context"
	"net"
	"net/http"
	"sync"

	"github.com/dsh-dev/projectmcp/internal/httpserve"
	"github.com/dsh-dev/projectmcp/internal/recovery"
)

// A 2025-11-25 session's GET stream is the SDK's: its handler registers the response as the
// session's standalone stream, and the SDK's senders write to it from then on; the handler
// itself only waits, until the client goes or the session ends. Run on net/http's goroutine,
// that wait held the connection's serving goroutine (deep in the handler chain), net/http's
// background reader and the connection's 4 + 4 + 2 KiB of buffers for the stream's whole life.
//
// On HTTP/1 the SDK's handler runs on a goroutine of the stream's own instead, and once it has
// answered 200 and flushed the stream's header, the connection is taken from net/http
// (httpserve.Take): net/http's goroutine and buffers go, and the taken connection's reader, started
// by the gateway's readiness when the client sends something or goes, tells the SDK's handler
// when the client goes (by its request's context, as net/http did). An idle 2025-11-25 session
// then holds the SDK's waiting handler and the SDK session's own reader only. What the SDK
// answers without a stream (an error) is written through net/http as before; HTTP/2 and TLS
// streams stay on net/http's goroutine.

// serveGET serves a stateful session's GET through the SDK's handler.
func (p *project) serveGET(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor != 1 || r.TLS != nil {
		p.stateful.ServeHTTP(w, r)
		return
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	s := &takenStream{ResponseWriter: w, r: r, home: p.g.giveBack, watcher: p.g.readiness.Load(), cancel: cancel, taken: make(chan struct{})}
	s.unwatch = context.AfterFunc(r.Context(), cancel) // until taken, net/http says when the client goes
	answered := make(chan struct{})
	go func() {
		defer close(answered)
		defer s.end()
		recovery.Run(p.g.opts.Log, "GET", func() { p.stateful.ServeHTTP(s, r.WithContext(ctx)) })
	}()
	select {
	case <-answered:
	case <-s.taken: // the stream goes on without net/http
	}
}

// takenStream is the SDK's response writer for a GET stream, net/http's until the stream's
// header is out, then the taken connection's.
type takenStream struct {
	http.ResponseWriter
	r       *http.Request
	home    func(c net.Conn) bool
	watcher *httpserve.Readiness
	cancel  context.CancelFunc // ends the SDK's handler (its request's context)
	unwatch func() bool        // stops net/http's context from ending it
	taken   chan struct{}      // closed once the connection is taken

	mu     sync.Mutex
	status int
	tc     *httpserve.Taken // once taken
}

func (s *takenStream) WriteHeader(code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tc == nil {
		if s.status == 0 {
			s.status = code
		}
		s.ResponseWriter.WriteHeader(code)
	}
}

// Write writes through net/http, or as one chunk on the taken connection.
func (s *takenStream) Write(b []byte) (int, error) {
	s.mu.Lock()
	tc := s.tc
	if tc == nil {
		defer s.mu.Unlock()
		if s.status == 0 {
			s.status = http.StatusOK
		}
		return s.ResponseWriter.Write(b)
	}
	s.mu.Unlock()
	if err := tc.Write(b); err != nil {
		return 0, err
	}
	return len(b), nil
}

// Flush flushes through net/http; the first flush of a 200 event stream takes the connection.
// Writes to a taken connection are not buffered.
func (s *takenStream) Flush() { _ = s.FlushError() }

func (s *takenStream) FlushError() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tc != nil {
		return nil
	}
	rc := http.NewResponseController(s.ResponseWriter)
	if err := rc.Flush(); err != nil {
		return err
	}
	if s.status != http.StatusOK || s.Header().Get("Content-Type") != "text/event-stream" {
		return nil
	}
	if s.tc = httpserve.Take(s.ResponseWriter, s.r, s.home, s.watcher, s.cancel); s.tc != nil {
		s.unwatch() // net/http's context ends with its handler now; the taken connection watches the client
		s.tc.Watch()
		// net/http's writer holds its connection's buffers: the stream lets go of it.
		s.ResponseWriter, s.r = released{http.Header{}}, nil
		close(s.taken)
	}
	return nil
}

// released stands for net/http's writer once the stream is taken: a header of its own (the
// response's was sent), and nothing is written through it (the taken connection carries the
// stream).
type released struct{ h http.Header }

func (r released) Header() http.Header     { return r.h }
func (released) Write([]byte) (int, error) { return 0, httpserve.ErrBroken }
func (released) WriteHeader(int)           {}

// end runs when the SDK's handler has returned: a taken stream ends whole (its last chunk, and
// the connection goes back for the client's next request) unless it broke or the client went.
func (s *takenStream) end() {
	s.cancel()
	s.mu.Lock()
	tc := s.tc
	s.mu.Unlock()
	if tc == nil {
		s.unwatch()
		return
	}
	tc.Finish(true)
}

// Unwrap is for http.ResponseController (before the stream is taken).
func (s *takenStream) Unwrap() http.ResponseWriter { return s.ResponseWriter }
