package paths

import (
	"container/list"
	"sync"

	"github.com/dsh-dev/projectmcp/internal/metrics"
)

// A resumable stream whose reader went away before its end is kept after the call ended, for a
// resumption (resume.go). The call ended, so its session's share of the connection (the fair
// queue's calls in flight) no longer holds it: what bounds the streams kept so is a budget of
// their own, which every endpoint of the process shares. Past any of its bounds the stream
// kept longest goes first; a resumption of a stream let go is answered as one of a stream that
// expired (the client calls again).
//
// The bounds are on what the process holds, not on time: with none, a caller abandoning calls
// of a tool that returns a large result grows the controller's heap by each result for the
// kept streams' lifetime, and every project of the controller goes down with it.

// Defaults of ReplayLimits.
const (
	// DefaultReplayBytes bounds what every kept stream of the process holds together: the
	// controller's memory no caller, nor all of them together, can grow past it through
	// abandoned calls.
	DefaultReplayBytes = 64 << 20
	// DefaultReplayBytesPerPrincipal bounds one principal's kept streams, whatever project or
	// session they are of: a quarter of the process's, so that one identity abandoning calls
	// evicts only its own streams, and takes three others to crowd out the rest.
	DefaultReplayBytesPerPrincipal = 16 << 20
	// DefaultReplayStreamsPerSession bounds one session's kept streams: as many as its calls in
	// flight on one connection may be (the fair queue's --max-calls-per-session default), so
	// that a client that drops its connection under a full share can resume every call of it.
	DefaultReplayStreamsPerSession = 16
)

// keptOverhead is what a kept stream is charged besides its events' bytes: its record, ids,
// map entries and timer. A stream of tiny events still costs memory, and so the byte bounds
// also bound how many streams are kept.
const keptOverhead = 1 << 10

// ReplayLimits are a ReplayBudget's bounds; a zero field takes its default.
type ReplayLimits struct {
	// Bytes bounds what the process's kept streams hold (DefaultReplayBytes).
	Bytes int64
	// BytesPerPrincipal bounds what one principal's kept streams hold (DefaultReplayBytesPerPrincipal).
	BytesPerPrincipal int64
	// StreamsPerSession bounds how many streams one session has kept (DefaultReplayStreamsPerSession).
	StreamsPerSession int
}

// ReplayBudget is the bound on what the kept streams of a process's endpoints hold: made once
// by the gateway, and given to every endpoint's Paths (Options.Replays).
type ReplayBudget struct {
	limits ReplayLimits

	mu         sync.Mutex
	bytes      int64
	all        list.List // *replayStream, kept longest first
	principals map[string]*keptSet
	sessions   map[sessionOf]*keptSet
	kept       uint64 // streams ever kept (Usage)
	evicted    uint64 // streams let go past a bound (Usage)
}

// keptSet is the kept streams of one principal or one session, kept longest first.
type keptSet struct {
	bytes   int64
	streams list.List
}

// sessionOf names a session among every endpoint's: refs are an endpoint's own.
type sessionOf struct {
	rs  *replays
	ref string
}

// keptPlace is where a kept stream is in its budget's lists; the budget's mutex guards it.
type keptPlace struct {
	cost                int64
	all, principal, ses *list.Element
	gone                bool // dropped (or evicted): never kept again
}

// NewReplayBudget is a budget with the limits given (zero fields: the defaults).
func NewReplayBudget(l ReplayLimits) *ReplayBudget {
	if l.Bytes <= 0 {
		l.Bytes = DefaultReplayBytes
	}
	if l.BytesPerPrincipal <= 0 {
		l.BytesPerPrincipal = DefaultReplayBytesPerPrincipal
	}
	if l.StreamsPerSession <= 0 {
		l.StreamsPerSession = DefaultReplayStreamsPerSession
	}
	return &ReplayBudget{limits: l, principals: map[string]*keptSet{}, sessions: map[sessionOf]*keptSet{}}
}

// ReplayUsage is what a budget's kept streams hold now, and how many it has kept and evicted.
type ReplayUsage struct {
	Bytes          int64
	Streams        int
	Kept, Evicted  uint64
	PrincipalBytes map[string]int64
}

// Usage is what the budget's kept streams hold now (for tests and figures).
func (b *ReplayBudget) Usage() ReplayUsage {
	b.mu.Lock()
	defer b.mu.Unlock()
	u := ReplayUsage{Bytes: b.bytes, Streams: b.all.Len(), Kept: b.kept, Evicted: b.evicted, PrincipalBytes: map[string]int64{}}
	for p, set := range b.principals {
		u.PrincipalBytes[p] = set.bytes
	}
	return u
}

// keep charges the ended stream s at cost, and evicts the streams kept longest past the
// bounds: those the caller then drops (s among them when it alone is over a bound). A stream
// dropped meanwhile is not kept.
func (b *ReplayBudget) keep(s *replayStream, cost int64) (evicted []*replayStream) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s.place.gone {
		return nil
	}
	b.kept++
	s.place.cost = cost
	s.place.all = b.all.PushBack(s)
	ps := b.principals[s.principal]
	if ps == nil {
		ps = &keptSet{}
		b.principals[s.principal] = ps
	}
	s.place.principal = ps.streams.PushBack(s)
	ps.bytes += cost
	key := sessionOf{s.owner, s.session}
	ss := b.sessions[key]
	if ss == nil {
		ss = &keptSet{}
		b.sessions[key] = ss
	}
	s.place.ses = ss.streams.PushBack(s)
	ss.bytes += cost
	b.bytes += cost
	metrics.ReplayKeptBytes.Add(float64(cost))

	evict := func(e *list.Element, bound string) {
		victim := e.Value.(*replayStream)
		b.unlink(victim)
		evicted = append(evicted, victim)
		b.evicted++
		metrics.ReplayEvictions.WithLabelValues(bound).Inc()
	}
	for ss.streams.Len() > b.limits.StreamsPerSession {
		evict(ss.streams.Front(), metrics.ReplayBoundSession)
	}
	for ps.bytes > b.limits.BytesPerPrincipal {
		evict(ps.streams.Front(), metrics.ReplayBoundPrincipal)
	}
	for b.bytes > b.limits.Bytes {
		evict(b.all.Front(), metrics.ReplayBoundProcess)
	}
	return evicted
}

// release lets go of s's charge, if it has one: it is dropped, and never kept again.
func (b *ReplayBudget) release(s *replayStream) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.unlink(s)
}

// unlink takes s out of the budget's lists and marks it gone; b.mu is held.
func (b *ReplayBudget) unlink(s *replayStream) {
	pl := &s.place
	if pl.gone {
		return
	}
	pl.gone = true
	if pl.all == nil {
		return // never kept
	}
	b.all.Remove(pl.all)
	b.bytes -= pl.cost
	metrics.ReplayKeptBytes.Sub(float64(pl.cost))
	if ps := b.principals[s.principal]; ps != nil {
		ps.streams.Remove(pl.principal)
		if ps.bytes -= pl.cost; ps.streams.Len() == 0 {
			delete(b.principals, s.principal)
		}
	}
	key := sessionOf{s.owner, s.session}
	if ss := b.sessions[key]; ss != nil {
		ss.streams.Remove(pl.ses)
		if ss.bytes -= pl.cost; ss.streams.Len() == 0 {
			delete(b.sessions, key)
		}
	}
	pl.all, pl.principal, pl.ses = nil, nil, nil
}
