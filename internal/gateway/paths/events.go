package paths

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/httpserve"
	"github.com/dsh-dev/projectmcp/internal/recovery"
)

// What a server sends during a forwarded call for the call's session alone (progress, log lines,
// its own requests), relayed on the call's event stream.

// progressQueue bounds the progress notifications waiting for a slow session: past it, the
// oldest waiting ones are dropped (a later one says more), and the server's notification
// goroutine, which every session of the connection shares, never waits for this session.
const progressQueue = 32

// withEvents runs send while relaying what the server sends for the call (its progress,
// with the session's own token, and its log lines) to the session as events of its response
// stream. The first event decides that the response is an event stream (nil until then).
func withEvents(ctx context.Context, open func() *sseWriter, token json.RawMessage,
	send func(context.Context, func(relayed)) (conn.RawResult, error)) (*sseWriter, conn.RawResult, error) {
	var stream *sseWriter
	res, err := relayCall(ctx, func(e relayed) {
		if stream == nil {
			stream = open()
		}
		switch {
		case e.progress != nil && len(token) > 0:
			stream.progress(token, e.progress)
		case e.log != nil:
			stream.log(e.log)
		case e.request != nil:
			stream.event(e.request)
		}
	}, send)
	return stream, res, err
}

// relayed is one message a server sends during a call for the call's session alone: a
// progress notification, or a log line (for a 2026-07-28 session, which gets its log lines
// with its requests).
type relayed struct {
	progress *mcp.ProgressNotificationParams
	log      *mcp.LoggingMessageParams
	request  []byte // a server's request, encoded (asks.go): never dropped
}

// progressTo is the onProgress callback that puts a call's progress through put, nil when
// the session asked for no progress (wanted false): the server is then sent no progress
// token, as it would be sent none directly, and the connection watches for none.
func progressTo(put func(relayed), wanted bool) func(*mcp.ProgressNotificationParams) {
	if put == nil || !wanted {
		return nil
	}
	return func(pp *mcp.ProgressNotificationParams) { put(relayed{progress: pp}) }
}

// logsTo has the log lines a server sends on a call's own stream go through put (conn's log
// sink), at most as verbose as level; with no level the session gets none.
func logsTo(ctx context.Context, put func(relayed), level mcp.LoggingLevel) context.Context {
	return conn.WithLogSink(ctx, level, func(lm *mcp.LoggingMessageParams) {
		if admits(level, lm.Level) {
			put(relayed{log: lm})
		}
	})
}

// logLevels from the most verbose to the least (RFC 5424 order, as MCP uses).
var logLevels = []mcp.LoggingLevel{"debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"}

// LevelRank is a log level's place among the levels, from the most verbose (0); -1 for a level
// MCP does not have.
func LevelRank(level mcp.LoggingLevel) int { return slices.Index(logLevels, level) }

// admits reports whether a session at level takes a line of the given level.
func admits(level, line mcp.LoggingLevel) bool {
	want, got := slices.Index(logLevels, level), slices.Index(logLevels, line)
	return want >= 0 && got >= want
}

// relayCall runs send on the calling goroutine, which serves the one session the call is for,
// while what the server sends for that session is written (write) by the call's own writer: a
// goroutine begun at the first message, so that a call the server sends nothing for costs no
// goroutine and no handoff. The goroutine that hands send's put a message may serve every
// session of the connection: it only queues, and past progressQueue waiting the oldest go.
// What is queued when send returns is written before relayCall returns, so it comes before
// the call's result. A panic in write is raised again on the calling goroutine, whose owner
// recovers it (recovery.Middleware, or net/http on the forward path). A nil write relays
// nothing (send's put is nil).
func relayCall[T any](ctx context.Context, write func(relayed), send func(context.Context, func(relayed)) (T, error)) (T, error) {
	if write == nil {
		return send(ctx, nil)
	}
	r := &relay{ctx: ctx, write: write}
	defer r.finish()
	return send(ctx, r.put)
}

// relay is one call's queue of what the server sends for its session, and the writer that
// empties it while the call runs.
type relay struct {
	ctx   context.Context
	write func(relayed)

	mu       sync.Mutex
	done     bool          // finish began: what comes later is dropped
	events   chan relayed  // progress and log lines, the oldest dropped past progressQueue
	requests chan asked    // a server's request waits to be written, never dropped
	stop     chan struct{} // closed by finish: the writer writes what is queued and ends
	ended    chan struct{} // closed when the writer ends
	panicked *recovery.Panic
}

