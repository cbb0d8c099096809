package paths

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dsh-dev/projectmcp/internal/metrics"
)

// eventBytes is each test stream's event; streamCost is what a stream of one such event is
// charged (its priming event has no data).
const (
	eventBytes = 10 << 10
	streamCost = eventBytes + keptOverhead
)

// abandoned is a call's stream of session's whose reader went away: one progress event of
// eventBytes, then it ended and is kept.
func abandoned(rs *replays, session, principal string) *replayStream {
	s := rs.open(session, principal)
	s.primed.Store(true)
	s.add(bytes.Repeat([]byte("p"), eventBytes), nil)
	rs.close(s, true)
	return s
}

// kept reports which of the streams rs still has (a resumption finds), as a string of 1 and 0.
func kept(rs *replays, streams ...*replayStream) string {
	var b strings.Builder
	for _, s := range streams {
		if rs.find(s.session, s.id) != nil {
			b.WriteByte('1')
		} else {
			b.WriteByte('0')
		}
	}
	return b.String()
}

// A session keeps at most StreamsPerSession ended streams: its next one evicts its oldest,
// and no other session's.
func TestReplayBudgetPerSession(t *testing.T) {
	b := NewReplayBudget(ReplayLimits{Bytes: 1 << 30, BytesPerPrincipal: 1 << 30, StreamsPerSession: 3})
	rs := &replays{budget: b}
	evictions := promtest.ToFloat64(metrics.ReplayEvictions.WithLabelValues(metrics.ReplayBoundSession))
	a1, a2, other, a3 := abandoned(rs, "a", "u"), abandoned(rs, "a", "u"), abandoned(rs, "b", "u"), abandoned(rs, "a", "u")
	if got := kept(rs, a1, a2, other, a3); got != "1111" {
		t.Fatalf("within the bound every stream is kept: %s", got)
	}
	a4 := abandoned(rs, "a", "u")
	if got := kept(rs, a1, a2, other, a3, a4); got != "01111" {
		t.Fatalf("a session's fourth kept stream evicts its oldest, only: %s", got)
	}
	if u := b.Usage(); u.Streams != 4 || u.Bytes != 4*streamCost || u.Evicted != 1 {
		t.Fatalf("usage %+v", u)
	}
	if got := promtest.ToFloat64(metrics.ReplayEvictions.WithLabelValues(metrics.ReplayBoundSession)) - evictions; got != 1 {
		t.Fatalf("evictions counted: %v", got)
	}
}

// A principal's kept streams hold at most BytesPerPrincipal, whatever sessions (and endpoints)
// they are of: past it its own oldest goes, and another principal's stay.
func TestReplayBudgetPerPrincipal(t *testing.T) {
	b := NewReplayBudget(ReplayLimits{Bytes: 1 << 30, BytesPerPrincipal: 3 * streamCost, StreamsPerSession: 16})
	rs, elsewhere := &replays{budget: b}, &replays{budget: b} // two endpoints of the process
	u1, v1, u2, u3 := abandoned(rs, "a", "u"), abandoned(rs, "c", "v"), abandoned(elsewhere, "b", "u"), abandoned(rs, "a2", "u")
	if got := kept(rs, u1, v1, u3) + kept(elsewhere, u2); got != "1111" {
		t.Fatalf("within the bound every stream is kept: %s", got)
	}
	u4 := abandoned(elsewhere, "b", "u")
	if got := kept(rs, u1, v1, u3) + kept(elsewhere, u2, u4); got != "01111" {
		t.Fatalf("a principal's stream past its bytes evicts its own oldest, on whichever endpoint: %s", got)
	}
	if u := b.Usage(); u.PrincipalBytes["u"] != 3*streamCost || u.PrincipalBytes["v"] != streamCost {
		t.Fatalf("usage %+v", u)
	}
}

// The process's kept streams hold at most Bytes: past it the oldest of all goes, whoever's.
func TestReplayBudgetPerProcess(t *testing.T) {
	b := NewReplayBudget(ReplayLimits{Bytes: 3 * streamCost, BytesPerPrincipal: 1 << 30, StreamsPerSession: 16})
	rs := &replays{budget: b}
	s1, s2, s3 := abandoned(rs, "a", "u"), abandoned(rs, "b", "v"), abandoned(rs, "c", "w")
	s4 := abandoned(rs, "d", "x")
	if got := kept(rs, s1, s2, s3, s4); got != "0111" {
		t.Fatalf("past the process's bytes the oldest stream goes: %s", got)
	}
	if u := b.Usage(); u.Bytes != 3*streamCost || u.Streams != 3 {
		t.Fatalf("usage %+v", u)
	}
	// A stream that goes by itself (its session's end, its expiry) gives its bytes back.
	rs.dropSession("b")
	rs.drop(s3.id)
	if u := b.Usage(); u.Bytes != streamCost || u.Streams != 1 || len(u.PrincipalBytes) != 1 || len(b.sessions) != 1 {
		t.Fatalf("after two streams went: %+v, %d sessions", u, len(b.sessions))
	}
	rs.drop(s4.id)
	if u := b.Usage(); u.Bytes != 0 || len(u.PrincipalBytes) != 0 || len(b.sessions) != 0 {
		t.Fatalf("nothing kept, nothing charged: %+v, %d sessions", u, len(b.sessions))
	}
}

