package httpserve

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// deadlines is a ResponseWriter that records the write deadlines set on its connection.
type deadlines struct {
	*httptest.ResponseRecorder
	set []time.Time
}

func (d *deadlines) SetWriteDeadline(t time.Time) error {
	d.set = append(d.set, t)
	return nil
}

func (d *deadlines) FlushError() error { d.Flush(); return nil }

// A write deadline is set before every write that can reach the connection, and cleared when
// the handler is done; writes net/http only buffers (a small answer) set none.
func TestDeadlineWriterArmsForWritesThatReachTheConnection(t *testing.T) {
	for name, tc := range map[string]struct {
		write func(w *DeadlineWriter)
		armed int // deadlines set before writes; one more clears them when armed
	}{
		"a small answer":          {func(w *DeadlineWriter) { _, _ = w.Write([]byte(strings.Repeat("x", 300))) }, 0},
		"an answer held whole":    {func(w *DeadlineWriter) { _, _ = w.Write(make([]byte, heldBytes)) }, 0},
		"a header alone":          {func(w *DeadlineWriter) { w.WriteHeader(http.StatusAccepted) }, 0},
		"an informational status": {func(w *DeadlineWriter) { w.WriteHeader(http.StatusEarlyHints) }, 1},
		"a larger answer":         {func(w *DeadlineWriter) { _, _ = w.Write(make([]byte, heldBytes+1)) }, 1},
		"small writes past the held bytes": {func(w *DeadlineWriter) {
			for range 3 {
				_, _ = w.Write(make([]byte, heldBytes/2))
			}
		}, 1},
		"a flush": {func(w *DeadlineWriter) { _, _ = w.Write([]byte("x")); w.Flush() }, 1},
		"an event stream": {func(w *DeadlineWriter) {
			for range 2 {
				_, _ = w.Write([]byte("data: {}\n\n"))
				w.Flush()
			}
		}, 3},
		"a large answer in pieces": {func(w *DeadlineWriter) { _, _ = w.Write(make([]byte, 2*writePiece+1)) }, 3},
	} {
		t.Run(name, func(t *testing.T) {
			d := &deadlines{ResponseRecorder: httptest.NewRecorder()}
			w := NewDeadlineWriter(d)
			tc.write(w)
			w.Disarm()
			want := tc.armed
			if want > 0 {
				want++ // cleared
			}
			if len(d.set) != want {
				t.Fatalf("%d deadlines set, want %d", len(d.set), want)
			}
			if want > 0 && !d.set[len(d.set)-1].IsZero() {
				t.Fatal("the deadline was not cleared when the handler was done")
			}
		})
	}
}
