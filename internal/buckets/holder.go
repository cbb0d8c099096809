package buckets

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dsh-dev/projectmcp/internal/metrics"
)

// Config configures a Holder.
type Config struct {
	// Client reads and writes the Leases; it should not be a cache (a stale read delays a
	// takeover by a tick, and a write needs the Lease's current version anyway).
	Client    client.Client
	Namespace string
	// Identity names this replica in the Leases; unique among the replicas (pod name and a
	// random suffix).
	Identity string
	// Address is this replica's gateway address (host:port), written on the Leases it holds.
	Address string
	Buckets int
	// Pins puts projects in the buckets (NewPins(Buckets) when nil).
	Pins *Pins
	// LeaseDuration, RenewDeadline and RetryPeriod are leader election's: how long a Lease
	// not renewed stays its holder's, how long the holder keeps trying to renew before it
	// stops serving the bucket, and how often it renews and others try to take it.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Acquired is called when the replica starts serving bucket k, in the epoch EpochOf
	// gives. It must not block.
	Acquired func(k int, epoch int64)
	// Release is called when the replica stops serving bucket k: it is being handed off
	// (rebalance, Stop) or was lost (not renewed in time). It returns once the bucket's
	// projects are stopped; ctx ends when the Lease may already be another's (a loss) or the
	// handoff's bound (HandoffTimeout) has passed.
	Release func(ctx context.Context, k int) error
	// HandoffTimeout bounds one Release of a bucket handed off (default 30 s).
	HandoffTimeout time.Duration
	// Linger is how long a stopping Holder goes on following the Leases after its last
	// bucket is released, for the requests still reaching it: those of replicas whose view
	// is a retry period old, and those waiting for the next holders, who take the buckets at
	// their next tick and are seen here at this one's (default: four retry periods).
	Linger time.Duration
	Clock  clock.WithTicker
	Log    logr.Logger
}

// Holder takes, renews and hands off bucket Leases. Run it once; Serving and Owner are safe
// for concurrent use.
type Holder struct {
	cfg Config

	// Owned by the run goroutine.
	held     map[int]*holding
	observed map[string]observation // Lease name → when its record last changed, as seen here
	// releasing: buckets lost whose Release still runs → closed when it has returned.
	releasing map[int]chan struct{}
	ticks     int

	serving   atomic.Pointer[map[int]served]       // the buckets served now
	addresses atomic.Pointer[map[int]string]       // every held bucket → its holder's address
	peers     atomic.Pointer[map[string]time.Time] // the hosts of replicas' addresses → when last seen live
	handoff   sync.WaitGroup                       // Release calls of buckets handed off
	ready     chan struct{}                        // closed after the first tick's moves
	readyOn   sync.Once
	wake      chan struct{} // a Release returned (nudge)
	stopping  chan struct{} // closed when Run's context ends
	done      chan struct{} // closed when Run has handed everything off and returned
}

// holding is one bucket the replica holds.
type holding struct {
	lease    *coordinationv1.Lease
	renewed  time.Time     // when a renewal last succeeded
	draining bool          // Release runs: the Lease is kept (renewed) until it returns
	released chan struct{} // closed when that Release has returned
	epoch    int64
}

// observation is when a Lease's record was last seen to change (its resource version), by
// this replica's clock: expiry is judged by that, not by the holder's clock, as leader
// election does.
type observation struct {
	version string
	at      time.Time
}

