package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/internal/conn"
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

// progressTo is the onProgress callback that puts a call's progress through put.
func progressTo(put func(relayed)) func(*mcp.ProgressNotificationParams) {
	if put == nil {
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

// admits reports whether a session at level takes a line of the given level.
func admits(level, line mcp.LoggingLevel) bool {
	want, got := slices.Index(logLevels, level), slices.Index(logLevels, line)
	return want >= 0 && got >= want
}

// relayCall runs send while the calling goroutine, which serves the one session the call is
// for, writes what the server sends for it (write). The goroutine that hands send's put the
// messages serves every session of the connection: it only queues, and past progressQueue
// waiting the oldest go. What is queued when send returns is written before relayCall
// returns, so it comes before the call's result. A panic in send is raised again on the
// calling goroutine, whose owner recovers it (recovery.Middleware, or net/http on the
// forward path). A nil write relays nothing (send's put is nil).
func relayCall[T any](ctx context.Context, write func(relayed), send func(context.Context, func(relayed)) (T, error)) (T, error) {
	if write == nil {
		return send(ctx, nil)
	}
	events := make(chan relayed, progressQueue)
	requests := make(chan relayed) // a server's request waits to be written, never dropped
	put := func(e relayed) {
		if e.request != nil {
			select {
			case requests <- e:
			case <-ctx.Done():
			}
			return
		}
		for {
			select {
			case events <- e:
				return
			default:
			}
			select { // full: drop the oldest and try again
			case <-events:
			default:
			}
		}
	}
	type outcome struct {
		res      T
		err      error
		panicked *recovery.Panic
	}
	done := make(chan outcome, 1)
	go func() { // ends when send returns, which ctx bounds
		defer func() {
			if v := recover(); v != nil {
				done <- outcome{panicked: recovery.Capture(v)}
			}
		}()
		res, err := send(ctx, put)
		done <- outcome{res: res, err: err}
	}()
	for {
		select {
		case e := <-events:
			write(e)
		case e := <-requests:
			for len(events) > 0 { // what the server sent before its request comes before it
				write(<-events)
			}
			write(e)
		case o := <-done:
			if o.panicked != nil {
				panic(o.panicked)
			}
			for {
				select {
				case e := <-events:
					write(e)
				default:
					return o.res, o.err
				}
			}
		}
	}
}

// sseWriter writes a response as an event stream; with a replay, a resumable one (resume.go),
// whose first event primes it.
type sseWriter struct {
	w      http.ResponseWriter
	f      http.Flusher
	replay *replayStream
}

func newSSEWriter(w http.ResponseWriter, replay *replayStream) *sseWriter {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	s := &sseWriter{w: w, f: f, replay: replay}
	if replay != nil {
		replay.primed.Store(true)
		s.write([]byte("id: " + replay.eventID(0) + "\nretry: " + strconv.Itoa(retryMillis) + "\ndata: \n\n"))
	}
	return s
}

func (s *sseWriter) event(data []byte) {
	id := ""
	if s.replay != nil {
		id = s.replay.add(data)
	}
	s.eventWithID(id, data)
}

// eventWithID writes one message event, with an id unless it is "".
func (s *sseWriter) eventWithID(id string, data []byte) {
	buf := make([]byte, 0, len(data)+len(id)+32)
	if id != "" {
		buf = append(buf, "id: "...)
		buf = append(buf, id...)
		buf = append(buf, '\n')
	}
	buf = append(buf, "event: message\ndata: "...)
	buf = append(buf, data...)
	buf = append(buf, "\n\n"...)
	s.write(buf)
}

func (s *sseWriter) write(frame []byte) {
	_, _ = s.w.Write(frame)
	if s.f != nil {
		s.f.Flush()
	}
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
