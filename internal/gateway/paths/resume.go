package paths

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// A stateful (2025-11-25) session's forwarded tools/call is answered as a resumable event
// stream, as a streamable HTTP server with an event store gives it (SEP-1699): its first event
// primes the stream (an event id and a retry field, no data), every later event has an id, and
// a client whose connection drops reconnects with a GET naming the last id it got
// (Last-Event-ID), and gets the events after it, then the rest of the stream as it comes. The
// call goes on while no one reads (a disconnect is not a cancellation, the transport says; the
// session's notifications/cancelled or its end is), unless the client went away before any id
// reached it, when it cannot resume. A stream's events are kept while it runs, and for
// replayTTL after it ends when its reader went away before the end; a session that ends drops
// its streams.

// replayPrefix starts the ids of the gateway's own streams' events, so a GET resuming one is
// told from one resuming a stream of the SDK's.
const replayPrefix = "pmcp-"

// retryMillis is the reconnection delay the streams suggest to their clients.
const retryMillis = 1000

// maxReplayBytes bounds the events one stream keeps: past it the oldest go, and a resumption
// from before them is refused (the client then calls again).
const maxReplayBytes = 1 << 20

// replayTTL is how long a stream whose reader went away is kept once it has ended.
const replayTTL = time.Minute

// replays are a project's resumable streams, by id.
type replays struct {
	mu      sync.Mutex
	streams map[string]*replayStream
}

// replayStream is one response stream's events.
type replayStream struct {
	id, session string
	primed      atomic.Bool // the priming event has been written: the client can resume

	mu     sync.Mutex
	first  int      // the index of events[0]: those before it were dropped (maxReplayBytes)
	events [][]byte // each event's data; index 0 is the priming event, which has none
	size   int
	done   bool
	wake   chan struct{} // closed (and replaced) when an event is added or the stream ends
	expiry *time.Timer   // drops the ended stream (keep)
}

// open starts a stream of session's, with its priming event.
func (rs *replays) open(session string) *replayStream {
	var b [8]byte
	_, _ = rand.Read(b[:])
	s := &replayStream{id: hex.EncodeToString(b[:]), session: session, events: [][]byte{nil}, wake: make(chan struct{})}
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
// kept for replayTTL for a resumption.
func (rs *replays) close(s *replayStream, kept bool) {
	s.finish()
	if !kept {
		rs.drop(s.id)
		return
	}
	s.mu.Lock()
	s.expiry = time.AfterFunc(replayTTL, func() { rs.drop(s.id) })
	s.mu.Unlock()
}

func (rs *replays) drop(id string) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if s := rs.streams[id]; s != nil {
		s.stop()
		delete(rs.streams, id)
	}
}

// dropSession drops a session's streams (it has ended).
func (rs *replays) dropSession(session string) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for id, s := range rs.streams {
		if s.session == session {
			s.stop()
			delete(rs.streams, id)
		}
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

// add keeps an event's data and returns its id.
func (s *replayStream) add(data []byte) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, data)
	s.size += len(data)
	for s.size > maxReplayBytes && len(s.events) > 1 {
		s.size -= len(s.events[0])
		s.events = s.events[1:]
		s.first++
	}
	s.signal()
	return s.eventID(s.first + len(s.events) - 1)
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