// New makes a Holder; Run starts it.
func New(cfg Config) (*Holder, error) {
	switch {
	case cfg.Buckets < 1:
		return nil, fmt.Errorf("buckets: %d buckets: want at least 1", cfg.Buckets)
	case cfg.LeaseDuration <= cfg.RenewDeadline+cfg.RetryPeriod || cfg.RenewDeadline <= cfg.RetryPeriod || cfg.RetryPeriod <= 0:
		return nil, fmt.Errorf("buckets: want lease duration (%s) > renew deadline (%s) + retry period (%s), and the deadline over the period",
			cfg.LeaseDuration, cfg.RenewDeadline, cfg.RetryPeriod)
	case cfg.Identity == "":
		return nil, errors.New("buckets: no identity")
	}
	if cfg.Pins == nil {
		cfg.Pins = NewPins(cfg.Buckets)
	}
	if cfg.Linger <= 0 {
		cfg.Linger = 4 * cfg.RetryPeriod
	}
	if cfg.HandoffTimeout <= 0 {
		cfg.HandoffTimeout = 30 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Acquired == nil {
		cfg.Acquired = func(int, int64) {}
	}
	if cfg.Release == nil {
		cfg.Release = func(context.Context, int) error { return nil }
	}
	h := &Holder{cfg: cfg, held: map[int]*holding{}, observed: map[string]observation{}, releasing: map[int]chan struct{}{},
		ready: make(chan struct{}), wake: make(chan struct{}, 1), stopping: make(chan struct{}), done: make(chan struct{})}
	h.publish()
	return h, nil
}

// EpochOf is the epoch a bucket Lease's holder serves it in: the Lease's creation time in
// seconds times 10⁶ plus its transitions. Every new holder's is higher than the last one's,
// also when the Lease was deleted and made again (status.owner's fencing rule relies on it).
func EpochOf(l *coordinationv1.Lease) int64 {
	return l.CreationTimestamp.Unix()*1_000_000 + int64(ptr.Deref(l.Spec.LeaseTransitions, 0))
}

// Serving reports whether this replica serves bucket k now, and the epoch it serves it in.
//
// A bucket stops being served at its renew deadline even when the run goroutine has not
// noticed yet (a tick stuck on a slow API server): Serving reads the clock.
func (h *Holder) Serving(k int) (epoch int64, ok bool) {
	b, ok := (*h.serving.Load())[k]
	if !ok || !h.cfg.Clock.Now().Before(b.until) {
		return 0, false
	}
	return b.epoch, true
}

// Tenure is the epoch of this replica's tenure of bucket k while it holds it (not lost, not
// being handed off), whatever Serving says of a late renewal.
func (h *Holder) Tenure(k int) (epoch int64, ok bool) {
	b, ok := (*h.serving.Load())[k]
	return b.epoch, ok
}

// served is a bucket as Serving sees it: its epoch, and the renew deadline of its last
// renewal.
type served struct {
	epoch int64
	until time.Time
}

// Address is the gateway address of the replica holding bucket k, as last seen; false when
// nobody holds it (or its holder has no address).
func (h *Holder) Address(k int) (string, bool) {
	addr, ok := (*h.addresses.Load())[k]
	return addr, ok && addr != ""
}

// Held is how many buckets this replica serves now.
func (h *Holder) Held() int { return len(*h.serving.Load()) }

// Settled is closed once the Holder has made its first moves: the buckets it could take at
// start are taken (readiness waits for it).
func (h *Holder) Settled() <-chan struct{} { return h.ready }

// Stopping is closed when Run's context has ended: the replica is handing its buckets off.
func (h *Holder) Stopping() <-chan struct{} { return h.stopping }

// Done is closed when Run has returned: every bucket handed off.
func (h *Holder) Done() <-chan struct{} { return h.done }

// Pins is what puts projects in buckets.
func (h *Holder) Pins() *Pins { return h.cfg.Pins }

// Identity is this replica's name in the Leases.
func (h *Holder) Identity() string { return h.cfg.Identity }

// Advertised is this replica's gateway address, as it writes it on its Leases.
func (h *Holder) Advertised() string { return h.cfg.Address }

// Run takes and keeps buckets until ctx ends, then hands every held bucket off (each Release
// returns before its Lease is released) and deletes the replica's own Lease.
func (h *Holder) Run(ctx context.Context) {
	defer close(h.done)
	t := h.cfg.Clock.NewTicker(h.cfg.RetryPeriod)
	defer t.Stop()
	for ctx.Err() == nil {
		h.tick(ctx, true)
		select {
		case <-ctx.Done():
		case <-t.C():
		case <-h.wake:
		}
	}
	h.stop(t)
}

// stop deletes the replica's own Lease, so that the others count it gone and take what it
// releases, and hands every bucket off. Until the last is released, and for Linger after, it
// goes on ticking without taking anything: renewing what still drains, and following the
// others' Leases, so that what reaches this replica meanwhile is proxied to the next holders.
func (h *Holder) stop(t clock.Ticker) {
	close(h.stopping)
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.HandoffTimeout+h.cfg.RenewDeadline+h.cfg.Linger)
	defer cancel()
	replica := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: ReplicaPrefix + h.cfg.Identity, Namespace: h.cfg.Namespace}}
	if err := h.cfg.Client.Delete(ctx, replica); err != nil && !apierrors.IsNotFound(err) {
		h.cfg.Log.Info("deleting the replica Lease failed; it expires instead", "error", err.Error())
	}
	for k, b := range h.held {
		if !b.draining {
			h.handOff(k)
		}
	}
	var handedOff time.Time
	for ctx.Err() == nil {
		h.tick(ctx, false)
		if len(h.held) == 0 {
			now := h.cfg.Clock.Now()
			if handedOff.IsZero() {
				handedOff = now
			}
			if now.Sub(handedOff) >= h.cfg.Linger {
				break
			}
		}
		select {
		case <-ctx.Done():
		case <-t.C():
		case <-h.wake:
		}
	}
	h.handoff.Wait()
	h.publish()
}

