package paths

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// A stateful (2025-11-25) session's forwarded tools/call is answered as a resumable event
// stream, as a streamable HTTP server with an event store gives it (SEP-1699): its first event
// primes the stream (an event id and a retry field, no data), every later event has an id, and
// a client whose connection drops reconnects with a GET naming the last id it got
// (Last-Event-ID), and gets the events after it, then the rest of the stream as it comes. The
// call goes on while no one reads (a disconnect is not a cancellation, the transport says; the
// session's notifications/cancelled or its end is), unless the client went away before any id
// reached it, when it cannot resume. A stream's events are kept while it runs, and for
// replayTTL after it ends when its reader went away before the end, within the process's
// ReplayBudget (budget.go); a session that ends drops its streams.

// replayPrefix starts the ids of the gateway's own streams' events, so a GET resuming one is
// told from one resuming a stream of the SDK's.
const replayPrefix = "pmcp-"

// retryMillis is the reconnection delay the streams suggest to their clients.
const retryMillis = 1000

// maxReplayBytes bounds the events one stream keeps: past it the oldest go, and a resumption
// from before them is refused (the client then calls again). While the stream runs its last
// event is kept whole, whatever its size (a server's request, or the answer, on its way to a
// reader); once it ended, an event past the bound is not kept (bound): an answer is kept as
// a short error saying so (tooLarge), anything else with the events before it.
const maxReplayBytes = 1 << 20

// replayTTL is how long a stream whose reader went away is kept once it has ended. A client
// whose connection drops reconnects after the retry delay the stream suggests (retryMillis);
// the Go SDK's client then tries again with a growing backoff, its fourth attempt within 15 s
// of the drop at the latest, and the drop came before the call's end. A resumption is for a
// dropped connection, which comes back within that or not soon; a stream kept longer for a
// client that is gone only holds its session's and principal's share of the budget.
const replayTTL = 15 * time.Second

// replays are a project's resumable streams, by id.
type replays struct {
	budget *ReplayBudget // nil in tests of the writers only: no stream of theirs is kept

	mu      sync.Mutex
	streams map[string]*replayStream
}

// replayStream is one response stream's events.
type replayStream struct {
	id, session, principal string
	owner                  *replays
	primed                 atomic.Bool // the priming event has been written: the client can resume

	mu     sync.Mutex
	first  int      // the index of events[0]: those before it were dropped (maxReplayBytes)
	events [][]byte // each event's data; index 0 is the priming event, which has none
	size   int
	// answer is the index of the answer to the call (-1 until it came), answerID its id.
	answer   int
	answerID json.RawMessage
	done     bool
	kept     bool          // ended with its reader gone: kept for a resumption (close)
	settled  bool          // its events are bounded and charged to the budget (settle)
	readers  int           // resumptions writing its events now
	wake     chan struct{} // closed (and replaced) when an event is added or the stream ends
	expiry   *time.Timer   // drops the ended stream (keep)

	place keptPlace // its charge on the budget (the budget's mutex guards it)
}

// open starts a stream of session's, which principal holds, with its priming event.
func (rs *replays) open(session, principal string) *replayStream {
	var b [8]byte
	_, _ = rand.Read(b[:])
	s := &replayStream{id: hex.EncodeToString(b[:]), session: session, principal: principal, owner: rs,
		events: [][]byte{nil}, answer: -1, wake: make(chan struct{})}
	rs.mu.Lock()
	if rs.streams == nil {
		rs.streams = map[string]*replayStream{}
	}
	rs.streams[s.id] = s
	rs.mu.Unlock()
	return s
}

// find is session's stream id (nil when there is none, or it is another session's).
func (rs *replays) find(session, id string) *replayStream {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if s := rs.streams[id]; s != nil && s.session == session {
		return s
	}
	return nil
}

// close ends a stream: it is dropped now when its reader got every event (kept false), else
// kept for replayTTL for a resumption, within the budget. A resumption writing its events
// now has it settled when it is done (detach), so that it gets the events as they came.
func (rs *replays) close(s *replayStream, kept bool) {
	s.finish()
	if !kept {
		rs.drop(s.id)
		return
	}
	s.mu.Lock()
	s.kept = true
	s.expiry = time.AfterFunc(replayTTL, func() { rs.drop(s.id) })
	now := s.readers == 0
	s.mu.Unlock()
	if now {
		rs.settle(s)
	}
}

// settle bounds what a kept stream holds (bound) and charges it to the budget, dropping the
// streams the budget evicts for it.
func (rs *replays) settle(s *replayStream) {
	s.mu.Lock()
	if s.settled {
		s.mu.Unlock()
		return
	}
	s.settled = true
	s.bound()
	cost := int64(s.size + keptOverhead)
	s.mu.Unlock()
	if rs.budget == nil {
		return
	}
	for _, victim := range rs.budget.keep(s, cost) {
		victim.owner.drop(victim.id)
	}
}

// attach counts a resumption writing s's events; detach ends it, and settles a stream kept
// meanwhile once no resumption writes it.
func (s *replayStream) attach() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.readers++
}

func (rs *replays) detach(s *replayStream) {
	s.mu.Lock()
	s.readers--
	now := s.readers == 0 && s.kept && !s.settled
	s.mu.Unlock()
	if now {
		rs.settle(s)
	}
}

