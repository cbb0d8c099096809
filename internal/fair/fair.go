// Package fair shares a connection among the sessions that send on it: each may have at most
// a number of requests in flight on it (MaxCallsPerSession), and the connection at most
// another (MaxCalls). A request past either waits in its session's own line; a freed slot
// goes to the next principal in turn that has a session that may take one, and within that
// principal to its next session in turn (round robin over the principals waiting, then over
// each one's sessions). So one session's thousand calls wait behind each other, not in front
// of another session's one; and since sessions cost nothing to open, an identity's hundred
// sessions get one turn for each turn of another identity's one, not a hundred. Requests of
// no session (a connection's own: lists, pings, unsubscribes) are not queued.
//
// It is an engine apart from the connection it admits requests to (internal/conn) because
// every forwarded request goes through it: it is held to the call path's benchmarks (make
// bench: BenchmarkGatewayCallOverhead and BenchmarkGatewayThroughput, many sessions on one
// connection, in internal/gateway; BenchmarkCallPathProcesses and its Throughput variant in
// cmd/projectmcp) and to a loaded connection at scale (make bench-scale).
package fair

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Sender is who sends a request: its session (by ref) and the principal that owns it. The
// principal only orders turns: it is never shown.
type Sender struct{ Principal, Session string }

// Queue admits a connection's requests.
type Queue struct {
	mu         sync.Mutex
	max        int // in flight on the connection
	perSession int // in flight per session
	running    int
	bySession  map[string]int        // session → requests in flight
	principals map[string]*principal // principal → its sessions' requests waiting
	turns      []string              // principals with a request waiting, next turn first
	waiting    int
	waited     uint64 // requests that have had to wait, ever
	reported   int    // waiting, as last reported
	report     func() // tells the connection's owner the figures changed much (reportable)
}

// principal is one principal's sessions with requests waiting.
type principal struct {
	lines map[string][]*waiter // session → its requests waiting, oldest first
	turns []string             // its sessions with a request waiting, next turn first
}

type waiter struct {
	ready   chan struct{}
	granted bool
}

// New is a queue admitting max requests at once, perSession of them a session's; report is
// told when the requests waiting change much (reportable).
func New(max, perSession int, report func()) *Queue {
	return &Queue{max: max, perSession: perSession, report: report, bySession: map[string]int{}, principals: map[string]*principal{}}
}

// reportable reports whether the number of requests waiting has changed enough since it was
// last reported to report it again: when a queue forms, when it has doubled, when it is gone.
// So a burst costs the status a handful of writes, not one per request.
func reportable(waiting, reported int) bool {
	switch {
	case waiting == 0:
		return reported > 0
	case reported == 0:
		return true
	default:
		return waiting >= 2*reported
	}
}

// unlock releases q.mu, then reports the figures if they changed enough.
func (q *Queue) unlock() {
	report := reportable(q.waiting, q.reported)
	if report {
		q.reported = q.waiting
	}
	q.mu.Unlock()
	if report && q.report != nil {
		q.report()
	}
}

// Acquire waits for a slot for a request of s's; it fails only when ctx ends first. The
// returned wait is how long it waited.
func (q *Queue) Acquire(ctx context.Context, s Sender) (wait time.Duration, err error) {
	q.mu.Lock()
	if !q.inLine(s) && q.free(s.Session) {
		q.take(s.Session)
		q.mu.Unlock()
		return 0, nil
	}
	w := &waiter{ready: make(chan struct{})}
	q.enqueue(s, w)
	q.waiting++
	q.waited++
	q.unlock()

	start := time.Now()
	select {
	case <-w.ready:
		return time.Since(start), nil
	case <-ctx.Done():
	}
	q.mu.Lock()
	defer q.unlock()
	if w.granted { // granted as ctx ended: give the slot on
		q.releaseLocked(s.Session)
	} else {
		q.leave(s, w)
	}
	return time.Since(start), fmt.Errorf("waiting for a turn on the connection (%d of this session's requests in flight, at most %d; %d on the connection, at most %d): %w",
		q.bySession[s.Session], q.perSession, q.running, q.max, context.Cause(ctx))
}