// A stream evicted is resumed as one that expired: refused, saying so; one kept is resumed.
func TestReplayBudgetEvictedResumesAsExpired(t *testing.T) {
	b := NewReplayBudget(ReplayLimits{StreamsPerSession: 1})
	p := &Paths{replays: replays{budget: b}}
	first := abandoned(&p.replays, "a", "u")
	firstID := first.eventID(0)
	second := abandoned(&p.replays, "a", "u")
	resume := func(id string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("Last-Event-ID", id)
		w := httptest.NewRecorder()
		p.Resume(w, r, "a")
		return w
	}
	expired := resume(replayPrefix + "0000000000000000_0")
	if w := resume(firstID); w.Code != http.StatusBadRequest || w.Body.String() != expired.Body.String() {
		t.Fatalf("an evicted stream resumed: %d %.100q, want %d %q", w.Code, w.Body, expired.Code, expired.Body)
	}
	if w := resume(second.eventID(0)); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "ppp") {
		t.Fatalf("the kept stream resumed: %d %.100q", w.Code, w.Body)
	}
}

// An answer past maxReplayBytes is not kept once the stream ended: a resumption from the event
// before it gets a short error for the same id in its place; the budget is charged that.
// A resumption writing the stream when the answer came gets the answer itself.
func TestReplayBudgetOversizedAnswer(t *testing.T) {
	b := NewReplayBudget(ReplayLimits{})
	rs := &replays{budget: b}
	huge := encodeResponse(json.RawMessage(`7`), json.RawMessage(`{"content":[{"type":"text","text":"`+strings.Repeat("b", maxReplayBytes)+`"}]}`), nil)
	call := func() *replayStream {
		s := rs.open("a", "u")
		s.primed.Store(true)
		s.add([]byte(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p","progress":1}}`), nil)
		s.add(huge, json.RawMessage(`7`))
		return s
	}
	answerOf := func(s *replayStream) []byte {
		events, _, done, _, ok := s.after(1)
		if !ok || !done || len(events) != 1 {
			t.Fatalf("the events after the progress: %d, done %v, ok %v", len(events), done, ok)
		}
		return events[0]
	}

	s := call()
	rs.close(s, true)
	got := answerOf(s)
	var res struct {
		ID    json.RawMessage `json:"id"`
		Error struct {
			Code    int64  `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(got, &res); err != nil || string(res.ID) != "7" || res.Error.Code == 0 ||
		!strings.Contains(res.Error.Message, "too large") || !strings.Contains(res.Error.Message, "call the tool again") {
		t.Fatalf("the kept answer: %.300s (%v)", got, err)
	}
	if u := b.Usage(); u.Bytes > 2<<10+keptOverhead {
		t.Fatalf("the stream is charged %d bytes, not the answer's %d", u.Bytes, len(huge))
	}

	reading := call()
	reading.attach() // a resumption writes the stream as the answer comes
	rs.close(reading, true)
	if !bytes.Equal(answerOf(reading), huge) {
		t.Fatal("a resumption writing the stream when it ended gets the answer itself")
	}
	rs.detach(reading)
	if bytes.Equal(answerOf(reading), huge) {
		t.Fatal("once no resumption writes it, the answer is not kept")
	}
}

// Another event past maxReplayBytes (a server's request) is not kept once the stream ended,
// nor the events before it: a resumption from before it is refused, one from after it is not.
func TestReplayBudgetOversizedEvent(t *testing.T) {
	rs := &replays{budget: NewReplayBudget(ReplayLimits{})}
	s := rs.open("a", "u")
	s.primed.Store(true)
	s.add([]byte(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p","progress":1}}`), nil)
	id := s.add(bytes.Repeat([]byte("r"), maxReplayBytes+1), nil)
	rs.close(s, true)
	if _, _, _, _, ok := s.after(0); ok {
		t.Fatal("a resumption from before the oversized event must be refused")
	}
	_, n, _ := parseReplayID(id)
	if events, _, done, _, ok := s.after(n); !ok || !done || len(events) != 0 {
		t.Fatalf("a resumption from the oversized event on: %d %v %v", len(events), done, ok)
	}
	if u := rs.budget.Usage(); u.Bytes != keptOverhead {
		t.Fatalf("the stream is charged %d bytes", u.Bytes)
	}
}