// tick is one round: renew what is held, count the replicas, and (move) move toward the fair
// share.
func (h *Holder) tick(parent context.Context, move bool) {
	// A tick never outlasts half the renew deadline, whatever the API server does: the renew
	// deadline is checked at the next one (and by Serving meanwhile, by the clock). A slow
	// API server gets that long to answer, as leader election gives a renewal its whole renew
	// deadline: bounded by a retry period, every renewal failed while a busy API server took
	// seconds to answer, and the replicas lost buckets to it.
	ctx, cancel := context.WithTimeout(parent, tickBound(h.cfg))
	defer cancel()
	now := h.cfg.Clock.Now()
	leases, err := h.list(ctx)
	if err != nil {
		h.cfg.Log.Info("listing the bucket Leases failed", "error", err.Error())
	}
	if move { // a stopping replica has deleted its Lease
		h.renewReplica(ctx, leases)
	}
	h.collect(ctx, leases, now)
	h.renewHeld(ctx, leases, now)
	h.releaseDrained(ctx)
	h.ticks++
	// The first tick only announces the replica: moving at once, before the others have seen
	// it (or it them), would take every bucket at a start of several replicas and hand most
	// of them off a tick later.
	if move && err == nil && ctx.Err() == nil && h.ticks > 1 {
		v := h.view(leases, now)
		m := plan(v)
		for _, k := range m.release {
			h.handOff(k)
		}
		for _, k := range m.take {
			h.take(ctx, k, leases[LeaseName(k)], now)
		}
		h.readyOn.Do(func() { close(h.ready) })
	}
	h.publishAddresses(leases, now)
	h.publishPeers(leases, now)
	h.publish()
}

// list reads the namespace's Leases, by name.
func (h *Holder) list(ctx context.Context) (map[string]*coordinationv1.Lease, error) {
	var list coordinationv1.LeaseList
	if err := h.cfg.Client.List(ctx, &list, client.InNamespace(h.cfg.Namespace)); err != nil {
		return nil, err
	}
	out := make(map[string]*coordinationv1.Lease, len(list.Items))
	for name := range h.observed { // Leases gone (replicas' deleted ones) are forgotten
		if !slices.ContainsFunc(list.Items, func(l coordinationv1.Lease) bool { return l.Name == name }) {
			delete(h.observed, name)
		}
	}
	for i := range list.Items {
		l := &list.Items[i]
		out[l.Name] = l
		if o, ok := h.observed[l.Name]; !ok || o.version != l.ResourceVersion {
			h.observed[l.Name] = observation{version: l.ResourceVersion, at: h.cfg.Clock.Now()}
		}
	}
	return out, nil
}

// live reports whether a Lease is held: it names a holder, and its record changed less than
// its duration ago (by this replica's clock).
func (h *Holder) live(l *coordinationv1.Lease, now time.Time) bool {
	if l == nil || ptr.Deref(l.Spec.HolderIdentity, "") == "" {
		return false
	}
	d := time.Duration(ptr.Deref(l.Spec.LeaseDurationSeconds, 0)) * time.Second
	return now.Sub(h.observed[l.Name].at) < d
}

// view is what plan decides over.
func (h *Holder) view(leases map[string]*coordinationv1.Lease, now time.Time) view {
	v := view{me: h.cfg.Identity, buckets: h.cfg.Buckets, holders: map[int]string{}, mine: map[int]bool{}}
	for name, l := range leases {
		switch {
		case l.Labels[LabelReplica] == "true" && name != ReplicaPrefix+h.cfg.Identity && h.live(l, now):
			v.replicas++
		case l.Labels[LabelBucket] != "":
			k, err := strconv.Atoi(l.Labels[LabelBucket])
			if err == nil && k >= 0 && k < h.cfg.Buckets && name == LeaseName(k) && h.live(l, now) {
				v.holders[k] = *l.Spec.HolderIdentity
			}
		}
	}
	v.replicas++ // this one
	for k, b := range h.held {
		v.holders[k] = h.cfg.Identity
		if b.draining {
			v.draining++
		} else {
			v.mine[k] = true
		}
	}
	return v
}

