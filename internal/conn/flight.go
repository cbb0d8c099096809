package conn

import (
	"context"
	"fmt"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/dsh-dev/projectmcp/internal/fair"
	"github.com/dsh-dev/projectmcp/internal/metrics"
)

type sessionKey struct{}

// WithSession names the session (by its ref) a request sent with ctx is for, and the principal
// that owns it: its line in the fair queue, whose turns go round the principals first and then
// each one's sessions. A request without one is the connection's own, and is not queued. The
// principal orders turns only; nothing shows it.
func WithSession(ctx context.Context, ref, principal string) context.Context {
	return context.WithValue(ctx, sessionKey{}, fair.Sender{Principal: principal, Session: ref})
}

func senderFrom(ctx context.Context) fair.Sender {
	s, _ := ctx.Value(sessionKey{}).(fair.Sender)
	return s
}

// flight keeps the requests in flight on a connection: their sessions' turns (the fair queue),
// how many have been sent and not answered and by whom (a server's request is attributed by
// them: attribute), and the drain Destroy waits for. Its lock and the fair queue's are never
// held together.
type flight struct {
	server  string // for errors
	fair    *fair.Queue
	metrics *metrics.Server

	mu       sync.Mutex
	closing  bool           // Destroy has begun: no new request may start
	inflight int            // requests sent and not yet answered
	callers  map[Caller]int // sessions with requests in flight, and how many
	calls    map[Caller]int // the callers of those requests (a session's, or a call's: CallOf)
	drained  chan struct{}  // closed when closing and inflight reaches 0
}

func newFlight(server string, q *fair.Queue, m *metrics.Server) *flight {
	return &flight{server: server, fair: q, metrics: m, callers: map[Caller]int{}, calls: map[Caller]int{}, drained: make(chan struct{})}
}

// admit waits for a session's request's turn; the connection's own requests go at once. It
// fails only when ctx ends first, with an error naming the server and the bounds.
func (f *flight) admit(ctx context.Context, s fair.Sender) error {
	if s.Session == "" {
		return nil
	}
	wait, err := f.fair.Acquire(ctx, s)
	if wait > 0 {
		f.metrics.QueueWaited(wait)
	}
	if err != nil {
		return fmt.Errorf("MCP server %q: %w", f.server, err)
	}
	return nil
}

// dismiss ends a request admit let start.
func (f *flight) dismiss(s fair.Sender) {
	if s.Session != "" {
		f.fair.Release(s)
	}
}

// begin registers a request about to be sent, and the caller it comes from; false once
// Destroy has begun.
func (f *flight) begin(caller Caller) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closing {
		return false
	}
	f.inflight++
	if caller != nil {
		f.callers[SessionOf(caller)]++
		f.calls[caller]++
	}
	return true
}

// end unregisters a request begun with begin.
func (f *flight) end(caller Caller) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if caller != nil {
		session := SessionOf(caller)
		if f.callers[session]--; f.callers[session] <= 0 {
			delete(f.callers, session)
		}
		if f.calls[caller]--; f.calls[caller] <= 0 {
			delete(f.calls, caller)
		}
	}
	f.inflight--
	if f.closing && f.inflight == 0 {
		close(f.drained)
	}
}

// busy reports requests sent and not yet answered.
func (f *flight) busy() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.inflight > 0
}

// closed reports whether Destroy has begun.
func (f *flight) closed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.closing
}

// close lets no new request begin, and returns a channel closed once those in flight have
// ended.
func (f *flight) close() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.closing {
		f.closing = true
		if f.inflight == 0 {
			close(f.drained)
		}
	}
	return f.drained
}

// attribute finds the caller a server's request (method) belongs to when nothing the
// request came with says: the only session with requests in flight (on the stream of its
// call when it has only one); with none, or several, the server gets a clear error.
func (f *flight) attribute(method string) (Caller, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch len(f.callers) {
	case 0:
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest,
			Message: fmt.Sprintf("projectmcp: %s while no agent session has a request in flight on this connection", method)}
	case 1:
		for call := range f.calls { // one call in flight: its stream, when it has one
			if len(f.calls) == 1 {
				return call, nil
			}
		}
		for caller := range f.callers {
			return caller, nil
		}
	}
	return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest,
		Message: fmt.Sprintf("projectmcp: %s while %d agent sessions have requests in flight on this shared connection; it cannot tell which one it is for", method, len(f.callers))}
}
