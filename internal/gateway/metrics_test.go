package gateway

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/dsh-dev/projectmcp/internal/metrics"
)

// The gateway's ResponseWriter notes the code, and keeps what streaming needs: Flush (the fast
// path's event streams), http.ResponseController's Flush (the SDK's) and the rest of the
// controller's methods through Unwrap.
func TestStatusWriterStreams(t *testing.T) {
	rec := httptest.NewRecorder()
	w := &statusWriter{ResponseWriter: rec}
	if _, ok := http.ResponseWriter(w).(http.Flusher); !ok {
		t.Fatal("the writer must be an http.Flusher")
	}
	if err := http.NewResponseController(w).Flush(); err != nil || !rec.Flushed {
		t.Fatalf("ResponseController.Flush: %v, flushed %v", err, rec.Flushed)
	}
	if w.status() != http.StatusOK {
		t.Fatalf("a flushed response is a 200: %d", w.status())
	}
	// SetWriteDeadline reaches the underlying writer through Unwrap (the recorder has none).
	if err := http.NewResponseController(w).SetWriteDeadline(time.Now()); !errors.Is(err, http.ErrNotSupported) {
		t.Fatalf("SetWriteDeadline: %v", err)
	}

	w = &statusWriter{ResponseWriter: httptest.NewRecorder()}
	w.WriteHeader(http.StatusEarlyHints)
	w.WriteHeader(http.StatusNotFound)
	if w.status() != http.StatusNotFound {
		t.Fatalf("a 1xx is not the final code: %d", w.status())
	}
	if got := (&statusWriter{}).status(); got != http.StatusOK {
		t.Fatalf("nothing written is a 200: %d", got)
	}
}

// Auth decisions: local mode's loopback callers, a token's verdicts.
func TestNoteAuth(t *testing.T) {
	for _, c := range []struct {
		local  bool
		status int
		want   string
	}{
		{true, 0, metrics.AuthLocal},
		{true, http.StatusForbidden, metrics.AuthDenied},
		{false, 0, metrics.AuthAllowed},
		{false, http.StatusUnauthorized, metrics.AuthUnauthenticated},
		{false, http.StatusForbidden, metrics.AuthDenied},
		{false, http.StatusTooManyRequests, metrics.AuthThrottled},
		{false, http.StatusInternalServerError, metrics.AuthError},
	} {
		w := &statusWriter{auth: metrics.AuthNone}
		noteAuth(w, c.local, c.status)
		if w.auth != c.want {
			t.Errorf("local %v, status %d: %s, want %s", c.local, c.status, w.auth, c.want)
		}
	}
}