// renewReplica keeps the replica's own Lease, by which the others count it.
func (h *Holder) renewReplica(ctx context.Context, leases map[string]*coordinationv1.Lease) {
	name := ReplicaPrefix + h.cfg.Identity
	l := leases[name]
	if l == nil {
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: h.cfg.Namespace,
			Labels: map[string]string{LabelReplica: "true"}}}
		h.stamp(l, false)
		if err := h.cfg.Client.Create(ctx, l); err != nil && !apierrors.IsAlreadyExists(err) {
			h.cfg.Log.Info("creating the replica Lease failed", "error", err.Error())
		}
		return
	}
	h.stamp(l, false)
	if err := h.cfg.Client.Update(ctx, l); err != nil {
		h.cfg.Log.Info("renewing the replica Lease failed", "error", err.Error())
	}
}

// collect deletes the replica Leases of replicas gone (not renewed for their duration), so
// that restarts, each with an identity of its own, leave nothing behind. The version
// precondition spares a Lease renewed meanwhile.
func (h *Holder) collect(ctx context.Context, leases map[string]*coordinationv1.Lease, now time.Time) {
	for name, l := range leases {
		if l.Labels[LabelReplica] != "true" || name == ReplicaPrefix+h.cfg.Identity || h.live(l, now) {
			continue
		}
		err := h.cfg.Client.Delete(ctx, l, client.Preconditions{ResourceVersion: ptr.To(l.ResourceVersion)})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			h.cfg.Log.Info("deleting the Lease of a replica gone failed", "lease", name, "error", err.Error())
		}
	}
}

// stamp makes l this replica's, renewed now; acquire also counts a transition.
func (h *Holder) stamp(l *coordinationv1.Lease, acquire bool) {
	now := metav1.NewMicroTime(h.cfg.Clock.Now())
	if ptr.Deref(l.Spec.HolderIdentity, "") != h.cfg.Identity || acquire {
		l.Spec.AcquireTime = &now
	}
	if acquire {
		l.Spec.LeaseTransitions = ptr.To(ptr.Deref(l.Spec.LeaseTransitions, 0) + 1)
	}
	l.Spec.HolderIdentity = ptr.To(h.cfg.Identity)
	l.Spec.LeaseDurationSeconds = ptr.To(int32((h.cfg.LeaseDuration + time.Second - 1) / time.Second))
	l.Spec.RenewTime = &now
	if h.cfg.Address != "" {
		if l.Annotations == nil {
			l.Annotations = map[string]string{}
		}
		l.Annotations[AnnotationAddress] = h.cfg.Address
	}
}

// renewHeld renews every held bucket. A bucket whose Lease is another's now, or that could not
// be renewed for the renew deadline, is lost: it stops being served at once, before the Lease
// can expire for the others.
func (h *Holder) renewHeld(ctx context.Context, leases map[string]*coordinationv1.Lease, now time.Time) {
	var renew []int
	for k, b := range h.held {
		l := leases[LeaseName(k)]
		switch {
		case leases != nil && l == nil:
			h.lose(k, "its Lease is gone")
		case l != nil && (ptr.Deref(l.Spec.HolderIdentity, "") != h.cfg.Identity || EpochOf(l) != b.epoch):
			h.lose(k, "another replica holds its Lease")
		default:
			renew = append(renew, k)
		}
	}
	renewed := h.renewAll(ctx, leases, renew)
	after := h.cfg.Clock.Now() // the renewals may have taken a while: judge the deadline now
	for _, k := range renew {
		b := h.held[k]
		if l := renewed[k]; l != nil {
			b.lease, b.renewed = l, now
			continue
		}
		if after.Sub(b.renewed) >= h.cfg.RenewDeadline {
			h.lose(k, "its Lease was not renewed within the renew deadline")
		}
	}
}

