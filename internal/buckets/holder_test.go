package buckets

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dsh-dev/projectmcp/internal/testenv"
)

var env testenv.Lazy

func TestMain(m *testing.M) {
	code := m.Run()
	env.Stop()
	os.Exit(code)
}

// ledger records who served which bucket when, and fails the test the moment two replicas
// would serve one bucket at once: a bucket is taken only after its last holder's Release has
// returned, or after that holder lost it.
type ledger struct {
	t       *testing.T
	mu      sync.Mutex
	serving map[int]string // bucket → the replica serving it (from Acquired to Release's start)
	busy    map[int]string // bucket → the replica whose Release runs
	epochs  map[int]int64  // bucket → the epoch it was last taken in
}

func (l *ledger) acquired(who string, k int, epoch int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if epoch <= l.epochs[k] {
		l.t.Errorf("%s took bucket %d in epoch %d, after epoch %d", who, k, epoch, l.epochs[k])
	}
	l.epochs[k] = epoch
	if other, ok := l.serving[k]; ok {
		l.t.Errorf("%s took bucket %d while %s serves it", who, k, other)
	}
	if other, ok := l.busy[k]; ok {
		l.t.Errorf("%s took bucket %d while %s still stops its projects", who, k, other)
	}
	l.serving[k] = who
}

func (l *ledger) release(who string, k int, stop func()) {
	l.mu.Lock()
	if l.serving[k] == who {
		delete(l.serving, k)
	}
	l.busy[k] = who
	l.mu.Unlock()
	stop()
	l.mu.Lock()
	delete(l.busy, k)
	l.mu.Unlock()
}

func (l *ledger) count(who string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, w := range l.serving {
		if w == who {
			n++
		}
	}
	return n
}

// replica is one Holder run as a replica would run it.
type replica struct {
	name   string
	h      *Holder
	cancel context.CancelFunc
	done   chan struct{}
	cut    *atomic.Bool // when set, every API call fails (a replica cut off from the API server)
}

const (
	testBuckets = 12
	lease       = 3 * time.Second
	renew       = 2 * time.Second
	retry       = 250 * time.Millisecond
)

func startReplica(t *testing.T, c client.Client, ns, name string, l *ledger) *replica {
	t.Helper()
	return startReplicaStopping(t, c, ns, name, l, 50*time.Millisecond)
}