func (rs *replays) drop(id string) {
	rs.mu.Lock()
	s := rs.streams[id]
	delete(rs.streams, id)
	rs.mu.Unlock()
	if s != nil {
		rs.let(s)
	}
}

// dropSession drops a session's streams (it has ended).
func (rs *replays) dropSession(session string) {
	var gone []*replayStream
	rs.mu.Lock()
	for id, s := range rs.streams {
		if s.session == session {
			gone = append(gone, s)
			delete(rs.streams, id)
		}
	}
	rs.mu.Unlock()
	for _, s := range gone {
		rs.let(s)
	}
}

// let lets go of a stream no longer in rs: its timer, and its charge on the budget.
func (rs *replays) let(s *replayStream) {
	s.stop()
	if rs.budget != nil {
		rs.budget.release(s)
	}
}

func (s *replayStream) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.expiry != nil {
		s.expiry.Stop()
	}
	s.finishLocked()
}

// add keeps an event's data and returns its id; answers is the id of the request the event
// answers, nil for any other event.
func (s *replayStream) add(data []byte, answers json.RawMessage) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.first + len(s.events)
	s.events = append(s.events, data)
	s.size += len(data)
	if answers != nil {
		s.answer, s.answerID = n, answers
	}
	s.trim()
	s.signal()
	return s.eventID(n)
}

// trim drops the oldest events past maxReplayBytes but the last. A dropped event's slot is
// cleared: the slice's array would otherwise hold its data until it grows.
func (s *replayStream) trim() {
	for s.size > maxReplayBytes && len(s.events) > 1 {
		s.size -= len(s.events[0])
		s.events[0] = nil
		s.events = s.events[1:]
		s.first++
	}
}

// bound keeps no event past maxReplayBytes once the stream ended (trim has the last one the
// only one that can be): the answer is kept as an error saying it was too large (a
// resumption gets an answer, and the client calls again), another event is dropped with the
// ones before it (a resumption from before it is refused).
func (s *replayStream) bound() {
	last := len(s.events) - 1
	if last < 0 || len(s.events[last]) <= maxReplayBytes {
		return
	}
	if s.first+last == s.answer {
		s.size -= len(s.events[last])
		s.events[last] = tooLarge(s.answerID, len(s.events[last]))
		s.size += len(s.events[last])
		s.trim()
		return
	}
	s.first += len(s.events)
	s.events, s.size = nil, 0
}

// tooLarge is the answer a resumption gets in place of one past maxReplayBytes.
func tooLarge(id json.RawMessage, size int) []byte {
	return encodeResponse(id, nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf(
		"projectmcp: the answer (%d bytes) was too large to keep for a resumption (at most %d bytes); call the tool again", size, maxReplayBytes)})
}

func (s *replayStream) finish() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.finishLocked()
}

func (s *replayStream) finishLocked() {
	if !s.done {
		s.done = true
		s.signal()
	}
}

func (s *replayStream) signal() {
	close(s.wake)
	s.wake = make(chan struct{})
}

func (s *replayStream) eventID(n int) string {
	return replayPrefix + s.id + "_" + strconv.Itoa(n)
}

// after returns the events after index n with the index of the last, whether the stream has
// ended, and what is closed when that changes; ok is false when events after n were dropped.
func (s *replayStream) after(n int) (events [][]byte, last int, done bool, wake <-chan struct{}, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if n+1 < s.first {
		return nil, n, s.done, s.wake, false
	}
	from := max(n+1-s.first, 0)
	if from < len(s.events) {
		events = append(events, s.events[from:]...)
	}
	return events, s.first + len(s.events) - 1, s.done, s.wake, true
}

// parseReplayID reads an event id of the gateway's streams: the stream and the event's index.
func parseReplayID(eid string) (stream string, n int, ok bool) {
	rest, found := strings.CutPrefix(eid, replayPrefix)
	if !found {
		return "", 0, false
	}
	stream, index, found := strings.Cut(rest, "_")
	n, err := strconv.Atoi(index)
	if !found || stream == "" || err != nil || n < 0 {
		return "", 0, false
	}
	return stream, n, true
}

// Resume serves a GET with the Last-Event-ID of one of the session's streams: the events
// after it, then the rest of the stream as it comes, until it ends or the client goes.
func (p *Paths) Resume(w http.ResponseWriter, r *http.Request, ref string) {
	id, n, ok := parseReplayID(r.Header.Get("Last-Event-ID"))
	s := p.replays.find(ref, id)
	if !ok || s == nil {
		http.Error(w, "projectmcp: no stream of this session has that event id (it ended a while ago, or never was)", http.StatusBadRequest)
		return
	}
	s.attach()
	defer p.replays.detach(s)
	events, last, done, wake, ok := s.after(n)
	if !ok {
		http.Error(w, "projectmcp: the events after that id are no longer kept; call again", http.StatusBadRequest)
		return
	}
	out := newSSEWriter(w, nil)
	for {
		for i, data := range events {
			out.Event(s.eventID(last-len(events)+1+i), data)
		}
		if done {
			return
		}
		select {
		case <-wake:
		case <-r.Context().Done():
			return
		}
		events, last, done, wake, ok = s.after(last)
		if !ok {
			return // dropped while this client read slowly: it has to call again
		}
	}
}