// renewAll updates the Leases of buckets ks, renewParallel at a time: renewing them one after
// another, a slow API server made a tick's later renewals miss the tick's bound every time, and
// the replica lost buckets it could have kept. It returns the Leases renewed, by bucket.
func (h *Holder) renewAll(ctx context.Context, leases map[string]*coordinationv1.Lease, ks []int) map[int]*coordinationv1.Lease {
	out := make([]*coordinationv1.Lease, len(ks))
	turns := make(chan struct{}, renewParallel)
	var wg sync.WaitGroup
	for i, k := range ks {
		l := leases[LeaseName(k)]
		if l == nil {
			continue // the list failed: not renewed this tick
		}
		wg.Go(func() {
			turns <- struct{}{}
			defer func() { <-turns }()
			if ctx.Err() != nil {
				return
			}
			l := l.DeepCopy()
			h.stamp(l, false)
			if err := h.cfg.Client.Update(ctx, l); err == nil {
				out[i] = l
			}
		})
	}
	wg.Wait()
	renewed := make(map[int]*coordinationv1.Lease, len(ks))
	for i, l := range out {
		if l != nil {
			renewed[ks[i]] = l
		}
	}
	return renewed
}

// tickBound is how long one tick may take: half the renew deadline, but no more than the
// lease duration leaves after the renew deadline and a retry period (a bucket whose renewal
// failed in a long tick is then lost at its end with a retry period left to stop its
// projects, as with a tick of one retry period), and a retry period at least.
func tickBound(cfg Config) time.Duration {
	return max(cfg.RetryPeriod, min(cfg.RenewDeadline/2, cfg.LeaseDuration-cfg.RenewDeadline-cfg.RetryPeriod))
}

// renewParallel is how many Lease renewals one tick has in flight at once.
const renewParallel = 16

// take tries to become bucket k's holder: creating its Lease, or updating one nobody holds;
// the API server's version check lets only one replica win.
func (h *Holder) take(ctx context.Context, k int, l *coordinationv1.Lease, now time.Time) {
	if h.stillReleasing(k) {
		return // its projects are still being stopped here: a new tenure would be stopped with them
	}
	var err error
	if l == nil {
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: LeaseName(k), Namespace: h.cfg.Namespace,
			Labels: map[string]string{LabelBucket: strconv.Itoa(k)}}}
		h.stamp(l, true)
		err = h.cfg.Client.Create(ctx, l)
	} else {
		l = l.DeepCopy()
		h.stamp(l, true)
		err = h.cfg.Client.Update(ctx, l)
	}
	if err != nil {
		if !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) {
			h.cfg.Log.Info("taking a bucket failed", "bucket", k, "error", err.Error())
		}
		return
	}
	epoch := EpochOf(l)
	h.held[k] = &holding{lease: l, renewed: now, epoch: epoch}
	h.publish()
	metrics.BucketMoves.WithLabelValues("taken").Inc()
	h.cfg.Log.Info("Took a bucket", "bucket", k, "epoch", epoch)
	h.cfg.Acquired(k, epoch)
}

// handOff stops serving bucket k and releases its Lease once Release has returned; until then
// the Lease is renewed, so nobody else starts its projects.
func (h *Holder) handOff(k int) {
	b := h.held[k]
	b.draining = true
	b.released = make(chan struct{})
	h.publish()
	metrics.BucketMoves.WithLabelValues("handed_off").Inc()
	h.cfg.Log.Info("Handing a bucket off", "bucket", k)
	h.handoff.Add(1)
	go func() {
		defer h.handoff.Done()
		defer h.nudge()
		defer close(b.released)
		// Until Release says the projects are stopped, the Lease stays this replica's (the
		// run loop renews it): releasing it early would let the next holder start servers
		// that still run here.
		for attempt := 1; ; attempt++ {
			err := h.release(k, h.cfg.HandoffTimeout)
			if err == nil {
				return
			}
			h.cfg.Log.Error(err, "Stopping a bucket's projects did not finish; the bucket stays held and is tried again", "bucket", k, "attempt", attempt)
			select {
			case <-h.stopping:
				return // the process exits: its servers go with it, and the Lease expires
			case <-time.After(h.cfg.RetryPeriod):
			}
		}
	}()
}

// release is one Release of bucket k, within bound.
func (h *Holder) release(k int, bound time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), max(bound, 0))
	defer cancel()
	return h.cfg.Release(ctx, k)
}

// lose forgets bucket k without touching its Lease, and stops its projects within what is
// left of the Lease's duration.
func (h *Holder) lose(k int, why string) {
	b := h.held[k]
	delete(h.held, k)
	h.publish()
	metrics.BucketMoves.WithLabelValues("lost").Inc()
	h.cfg.Log.Info("Lost a bucket", "bucket", k, "why", why)
	if b.draining {
		h.releasing[k] = b.released // its Release runs already
		return
	}
	left := h.cfg.LeaseDuration - h.cfg.Clock.Since(b.renewed)
	done := make(chan struct{})
	h.releasing[k] = done
	h.handoff.Add(1)
	go func() {
		defer h.handoff.Done()
		defer close(done)
		if err := h.release(k, left); err != nil {
			h.cfg.Log.Error(err, "Stopping a lost bucket's projects did not finish in time", "bucket", k)
		}
	}()
}

