package fair

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A session past its share waits in its own line; freed slots go round the sessions waiting,
// so a session with one request waiting is served after at most one more of the busy
// session's, not after all of them; a request that gives up leaves its line and holds nothing.
func TestQueueTakesTurns(t *testing.T) {
	var reports atomic.Int32
	q := New(2, 2, func() { reports.Add(1) })
	ctx := context.Background()
	for range 2 { // the batch session fills the connection
		if _, err := q.Acquire(ctx, one("batch")); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	start := func(session string) {
		before, _ := q.Depth()
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := q.Acquire(ctx, one(session)); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, session)
			mu.Unlock()
		}()
		eventually(t, func() bool { n, _ := q.Depth(); return n == before+1 }) // in line, in this order
	}
	start("batch")
	start("batch")
	start("batch")
	start("interactive")

	gone, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := q.Acquire(gone, one("quitter")); done <- err }()
	eventually(t, func() bool { return slices.Contains(q.turnsNow(), "quitter") })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("a request that gives up: %v", err)
	}

	served := func(n int) { eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(order) == n }) }
	q.Release(one("batch"))
	served(1)
	q.Release(one("batch"))
	served(2)
	q.Release(one("batch"))
	served(3)
	q.Release(one("interactive"))
	wg.Wait()
	want := []string{"batch", "interactive", "batch", "batch"}
	if !slices.Equal(order, want) {
		t.Fatalf("served %v, want %v", order, want)
	}
	if n, ever := q.Depth(); n != 0 || ever != 5 {
		t.Fatalf("waiting %d, ever %d; want 0 and 5", n, ever)
	}
	if reports.Load() == 0 {
		t.Fatal("the queue forming and going was never reported")
	}
}

// One session's share is MaxCallsPerSession even while the connection has room: the rest of
// its requests wait, and another session's go at once.
func TestQueuePerSessionShare(t *testing.T) {
	q := New(10, 1, nil)
	ctx := context.Background()
	if _, err := q.Acquire(ctx, one("a")); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := q.Acquire(short, one("a")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a's second request must wait for its first: %v", err)
	}
	if wait, err := q.Acquire(ctx, one("b")); err != nil || wait != 0 {
		t.Fatalf("b waited %s: %v", wait, err)
	}
}

// Turns go round the principals first, then each one's sessions: an identity with ten
// sessions waiting gets one turn for each turn of another identity's one session, not ten.
// (With turns per session, as before, alice's requests were served after all ten of
// mallory's.)
func TestQueueTurnsPerPrincipal(t *testing.T) {
	q := New(1, 10, nil)
	ctx := context.Background()
	holder := Sender{Principal: "bob", Session: "b"}
	if _, err := q.Acquire(ctx, holder); err != nil {
		t.Fatal(err)
	}
	granted := make(chan Sender, 20)
	wait := func(s Sender) {
		before, _ := q.Depth()
		go func() {
			if _, err := q.Acquire(ctx, s); err != nil {
				t.Error(err)
				return
			}
			granted <- s
		}()
		eventually(t, func() bool { n, _ := q.Depth(); return n == before+1 }) // in line, in this order
	}
	for i := range 10 {
		wait(Sender{Principal: "mallory", Session: fmt.Sprintf("m%d", i)})
	}
	wait(Sender{Principal: "alice", Session: "a"})
	wait(Sender{Principal: "alice", Session: "a"})
	var order []string
	release := holder
	for range 12 {
		q.Release(release)
		release = <-granted
		order = append(order, release.Session)
	}
	q.Release(release)
	want := []string{"m0", "a", "m1", "a", "m2", "m3", "m4", "m5", "m6", "m7", "m8", "m9"}
	if !slices.Equal(order, want) {
		t.Fatalf("served %v, want %v", order, want)
	}
	if n, _ := q.Depth(); n != 0 || len(q.turnsNow()) != 0 || len(q.principals) != 0 {
		t.Fatalf("%d waiting, turns %v, %d principals left", n, q.turnsNow(), len(q.principals))
	}
}

// one is a session that is its own principal's only one.
func one(session string) Sender { return Sender{Principal: session, Session: session} }

func TestReportable(t *testing.T) {
	for _, c := range []struct {
		waiting, reported int
		want              bool
	}{
		{0, 0, false}, {1, 0, true}, {0, 5, true}, {2, 1, true}, {3, 2, false}, {4, 2, true}, {1, 4, false}, {1000, 600, false},
	} {
		if got := reportable(c.waiting, c.reported); got != c.want {
			t.Errorf("reportable(%d, %d) = %v, want %v", c.waiting, c.reported, got, c.want)
		}
	}
}

// turnsNow are the principals waiting, in turn.
func (q *Queue) turnsNow() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return slices.Clone(q.turns)
}

func eventually(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
	}
}