// startReplicaStopping is startReplica whose Release takes stopping (a bucket's projects take
// that long to stop).
func startReplicaStopping(t *testing.T, c client.Client, ns, name string, l *ledger, stopping time.Duration) *replica {
	t.Helper()
	cut := &atomic.Bool{}
	r := &replica{name: name, done: make(chan struct{}), cut: cut}
	h, err := New(Config{
		Client: cutClient{Client: c, cut: cut}, Namespace: ns, Identity: name, Address: name + ":8080",
		Buckets: testBuckets, LeaseDuration: lease, RenewDeadline: renew, RetryPeriod: retry,
		Acquired: func(k int, epoch int64) { l.acquired(name, k, epoch) },
		Release: func(ctx context.Context, k int) error {
			l.release(name, k, func() {
				// Stopping a bucket's projects takes a moment, whatever ctx says (as
				// Reconciler.BucketReleased stops them past its bound).
				time.Sleep(stopping)
			})
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	r.h = h
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { defer close(r.done); h.Run(ctx) }()
	t.Cleanup(r.stop)
	return r
}

func (r *replica) stop() {
	r.cancel()
	<-r.done
}

// cutClient fails every call while cut is set.
type cutClient struct {
	client.Client
	cut *atomic.Bool
}

var errCut = errors.New("cut off from the API server")

func (c cutClient) List(ctx context.Context, l client.ObjectList, opts ...client.ListOption) error {
	if c.cut.Load() {
		return errCut
	}
	return c.Client.List(ctx, l, opts...)
}

func (c cutClient) Update(ctx context.Context, o client.Object, opts ...client.UpdateOption) error {
	if c.cut.Load() {
		return errCut
	}
	return c.Client.Update(ctx, o, opts...)
}

func (c cutClient) Create(ctx context.Context, o client.Object, opts ...client.CreateOption) error {
	if c.cut.Load() {
		return errCut
	}
	return c.Client.Create(ctx, o, opts...)
}

func (c cutClient) Delete(ctx context.Context, o client.Object, opts ...client.DeleteOption) error {
	if c.cut.Load() {
		return errCut
	}
	return c.Client.Delete(ctx, o, opts...)
}

func waitFor(t *testing.T, within time.Duration, what string, ok func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !ok() {
		if time.Since(start) > within {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

func spread(rs ...*replica) string {
	s := ""
	for _, r := range rs {
		s += fmt.Sprintf(" %s=%d", r.name, r.h.Held())
	}
	return s
}

func balanced(rs ...*replica) bool {
	total, share := 0, FairShare(testBuckets, len(rs))
	for _, r := range rs {
		n := r.h.Held()
		if n > share || n < share-1 {
			return false
		}
		total += n
	}
	return total == testBuckets
}

// Replicas share the buckets fairly, never serve one bucket twice, hand buckets to a replica
// that joins, take over those of one cut off once its Leases expire, and those of one that
// stops at once.
func TestHoldersShareHandOffAndFailOver(t *testing.T) {
	e := env.Get(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "buckets-"}}
	if err := e.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	l := &ledger{t: t, serving: map[int]string{}, busy: map[int]string{}, epochs: map[int]int64{}}
	a := startReplica(t, e.Client, ns.Name, "a", l)
	waitFor(t, 10*time.Second, "one replica holds every bucket"+spread(a), func() bool { return a.h.Held() == testBuckets })
	select {
	case <-a.h.Settled():
	default:
		t.Fatal("a replica holding its share is not settled")
	}
	for k := range testBuckets {
		if epoch, ok := a.h.Serving(k); !ok || epoch < 1 {
			t.Fatalf("bucket %d: serving %v in epoch %d", k, ok, epoch)
		}
	}

	b := startReplica(t, e.Client, ns.Name, "b", l)
	c := startReplica(t, e.Client, ns.Name, "c", l)
	waitFor(t, 15*time.Second, "three replicas share the buckets:"+spread(a, b, c), func() bool { return balanced(a, b, c) })
	waitFor(t, 5*time.Second, "each replica sees every holder's address", func() bool {
		for k := range testBuckets {
			addr, ok := c.h.Address(k)
			if !ok || (addr != "a:8080" && addr != "b:8080" && addr != "c:8080") {
				return false
			}
		}
		return true
	})
	for _, host := range []string{"a", "b", "c"} {
		if !c.h.Replica(host) {
			t.Errorf("a live replica's host %q is not known as a replica's", host)
		}
	}
	if c.h.Replica("d") {
		t.Error("a host no Lease names is known as a replica's")
	}
	for k := range testBuckets {
		addr, _ := a.h.Address(k)
		if _, mine := a.h.Serving(k); mine != (addr == "a:8080") {
			t.Fatalf("bucket %d: a serves it %v, and sees its holder at %q", k, mine, addr)
		}
	}

	// A replica cut off from the API server stops serving within the renew deadline; the
	// others take its buckets once its Leases expire.
	b.cut.Store(true)
	waitFor(t, renew+2*retry+time.Second, "the cut replica stops serving", func() bool { return b.h.Held() == 0 })
	took := waitFor(t, lease+renew+5*time.Second, "the others take the cut replica's buckets:"+spread(a, c), func() bool { return balanced(a, c) })
	t.Logf("a cut replica's buckets were served again %s after it stopped", took)
	b.stop()

	// A replica that stops hands its buckets off at once: the others take them well before
	// its Leases would expire.
	before := c.h.Held()
	stopped := time.Now()
	c.stop()
	if c.h.Held() != 0 {
		t.Fatal("a stopped replica still serves buckets")
	}
	took = waitFor(t, lease, "the last replica takes the stopped one's "+fmt.Sprint(before)+" buckets", func() bool { return a.h.Held() == testBuckets })
	// The stopped replica followed the Leases until the next holder had them: what reached it
	// while it stopped went on to the holder.
	for k := range testBuckets {
		if addr, ok := c.h.Address(k); !ok || addr != "a:8080" {
			t.Errorf("after it stopped, the replica sees bucket %d at %q (%v), not at its next holder's address", k, addr, ok)
		}
	}
	t.Logf("a stopped replica's buckets were served again %s after it stopped (%s after Stop began)", took, time.Since(stopped))

	var leases coordinationv1.LeaseList
	if err := e.Client.List(context.Background(), &leases, client.InNamespace(ns.Name)); err != nil {
		t.Fatal(err)
	}
	for _, le := range leases.Items {
		if le.Labels[LabelReplica] == "true" && le.Name != ReplicaPrefix+"a" {
			// b's (cut off, never deleted its own) goes once it has expired; c deleted its own.
			waitFor(t, 2*lease, "the Lease of a replica gone is deleted: "+le.Name, func() bool {
				err := e.Client.Get(context.Background(), client.ObjectKeyFromObject(&le), &coordinationv1.Lease{})
				return err != nil
			})
		}
	}
	waitFor(t, 2*lease, "a replica gone is no longer known as one", func() bool { return !a.h.Replica("b") && !a.h.Replica("c") })
	if l.count("a") != testBuckets {
		t.Fatalf("the ledger has a serving %d buckets", l.count("a"))
	}
}

// A replica that loses its buckets (cut off from the API server past the renew deadline) and
// can take them back once it is reachable again waits until it has stopped their projects:
// taking a bucket while the last tenure's Release still runs would have that Release stop
// what the new tenure builds (the ledger fails the test if a bucket is taken while busy).
func TestLostBucketIsTakenBackOnlyOnceStopped(t *testing.T) {
	e := env.Get(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "buckets-"}}
	if err := e.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	l := &ledger{t: t, serving: map[int]string{}, busy: map[int]string{}, epochs: map[int]int64{}}
	const stopping = 2 * lease // longer than the Leases take to expire
	a := startReplicaStopping(t, e.Client, ns.Name, "a", l, stopping)
	waitFor(t, 10*time.Second, "one replica holds every bucket", func() bool { return a.h.Held() == testBuckets })
	a.cut.Store(true)
	waitFor(t, renew+2*retry+time.Second, "the cut replica loses its buckets", func() bool { return a.h.Held() == 0 })
	lost := time.Now()
	a.cut.Store(false)
	took := waitFor(t, stopping+lease+5*time.Second, "the replica takes its buckets back", func() bool { return a.h.Held() == testBuckets })
	if took < stopping-retry {
		t.Errorf("the buckets were taken back %s after they were lost, before their projects had stopped (%s)", took, stopping)
	}
	t.Logf("lost at %s, taken back %s later", lost.Format(time.StampMilli), took)
}
