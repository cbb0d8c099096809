package gateway

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/dsh-dev/projectmcp/internal/registry"
)

// countingClient answers TokenReviews (valid: "good") and SubjectAccessReviews (allowed:
// project ns/allowed) and counts them.
func countingClient() (*fake.Clientset, *atomic.Int32, *atomic.Int32) {
	cs := fake.NewClientset()
	var reviews, accesses atomic.Int32
	cs.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		reviews.Add(1)
		tr := a.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview)
		tr.Status.Authenticated = tr.Spec.Token == "good"
		tr.Status.User = authnv1.UserInfo{Username: "alice"}
		return true, tr, nil
	})
	cs.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		accesses.Add(1)
		sar := a.(k8stesting.CreateAction).GetObject().(*authzv1.SubjectAccessReview)
		sar.Status.Allowed = sar.Spec.ResourceAttributes.Namespace == "ns" && sar.Spec.ResourceAttributes.Name == "allowed"
		return true, sar, nil
	})
	return cs, &reviews, &accesses
}

// A token is reviewed once whatever paths it asks for; each project's verdict is cached; the
// caches stay bounded under a spray of paths; names no object can have cost no review at all.
func TestKubernetesAuthCachesAndBounds(t *testing.T) {
	cs, reviews, accesses := countingClient()
	clk := clocktesting.NewFakeClock(time.Now())
	a := &KubernetesAuth{Client: cs, Clock: clk, ReviewRate: 1e9, ReviewBurst: 1 << 20}
	req := func(token string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		r.Header.Set("Authorization", "Bearer "+token)
		return r
	}
	ctx := context.Background()
	allowed := types.NamespacedName{Namespace: "ns", Name: "allowed"}
	for range 3 {
		if _, status, msg := a.Authorize(ctx, req("good"), allowed); status != 0 {
			t.Fatalf("allowed project: %d %s", status, msg)
		}
	}
	if reviews.Load() != 1 || accesses.Load() != 1 {
		t.Fatalf("three requests cost %d token reviews and %d access reviews, want 1 and 1", reviews.Load(), accesses.Load())
	}
	const spray = maxAuthEntries + 500
	for i := range spray {
		if _, status, _ := a.Authorize(ctx, req("good"), types.NamespacedName{Namespace: "ns", Name: fmt.Sprintf("p%d", i)}); status != http.StatusForbidden {
			t.Fatalf("a project the user may not use: %d", status)
		}
	}
	if reviews.Load() != 1 {
		t.Fatalf("a spray of paths must not review the token again: %d reviews", reviews.Load())
	}
	size := len(a.decisions.Keys())
	if size > maxAuthEntries {
		t.Fatalf("the decision cache grew to %d entries (bound %d)", size, maxAuthEntries)
	}
	if _, status, _ := a.Authorize(ctx, req("bad"), allowed); status != http.StatusUnauthorized {
		t.Fatalf("an invalid token: %d", status)
	}
	clk.Step(time.Minute)
	before := reviews.Load()
	a.Authorize(ctx, req("good"), allowed)
	if reviews.Load() != before+1 {
		t.Fatal("an expired verdict must be reviewed again")
	}

	// Invalid object names never reach the Authorizer.
	reg := registry.New(clk, logr.Discard())
	defer reg.Shutdown()
	g := New(Options{Registry: reg, Auth: a})
	before = reviews.Load() + accesses.Load()
	for _, path := range []string{"/projects/NS/x/mcp", "/projects/ns/x_y/mcp", "/projects/ns/" + string(make([]byte, 300)) + "/mcp"} {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/", nil)
		r.URL.Path = path
		r.Header.Set("Authorization", "Bearer good")
		g.ServeHTTP(w, r)
		if w.Code != http.StatusNotFound {
			t.Errorf("%q: %d, want 404", path, w.Code)
		}
	}
	if reviews.Load()+accesses.Load() != before {
		t.Fatal("invalid names must cost no review")
	}
}

func bearerRequest(token string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	r.Header.Set("Authorization", "Bearer "+token)
	return r
}

