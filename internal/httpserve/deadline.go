package httpserve

import (
	"bufio"
	"net"
	"net/http"
	"time"
)

// StreamWriteTimeout bounds one write to a session's HTTP response (a result, an event of a
// call's stream, a notification on its GET stream). The gateway's HTTP server has no
// WriteTimeout, on purpose (streams and long calls live for minutes), so without this bound a
// client that stops reading blocks whoever writes to it: and the SDK writes a session's
// notifications (list_changed, log messages, resource updates) from goroutines that serve
// every session of the project. Past it the write fails and that session loses the stream,
// and only that session.
var StreamWriteTimeout = 10 * time.Second

// DeadlineWriter arms a write deadline on the connection before each write of a response
// that can reach the connection: not before the writes net/http only buffers (heldBytes), so
// that a small answer, written whole when the handler returns, costs no deadline timer. The
// handler disarms it when it returns: a keep-alive connection's next response must not
// inherit an expired deadline (the server sets none itself without a WriteTimeout).
type DeadlineWriter struct {
	http.ResponseWriter
	rc    *http.ResponseController
	held  int  // bytes written before the first armed write
	armed bool // a deadline was set on the connection
	taken bool // the connection was hijacked: its deadlines are its taker's
}

// heldBytes is what net/http keeps of a response before writing any of it to the connection
// (its response buffer; the connection's own buffer holds more): a write within it cannot
// block on a client that does not read.
const heldBytes = 2 << 10

func NewDeadlineWriter(w http.ResponseWriter) *DeadlineWriter {
	return &DeadlineWriter{ResponseWriter: w, rc: http.NewResponseController(w)}
}

func (w *DeadlineWriter) arm() {
	w.armed = true
	_ = w.rc.SetWriteDeadline(time.Now().Add(StreamWriteTimeout))
}

func (w *DeadlineWriter) Disarm() {
	if w.armed && !w.taken {
		_ = w.rc.SetWriteDeadline(time.Time{})
	}
}

// Hijack takes the connection from net/http (a listen's stream: listenconn.go), which then
// sets its own deadlines: the handler's return must not clear them.
func (w *DeadlineWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := w.rc.Hijack()
	w.taken = err == nil
	return c, rw, err
}

// WriteHeader arms the deadline for an informational status, which net/http writes at once;
// a final status is written with the body.
func (w *DeadlineWriter) WriteHeader(code int) {
	if code < http.StatusOK {
		w.arm()
	}
	w.ResponseWriter.WriteHeader(code)
}

// Write writes b in pieces of at most writePiece bytes, each within its own deadline: the
// bound is on a client that stops reading, not on a slow link carrying a large result.
func (w *DeadlineWriter) Write(b []byte) (int, error) {
	if !w.armed && w.held+len(b) <= heldBytes {
		w.held += len(b)
		return w.ResponseWriter.Write(b) // buffered by net/http
	}
	n := 0
	for len(b) > 0 {
		piece := b[:min(len(b), writePiece)]
		w.arm()
		m, err := w.ResponseWriter.Write(piece)
		n += m
		if err != nil {
			return n, err
		}
		b = b[m:]
	}
	return n, nil
}

// writePiece is the most one write deadline covers.
const writePiece = 64 << 10

// FlushError flushes what is buffered, within the deadline.
func (w *DeadlineWriter) FlushError() error {
	w.arm()
	return w.rc.Flush()
}

// Flush implements http.Flusher (the SDK's streams and the forward path's use it).
func (w *DeadlineWriter) Flush() { _ = w.FlushError() }

// Unwrap is for http.ResponseController.
func (w *DeadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
