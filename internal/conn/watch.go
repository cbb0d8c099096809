package conn

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"time"
)

// A watch keeps a Ready session (its lister's) until the session ends. The SDK tells a client
// session's end only to a caller of ClientSession.Wait, so serve's goroutine waits there, and
// it is the only goroutine an idle connection's watch holds. Everything else that ends the
// session or asks work of it comes as a call from another goroutine: the Conn's end, the
// server process's exit, a request that saw the session gone, the server's list_changed, the
// probe and re-list timers. Work (a probe, a re-list, the session's close) runs on the
// watch's worker: one goroutine at most, started when work is asked for and gone once none
// is left, so the work never overlaps and a list_changed handled by the SDK's reader never
// waits for a re-list that needs that reader.
type watch struct {
	c      *Conn
	ctx    context.Context
	l      *lister
	ep     *endpoint
	digest [sha256.Size]byte // of the pages the last listing saw (refresh)

	probe, relist, soon *time.Timer // probe is nil when the re-lists are the probes
	afterEnd, afterExit func() bool // stop the calls that the Conn's end and the process's exit make

	mu         sync.Mutex
	due        chores    // asked for and not yet begun
	failure    error     // asked to end the session, and why
	why        error     // why the worker ended the session
	working    bool      // the worker runs
	stopping   bool      // serve has seen the session end: no worker starts again
	armed      bool      // soon waits to re-list
	lastRelist time.Time // when the last re-list began
	worker     sync.WaitGroup
}

// chores are the work a watch's worker is asked for.
type chores uint8

const (
	probeChore    chores = 1 << iota // a health probe
	backstopChore                    // the backstop re-list, every RelistInterval
	relistChore                      // a re-list a list_changed (or a caller) asked for
	deadChore                        // a request saw the session gone
)

// errSessionLost is why a session a request saw gone ends.
var errSessionLost = errors.New("session lost (the server no longer knows it)")

// serve watches a Ready session (its lister's) until it dies or the Conn is destroyed. digest
// is of the lists' pages as the connect listed them (zero when listed on the typed path).
func (c *Conn) serve(ctx context.Context, l *lister, ep *endpoint, digest [sha256.Size]byte) error {
	w := &watch{c: c, ctx: ctx, l: l, ep: ep, digest: digest}
	w.start()
	return w.stop(l.session.Wait()) // returns once the session has ended, whoever ended it
}

// start arms the timers and the calls that ask for work, and takes what was asked before.
func (w *watch) start() {
	o := &w.c.opts
	w.mu.Lock() // the timers' calls read their timers under it
	if !w.l.probedByRelist() {
		w.probe = time.AfterFunc(o.HealthInterval, func() { w.tick(probeChore, o.HealthInterval) })
	}
	w.relist = time.AfterFunc(o.RelistInterval, func() { w.tick(backstopChore, o.RelistInterval) })
	w.soon = time.AfterFunc(time.Hour, func() {
		w.mu.Lock()
		w.armed = false
		w.mu.Unlock()
		w.kick()
	})
	w.soon.Stop()
	w.mu.Unlock()
	w.afterEnd = context.AfterFunc(w.ctx, func() { w.fail(w.ctx.Err()) })
	w.afterExit = w.ep.afterExit(func() { w.fail(w.ep.exitError()) })
	w.c.signals.watch(w.kick)
	w.kick() // a list_changed that came during the connect
}

// tick is a call of the probe's or the backstop's timer: it arms the timer again for interval
// and asks for chore.
func (w *watch) tick(chore chores, interval time.Duration) {
	w.mu.Lock()
	t := w.relist
	if chore == probeChore {
		t = w.probe
	}
	if !w.stopping {
		t.Reset(interval)
	}
	w.due |= chore
	w.mu.Unlock()
	w.kick()
}

// fail asks the worker to end the session, for why (the first reason given stands).
func (w *watch) fail(why error) {
	w.mu.Lock()
	if w.failure == nil {
		w.failure = why
	}
	w.mu.Unlock()
	w.kick()
}

// kick starts the worker, unless it runs or the session has ended.
func (w *watch) kick() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.working || w.stopping || w.why != nil {
		return
	}
	w.working = true
	w.worker.Add(1)
	go w.work()
}

// work does what was asked until nothing is left, or ends the session.
func (w *watch) work() {
	defer w.worker.Done()
	for {
		job, failure := w.next()
		if job == nil && failure == nil {
			return
		}
		if failure == nil {
			failure = job()
		}
		if failure != nil && w.ctx.Err() != nil {
			failure = w.ctx.Err() // the Conn ended under the job
		}
		if failure != nil {
			w.end(failure)
			return
		}
	}
}

// next is the job to do now, or the failure to end the session for; neither once nothing is
// left, and the worker then ends.
func (w *watch) next() (job func() error, failure error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.due |= w.c.signals.take()
	if w.why != nil || w.stopping {
		w.working = false
		return nil, nil
	}
	if w.failure != nil {
		return nil, w.failure
	}
	chore, wait := pick(w.due, time.Since(w.lastRelist))
	w.due &^= chore
	switch chore {
	case deadChore:
		return nil, errSessionLost
	case probeChore:
		return w.probeNow, nil
	case backstopChore:
		w.due &^= relistChore // one re-list answers both
		fallthrough
	case relistChore:
		w.lastRelist = time.Now()
		return w.refresh, nil
	}
	if wait > 0 && !w.armed {
		w.soon.Reset(wait)
		w.armed = true
	}
	w.working = false
	return nil, nil
}

// pick is the chore to do next of those due, given the time since the last re-list began:
// none when none is due, or when the only one is a re-list a list_changed asked for sooner
// than minRelistInterval after the last, which waits for the rest of the interval (wait), so
// that every other asked meanwhile joins it.
func pick(due chores, sinceRelist time.Duration) (chore chores, wait time.Duration) {
	for _, c := range []chores{deadChore, probeChore, backstopChore} {
		if due&c != 0 {
			return c, 0
		}
	}
	if due&relistChore == 0 {
		return 0, 0
	}
	if wait = minRelistInterval - sinceRelist; wait > 0 {
		return 0, wait
	}
	return relistChore, 0
}

func (w *watch) probeNow() error {
	if err := w.l.probe(w.ctx); err != nil {
		return fmt.Errorf("health check failed: %w", err)
	}
	return nil
}

func (w *watch) refresh() error { return w.c.refresh(w.ctx, w.l, &w.digest) }

// end ends the session for why: no request finds it from now on, and it is closed (which
// returns serve's Wait). A session that ended already (serve saw it) ended for its own reason:
// the job failed on it.
func (w *watch) end(why error) {
	w.mu.Lock()
	ended := w.stopping
	if !ended {
		w.why = why
	}
	w.mu.Unlock()
	if ended {
		return
	}
	w.c.forget()
	w.ep.closeSession(w.l.session, w.c.opts.Log)
}

// stop ends the watch once its session has ended (waited: what Wait said), and says why the
// session ended.
func (w *watch) stop(waited error) error {
	w.mu.Lock()
	w.stopping = true
	w.mu.Unlock()
	w.c.signals.watch(nil)
	for _, t := range []*time.Timer{w.probe, w.relist, w.soon} {
		if t != nil {
			t.Stop()
		}
	}
	w.afterEnd()
	w.afterExit()
	w.worker.Wait() // a job in progress fails on the ended session, or ends it
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.why != nil:
		return w.why
	case w.ep.exitError() != nil:
		return w.ep.exitError()
	}
	return fmt.Errorf("session closed by the server: %v", waited)
}