// stillReleasing reports whether the Release of a tenure of bucket k that ended (lost) still
// runs: until it returns, the bucket is not taken again, or the Release would stop the
// projects the new tenure builds.
func (h *Holder) stillReleasing(k int) bool {
	done, ok := h.releasing[k]
	if !ok {
		return false
	}
	select {
	case <-done:
		delete(h.releasing, k)
		return false
	default:
		return true
	}
}

// nudge has the run loop tick now rather than at the next retry period: a Release returned,
// and its Lease can go at once.
func (h *Holder) nudge() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
}

// releaseDrained releases the Leases of buckets whose Release has returned.
func (h *Holder) releaseDrained(ctx context.Context) {
	for k, b := range h.held {
		if !b.draining {
			continue
		}
		select {
		case <-b.released:
		default:
			continue
		}
		h.releaseLease(ctx, b.lease)
		delete(h.held, k)
		h.cfg.Log.Info("Released a bucket", "bucket", k)
	}
}

// releaseLease gives a Lease up at once: no holder, and a duration of one second, as
// leader election's release does.
func (h *Holder) releaseLease(ctx context.Context, l *coordinationv1.Lease) {
	l = l.DeepCopy()
	l.Spec.HolderIdentity = nil
	l.Spec.LeaseDurationSeconds = ptr.To[int32](1)
	now := metav1.NewMicroTime(h.cfg.Clock.Now())
	l.Spec.RenewTime = &now
	if err := h.cfg.Client.Update(ctx, l); err != nil {
		h.cfg.Log.Info("releasing a bucket Lease failed; it expires instead", "lease", l.Name, "error", err.Error())
	}
}

// publish makes the served buckets visible to Serving.
func (h *Holder) publish() {
	serving := make(map[int]served, len(h.held))
	for k, b := range h.held {
		if !b.draining {
			serving[k] = served{epoch: b.epoch, until: b.renewed.Add(h.cfg.RenewDeadline)}
		}
	}
	h.serving.Store(&serving)
	metrics.BucketsHeld.Set(float64(len(serving)))
	if h.addresses.Load() == nil {
		h.addresses.Store(&map[int]string{})
	}
}

// publishAddresses makes the holders' addresses visible to Address.
func (h *Holder) publishAddresses(leases map[string]*coordinationv1.Lease, now time.Time) {
	if leases == nil {
		return
	}
	addresses := map[int]string{}
	for k := range h.cfg.Buckets {
		l := leases[LeaseName(k)]
		if !h.live(l, now) {
			continue
		}
		// A Lease naming this replica is an address only while the replica serves the bucket:
		// not while it hands it off, nor after it lost it (a request would come back here).
		if b, mine := h.held[k]; *l.Spec.HolderIdentity == h.cfg.Identity && (!mine || b.draining) {
			continue
		}
		addresses[k] = l.Annotations[AnnotationAddress]
	}
	h.addresses.Store(&addresses)
}

// Replica reports whether host (an IP, as a connection's remote address has it) is the host of
// a replica's gateway address: one named by a live Lease, replica or bucket, within the last
// lease duration (a replica that stops deletes its Lease, and still proxies while it lingers).
func (h *Holder) Replica(host string) bool {
	peers := h.peers.Load()
	if peers == nil {
		return false
	}
	_, ok := (*peers)[host]
	return ok
}

// publishPeers makes the replicas' hosts visible to Replica.
func (h *Holder) publishPeers(leases map[string]*coordinationv1.Lease, now time.Time) {
	if leases == nil {
		return
	}
	peers := map[string]time.Time{}
	if old := h.peers.Load(); old != nil {
		for host, seen := range *old {
			if now.Sub(seen) < h.cfg.LeaseDuration {
				peers[host] = seen
			}
		}
	}
	for _, l := range leases {
		if !h.live(l, now) || (l.Labels[LabelReplica] == "" && l.Labels[LabelBucket] == "") {
			continue
		}
		if host, _, err := net.SplitHostPort(l.Annotations[AnnotationAddress]); err == nil {
			peers[host] = now
		}
	}
	h.peers.Store(&peers)
}