// put queues e, beginning the writer with the first message.
func (r *relay) put(e relayed) {
	r.mu.Lock()
	if r.done {
		r.mu.Unlock()
		return
	}
	if r.events == nil {
		r.events, r.requests = make(chan relayed, progressQueue), make(chan asked)
		r.stop, r.ended = make(chan struct{}), make(chan struct{})
		go r.writer()
	}
	r.mu.Unlock()
	if e.request != nil {
		r.ask(e)
		return
	}
	for {
		select {
		case r.events <- e:
			return
		default:
		}
		select { // full: drop the oldest and try again
		case <-r.events:
		default:
		}
	}
}

// asked is a server's request on its way to the writer, and the sign that it was written.
type asked struct {
	relayed
	written chan struct{}
}

// ask hands the writer a server's request and returns once it is written, so that what the
// caller puts next comes after it.
func (r *relay) ask(e relayed) {
	a := asked{relayed: e, written: make(chan struct{})}
	select {
	case r.requests <- a:
	case <-r.ended:
		return
	case <-r.ctx.Done():
		return
	}
	select {
	case <-a.written:
	case <-r.ended:
	case <-r.ctx.Done():
	}
}

// writer writes what is queued until finish, then what is left. It ends when finish is
// called, which the call's own goroutine does once send returned.
func (r *relay) writer() {
	defer close(r.ended)
	defer func() {
		if v := recover(); v != nil {
			r.panicked = recovery.Capture(v)
		}
	}()
	for {
		select {
		case e := <-r.events:
			r.write(e)
		case a := <-r.requests:
			r.flush() // what the server sent before its request comes before it
			r.write(a.relayed)
			close(a.written)
		case <-r.stop:
			r.flush()
			return
		}
	}
}

// flush writes the queued progress and log lines.
func (r *relay) flush() {
	for {
		select {
		case e := <-r.events:
			r.write(e)
		default:
			return
		}
	}
}

// finish ends the writer, if one began, once it wrote what is queued; a panic it had is
// raised again here.
func (r *relay) finish() {
	r.mu.Lock()
	r.done = true
	begun := r.events != nil
	r.mu.Unlock()
	if !begun {
		return
	}
	close(r.stop)
	<-r.ended
	if r.panicked != nil {
		panic(r.panicked)
	}
}

// sseWriter writes a response as an event stream (httpserve.EventStream); with a replay, a
// resumable one (resume.go), whose first event primes it.
type sseWriter struct {
	*httpserve.EventStream
	replay *replayStream
}

// newSSEWriter begins an event stream whose every event is sent at once.
func newSSEWriter(w http.ResponseWriter, replay *replayStream) *sseWriter {
	s := newHeldSSEWriter(w, replay)
	s.SendAtOnce()
	if replay != nil {
		s.Flush()
	}
	return s
}

// newHeldSSEWriter begins an event stream that holds its events for the handler's return,
// which sends them in one write with the stream's end: a stream opened only for the answer,
// where sending the priming event first would cost a write and tell the session nothing.
func newHeldSSEWriter(w http.ResponseWriter, replay *replayStream) *sseWriter {
	s := &sseWriter{EventStream: httpserve.StartEvents(w), replay: replay}
	if replay != nil {
		replay.primed.Store(true)
		s.Write([]byte("id: " + replay.eventID(0) + "\nretry: " + strconv.Itoa(retryMillis) + "\ndata: \n\n"))
	}
	return s
}

func (s *sseWriter) event(data []byte) { s.send(data, nil) }

// answer writes the response to the request id, the stream's last event.
func (s *sseWriter) answer(id json.RawMessage, data []byte) { s.send(data, id) }

func (s *sseWriter) send(data []byte, answers json.RawMessage) {
	id := ""
	if s.replay != nil {
		id = s.replay.add(data, answers)
	}
	s.Event(id, data)
}

// log writes a log line as notifications/message.
func (s *sseWriter) log(lm *mcp.LoggingMessageParams) {
	data, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "notifications/message", "params": lm})
	if err == nil {
		s.event(data)
	}
}

func (s *sseWriter) progress(token json.RawMessage, pp *mcp.ProgressNotificationParams) {
	params := struct {
		Token    json.RawMessage `json:"progressToken"`
		Progress float64         `json:"progress"`
		Total    float64         `json:"total,omitempty"`
		Message  string          `json:"message,omitempty"`
	}{token, pp.Progress, pp.Total, pp.Message}
	data, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "notifications/progress", "params": params})
	if err == nil {
		s.event(data)
	}
}
