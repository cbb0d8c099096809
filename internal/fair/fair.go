// Package fair shares a connection among the sessions that send on it: each may have at most
// a number of requests in flight on it (MaxCallsPerSession), and the connection at most
// another (MaxCalls). A request past either waits in its session's own line; a freed slot
// goes to the next session in turn that may take one (round robin over the sessions waiting),
// so one session's thousand calls wait behind each other, not in front of another session's
// one. Requests of no session (a connection's own: lists, pings, unsubscribes) are not queued.
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
	"sync"
	"time"
)

// Queue admits a connection's requests.
type Queue struct {
	mu         sync.Mutex
	max        int // in flight on the connection
	perSession int // in flight per session
	running    int
	bySession  map[string]int       // session → requests in flight
	lines      map[string][]*waiter // session → its requests waiting, oldest first
	turns      []string             // sessions with a request waiting, next turn first
	waiting    int
	waited     uint64 // requests that have had to wait, ever
	reported   int    // waiting, as last reported
	report     func() // tells the connection's owner the figures changed much (reportable)
}

type waiter struct {
	ready   chan struct{}
	granted bool
}

// New is a queue admitting max requests at once, perSession of them a session's; report is
// told when the requests waiting change much (reportable).
func New(max, perSession int, report func()) *Queue {
	return &Queue{max: max, perSession: perSession, report: report, bySession: map[string]int{}, lines: map[string][]*waiter{}}
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

// Acquire waits for a slot for session's request; it fails only when ctx ends first. The
// returned wait is how long it waited.
func (q *Queue) Acquire(ctx context.Context, session string) (wait time.Duration, err error) {
	q.mu.Lock()
	if len(q.lines[session]) == 0 && q.free(session) {
		q.take(session)
		q.mu.Unlock()
		return 0, nil
	}
	w := &waiter{ready: make(chan struct{})}
	if len(q.lines[session]) == 0 {
		q.turns = append(q.turns, session)
	}
	q.lines[session] = append(q.lines[session], w)
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
		q.releaseLocked(session)
	} else {
		q.leave(session, w)
	}
	return time.Since(start), fmt.Errorf("waiting for a turn on the connection (%d of this session's requests in flight, at most %d; %d on the connection, at most %d): %w",
		q.bySession[session], q.perSession, q.running, q.max, context.Cause(ctx))
}

// Release frees a slot Acquire gave session.
func (q *Queue) Release(session string) {
	q.mu.Lock()
	defer q.unlock()
	q.releaseLocked(session)
}

func (q *Queue) releaseLocked(session string) {
	q.running--
	if q.bySession[session]--; q.bySession[session] <= 0 {
		delete(q.bySession, session)
	}
	q.grant()
}

// free reports whether session may start a request now.
func (q *Queue) free(session string) bool {
	return q.running < q.max && q.bySession[session] < q.perSession
}

func (q *Queue) take(session string) {
	q.running++
	q.bySession[session]++
}

// grant gives free slots to the waiting sessions in turn: the first in turns that may start
// one takes its oldest request's slot and goes to the back of the turns.
func (q *Queue) grant() {
	for q.running < q.max {
		i := 0
		for i < len(q.turns) && !q.free(q.turns[i]) {
			i++
		}
		if i == len(q.turns) {
			return
		}
		session := q.turns[i]
		w := q.lines[session][0]
		q.lines[session] = q.lines[session][1:]
		q.waiting--
		q.take(session)
		w.granted = true
		close(w.ready)
		q.turns = append(q.turns[:i], q.turns[i+1:]...)
		if len(q.lines[session]) > 0 {
			q.turns = append(q.turns, session)
		} else {
			delete(q.lines, session)
		}
	}
}

// leave takes a request that gave up out of its session's line.
func (q *Queue) leave(session string, w *waiter) {
	line := q.lines[session]
	for i, x := range line {
		if x == w {
			line = append(line[:i], line[i+1:]...)
			q.waiting--
			break
		}
	}
	if len(line) > 0 {
		q.lines[session] = line
		return
	}
	delete(q.lines, session)
	for i, s := range q.turns {
		if s == session {
			q.turns = append(q.turns[:i], q.turns[i+1:]...)
			break
		}
	}
}

// Depth is how many requests wait now and how many ever have.
func (q *Queue) Depth() (waiting int, waited uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.waiting, q.waited
}