// A user spraying project paths is held to its review budget (429), and another user's first
// review still goes through.
func TestKubernetesAuthReviewBudgetPerUser(t *testing.T) {
	cs, _, accesses := countingClient()
	cs.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		tr := a.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview)
		tr.Status.Authenticated, tr.Status.User = true, authnv1.UserInfo{Username: tr.Spec.Token}
		return true, tr, nil
	})
	clk := clocktesting.NewFakeClock(time.Now())
	a := &KubernetesAuth{Client: cs, Clock: clk, ReviewRate: 10, ReviewBurst: 20}
	ctx := context.Background()
	codes := map[int]int{}
	for i := range 1000 {
		_, status, _ := a.Authorize(ctx, bearerRequest("sprayer"), types.NamespacedName{Namespace: "ns", Name: fmt.Sprintf("p%d", i)})
		codes[status]++
	}
	if codes[http.StatusForbidden] != 20 || codes[http.StatusTooManyRequests] != 980 || accesses.Load() != 20 {
		t.Fatalf("a spray of 1000 paths: %v after %d access reviews, want 20 × 403 and 980 × 429", codes, accesses.Load())
	}
	if _, status, msg := a.Authorize(ctx, bearerRequest("bob"), types.NamespacedName{Namespace: "ns", Name: "allowed"}); status != 0 {
		t.Fatalf("another user during the spray: %d %s", status, msg)
	}
	clk.Step(time.Second) // the budget refills
	if _, status, _ := a.Authorize(ctx, bearerRequest("sprayer"), types.NamespacedName{Namespace: "ns", Name: "allowed"}); status != 0 {
		t.Fatalf("the sprayer a second later: %d", status)
	}
}

// When reviews fail (the API server is unreachable), a verdict past its TTL still answers for
// MaxStale; a token never seen gets 500.
func TestKubernetesAuthKeepsVerdictsThroughOutage(t *testing.T) {
	cs, _, _ := countingClient()
	var down atomic.Bool
	cs.PrependReactor("create", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		if down.Load() {
			return true, nil, fmt.Errorf("connection refused")
		}
		return false, nil, nil
	})
	clk := clocktesting.NewFakeClock(time.Now())
	a := &KubernetesAuth{Client: cs, Clock: clk, TTL: 30 * time.Second, MaxStale: 5 * time.Minute}
	ctx := context.Background()
	allowed := types.NamespacedName{Namespace: "ns", Name: "allowed"}
	if _, status, _ := a.Authorize(ctx, bearerRequest("good"), allowed); status != 0 {
		t.Fatalf("before the outage: %d", status)
	}
	down.Store(true)
	clk.Step(time.Minute)
	if _, status, msg := a.Authorize(ctx, bearerRequest("good"), allowed); status != 0 {
		t.Fatalf("during the outage, a verdict a minute old: %d %s", status, msg)
	}
	if _, status, _ := a.Authorize(ctx, bearerRequest("other"), allowed); status != http.StatusInternalServerError {
		t.Fatalf("during the outage, a token never seen: %d", status)
	}
	clk.Step(10 * time.Minute)
	if _, status, _ := a.Authorize(ctx, bearerRequest("good"), allowed); status != http.StatusInternalServerError {
		t.Fatalf("during the outage, a verdict older than MaxStale: %d", status)
	}
}

// A user's reviews waiting on a slow API server are bounded: past maxReviewsInFlight the user
// gets 429 at once instead of a queue.
func TestKubernetesAuthReviewsInFlightBounded(t *testing.T) {
	cs, _, _ := countingClient()
	release := make(chan struct{})
	var waiting atomic.Int32
	var slow atomic.Bool
	cs.PrependReactor("create", "subjectaccessreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		if slow.Load() {
			waiting.Add(1)
			<-release
		}
		return false, nil, nil
	})
	a := &KubernetesAuth{Client: cs}
	ctx := context.Background()
	// The token is reviewed first: the fake client runs one reactor at a time, so a token
	// review behind the blocked access review would wait for it.
	if _, status, _ := a.Authorize(ctx, bearerRequest("good"), types.NamespacedName{Namespace: "ns", Name: "allowed"}); status != 0 {
		t.Fatalf("warming up: %d", status)
	}
	slow.Store(true)
	results := make(chan int, 10)
	for i := range 10 {
		go func() {
			_, status, _ := a.Authorize(ctx, bearerRequest("good"), types.NamespacedName{Namespace: "ns", Name: fmt.Sprintf("p%d", i)})
			results <- status
		}()
	}
	for range 10 - maxReviewsInFlight {
		if status := <-results; status != http.StatusTooManyRequests {
			t.Fatalf("a review past the bound: %d, want 429 at once", status)
		}
	}
	if n := waiting.Load(); n < 1 || n > maxReviewsInFlight { // the fake client serializes its reactors
		t.Fatalf("%d reviews reached the API server, want 1 to %d", n, maxReviewsInFlight)
	}
	close(release)
	for range maxReviewsInFlight {
		if status := <-results; status != http.StatusForbidden {
			t.Fatalf("a review in flight: %d", status)
		}
	}
}