// Release frees a slot Acquire gave s.
func (q *Queue) Release(s Sender) {
	q.mu.Lock()
	defer q.unlock()
	q.releaseLocked(s.Session)
}

func (q *Queue) releaseLocked(session string) {
	q.running--
	if q.bySession[session]--; q.bySession[session] <= 0 {
		delete(q.bySession, session)
	}
	q.grant()
}

// inLine reports whether s's session has requests waiting.
func (q *Queue) inLine(s Sender) bool {
	p := q.principals[s.Principal]
	return p != nil && len(p.lines[s.Session]) > 0
}

// enqueue puts w at the back of s's session's line, and the session and its principal in the
// turns if they were not waiting.
func (q *Queue) enqueue(s Sender, w *waiter) {
	p := q.principals[s.Principal]
	if p == nil {
		p = &principal{lines: map[string][]*waiter{}}
		q.principals[s.Principal] = p
		q.turns = append(q.turns, s.Principal)
	}
	if len(p.lines[s.Session]) == 0 {
		p.turns = append(p.turns, s.Session)
	}
	p.lines[s.Session] = append(p.lines[s.Session], w)
}

// free reports whether session may start a request now.
func (q *Queue) free(session string) bool {
	return q.running < q.max && q.bySession[session] < q.perSession
}

func (q *Queue) take(session string) {
	q.running++
	q.bySession[session]++
}

// grant gives free slots to the waiting requests in turn: the first principal in turns with a
// session that may start one, and its first such session in its turns, takes that session's
// oldest request's slot; the session goes to the back of its principal's turns, and the
// principal to the back of the queue's.
func (q *Queue) grant() {
	for q.running < q.max {
		i, j := q.next()
		if i < 0 {
			return
		}
		name := q.turns[i]
		p := q.principals[name]
		session := p.turns[j]
		w := p.lines[session][0]
		p.lines[session] = p.lines[session][1:]
		q.waiting--
		q.take(session)
		w.granted = true
		close(w.ready)
		p.turns = slices.Delete(p.turns, j, j+1)
		if len(p.lines[session]) > 0 {
			p.turns = append(p.turns, session)
		} else {
			delete(p.lines, session)
		}
		q.turns = slices.Delete(q.turns, i, i+1)
		if len(p.turns) > 0 {
			q.turns = append(q.turns, name)
		} else {
			delete(q.principals, name)
		}
	}
}

// next finds the request whose turn it is: the index in q.turns of its principal and in that
// principal's turns of its session; -1 when no waiting session may start one.
func (q *Queue) next() (int, int) {
	for i, name := range q.turns {
		for j, session := range q.principals[name].turns {
			if q.free(session) {
				return i, j
			}
		}
	}
	return -1, -1
}

// leave takes a request that gave up out of its session's line.
func (q *Queue) leave(s Sender, w *waiter) {
	p := q.principals[s.Principal]
	if p == nil {
		return
	}
	line := p.lines[s.Session]
	if i := slices.Index(line, w); i >= 0 {
		line = slices.Delete(line, i, i+1)
		q.waiting--
	}
	if len(line) > 0 {
		p.lines[s.Session] = line
		return
	}
	delete(p.lines, s.Session)
	if i := slices.Index(p.turns, s.Session); i >= 0 {
		p.turns = slices.Delete(p.turns, i, i+1)
	}
	if len(p.turns) == 0 {
		delete(q.principals, s.Principal)
		if i := slices.Index(q.turns, s.Principal); i >= 0 {
			q.turns = slices.Delete(q.turns, i, i+1)
		}
	}
}

// Depth is how many requests wait now and how many ever have.
func (q *Queue) Depth() (waiting int, waited uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.waiting, q.waited
}
