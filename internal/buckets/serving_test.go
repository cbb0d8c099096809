package buckets

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
)

func unitHolder(t *testing.T, release func(context.Context, int) error) (*Holder, *clocktesting.FakeClock) {
	t.Helper()
	clk := clocktesting.NewFakeClock(time.Now())
	h, err := New(Config{Identity: "me", Buckets: 4, LeaseDuration: time.Second, RenewDeadline: 500 * time.Millisecond,
		RetryPeriod: 10 * time.Millisecond, Clock: clk, Release: release})
	if err != nil {
		t.Fatal(err)
	}
	return h, clk
}

// A bucket stops being served at its renew deadline by the clock alone: a run loop stuck on
// the API server cannot keep it served past the point where the Lease may be another's.
func TestServingEndsAtTheRenewDeadline(t *testing.T) {
	h, clk := unitHolder(t, nil)
	h.held[2] = &holding{renewed: clk.Now(), epoch: 7}
	h.publish()
	if epoch, ok := h.Serving(2); !ok || epoch != 7 {
		t.Fatalf("just renewed: serving %v in epoch %d", ok, epoch)
	}
	clk.Step(499 * time.Millisecond)
	if _, ok := h.Serving(2); !ok {
		t.Fatal("before the renew deadline the bucket is served")
	}
	clk.Step(time.Millisecond)
	if _, ok := h.Serving(2); ok {
		t.Fatal("at the renew deadline, with no renewal published, the bucket is still served")
	}
	if epoch, ok := h.Tenure(2); !ok || epoch != 7 {
		t.Fatalf("a late renewal's tenure: %d, %v; want epoch 7, held (input states keep it)", epoch, ok)
	}
	obj := &v1alpha1.ProjectMCP{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", Labels: map[string]string{LabelPin: "2"}}}
	if !h.Keeps(obj) {
		t.Fatal("a bucket whose renewal is late, and not lost, is not held: its reconciles would stop its projects")
	}
	h.lose(2, "test")
	if h.Keeps(obj) {
		t.Fatal("a lost bucket is still held")
	}
	h.handoff.Wait()
}

// A handoff whose Release fails keeps the bucket (its Lease is not released) and tries again
// until Release says the projects are stopped.
func TestHandOffRetriesUntilReleased(t *testing.T) {
	var attempts atomic.Int32
	h, clk := unitHolder(t, func(context.Context, int) error {
		if attempts.Add(1) < 3 {
			return errors.New("a project still runs")
		}
		return nil
	})
	h.held[1] = &holding{renewed: clk.Now()}
	h.handOff(1)
	if _, ok := h.Serving(1); ok {
		t.Fatal("a bucket being handed off is still served")
	}
	select {
	case <-h.held[1].released:
	case <-time.After(10 * time.Second):
		t.Fatalf("the handoff did not finish after %d attempts", attempts.Load())
	}
	if n := attempts.Load(); n != 3 {
		t.Fatalf("released after %d attempts; want the third, the first to succeed", n)
	}
	if _, held := h.held[1]; !held {
		t.Fatal("the bucket was dropped before the run loop released its Lease")
	}
	h.handoff.Wait()
}
