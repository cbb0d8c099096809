package access

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/dsh-dev/projectmcp/internal/testutil"
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
	// The reviews let through may reach the API server only after the refused ones were
	// answered (the fake client serializes its reactors: at least one, at most the bound).
	testutil.Eventually(t, 10*time.Second, "a review let through to reach the API server", func() bool { return waiting.Load() >= 1 })
	if n := waiting.Load(); n > maxReviewsInFlight {
		t.Fatalf("%d reviews reached the API server, want 1 to %d", n, maxReviewsInFlight)
	}
	close(release)
	for range maxReviewsInFlight {
		if status := <-results; status != http.StatusForbidden {
			t.Fatalf("a review in flight: %d", status)
		}
	}
}

// A source is the caller's IP address; IPv6 callers of one /64 are one source; a port or an
// IPv4-mapped form changes nothing.
func TestSourceOf(t *testing.T) {
	for _, tc := range []struct{ addr, want string }{
		{"192.0.2.7:1234", "192.0.2.7"},
		{"192.0.2.7:9", "192.0.2.7"},
		{"[::ffff:192.0.2.7]:80", "192.0.2.7"},
		{"[2001:db8:1:2:aaaa::1]:443", "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:bbbb::9]:443", "2001:db8:1:2::/64"},
		{"[2001:db8:1:3::1]:443", "2001:db8:1:3::/64"},
		{"[fe80::1%eth0]:80", "fe80::/64"},
		{"@", "@"},
		{"", ""},
	} {
		if got := sourceOf(tc.addr); got != tc.want {
			t.Errorf("sourceOf(%q) = %q, want %q", tc.addr, got, tc.want)
		}
	}
}

// With audiences configured a reviewed token must be for one of them; without, any token the
// API server accepted is.
func TestAudienceMatches(t *testing.T) {
	for _, tc := range []struct {
		want, got []string
		ok        bool
	}{
		{nil, nil, true},
		{nil, []string{"https://kubernetes.default.svc"}, true},
		{[]string{"projectmcp"}, []string{"projectmcp"}, true},
		{[]string{"projectmcp", "other"}, []string{"other"}, true},
		{[]string{"projectmcp"}, nil, false},
		{[]string{"projectmcp"}, []string{"https://kubernetes.default.svc"}, false},
	} {
		if got := audienceMatches(tc.want, tc.got); got != tc.ok {
			t.Errorf("audienceMatches(%q, %q) = %v, want %v", tc.want, tc.got, got, tc.ok)
		}
	}
}

// hungAPIServer is an API server that authenticates every token and never answers an access
// review, or with hangTokens, never answers a token review either: it answers when the client
// gives up.
func hungAPIServer(t *testing.T, hangTokens bool) kubernetes.Interface {
	t.Helper()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if strings.HasSuffix(r.URL.Path, "/tokenreviews") && !hangTokens {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","status":{"authenticated":true,"user":{"username":"alice"}}}`)
			return
		}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // before Close, which waits for the handlers
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL, QPS: -1})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// A token review, an access review and an item review the API server does not answer fail
// after ReviewTimeout (500, or the item refused), not when the client's request ends.
func TestKubernetesAuthReviewDeadline(t *testing.T) {
	for _, tc := range []struct {
		name       string
		hangTokens bool
	}{{"token review", true}, {"access review", false}} {
		t.Run(tc.name, func(t *testing.T) {
			a := &KubernetesAuth{Client: hungAPIServer(t, tc.hangTokens), ReviewTimeout: 200 * time.Millisecond}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // the client's patience
			defer cancel()
			start := time.Now()
			_, status, msg := a.Authorize(ctx, bearerRequest("good"), types.NamespacedName{Namespace: "ns", Name: "allowed"})
			if took := time.Since(start); status != http.StatusInternalServerError || took > 3*time.Second {
				t.Fatalf("a review the API server does not answer: %d %q after %s, want 500 within ReviewTimeout", status, msg, took.Round(time.Millisecond))
			}
		})
	}
	t.Run("item review", func(t *testing.T) {
		a := &KubernetesAuth{Client: hungAPIServer(t, false), ReviewTimeout: 200 * time.Millisecond}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		start := time.Now()
		// Three levels of names (the project's, the server's, the tool's), asked one after another.
		ok := a.Permit(ctx, Identity{token: "good"}, types.NamespacedName{Namespace: "ns", Name: "shop"},
			[]Item{{Resource: ResourceTools, Server: "s", Name: "t"}})
		if took := time.Since(start); ok[0] || took > 3*time.Second {
			t.Fatalf("item reviews the API server does not answer: permitted %v after %s, want refused within 3 × ReviewTimeout", ok[0], took.Round(time.Millisecond))
		}
	})
}

// revocableClient answers TokenReviews (every token is mallory) and SubjectAccessReviews
// (mallory may use ns/shop until revoked is set, and nothing else), and counts the latter.
func revocableClient(revoked *atomic.Bool) (*fake.Clientset, *atomic.Int32) {
	cs := fake.NewClientset()
	var accesses atomic.Int32
	cs.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		tr := a.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview)
		tr.Status.Authenticated, tr.Status.User = true, authnv1.UserInfo{Username: "mallory", UID: "u1"}
		return true, tr, nil
	})
	cs.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		accesses.Add(1)
		sar := a.(k8stesting.CreateAction).GetObject().(*authzv1.SubjectAccessReview)
		ra := sar.Spec.ResourceAttributes
		sar.Status.Allowed = ra.Namespace == "ns" && ra.Name == "shop" && !revoked.Load()
		return true, sar, nil
	})
	return cs, &accesses
}

// A user whose grant was revoked cannot keep it by spending its own review budget on made-up
// paths: once its verdict is stale, the next request reviews it again (from the part of the
// budget kept for stale verdicts) and is refused, minute after minute, while the API server
// answers. Past both parts of the budget the answer is 429, never the last verdict.
func TestKubernetesAuthRevokedUserCannotOutspendItsBudget(t *testing.T) {
	var revoked atomic.Bool
	cs, _ := revocableClient(&revoked)
	clk := clocktesting.NewFakeClock(time.Now())
	a := &KubernetesAuth{Client: cs, Clock: clk} // the defaults: TTL 30 s, 10 minutes stale, 20 a second (burst 100)
	ctx := context.Background()
	shop := types.NamespacedName{Namespace: "ns", Name: "shop"}
	if _, status, msg := a.Authorize(ctx, bearerRequest("mallory"), shop); status != 0 {
		t.Fatalf("before the revocation: %d %s", status, msg)
	}
	revoked.Store(true)
	for minute := 1; minute <= 9; minute++ {
		clk.Step(time.Minute)
		codes := map[int]int{}
		for i := range 200 { // more than the budget's burst
			_, status, _ := a.Authorize(ctx, bearerRequest("mallory"), types.NamespacedName{Namespace: "ns", Name: fmt.Sprintf("m%d-%d", minute, i)})
			codes[status]++
		}
		if codes[http.StatusTooManyRequests] == 0 {
			t.Fatalf("minute %d: the spray never spent the budget: %v", minute, codes)
		}
		if _, status, _ := a.Authorize(ctx, bearerRequest("mallory"), shop); status != http.StatusForbidden {
			t.Fatalf("%d min after the revocation, the budget spent on made-up paths, the API server up: status %d, want 403", minute, status)
		}
	}

	t.Run("past both parts of the budget", func(t *testing.T) {
		var revoked atomic.Bool
		cs, accesses := revocableClient(&revoked)
		clk := clocktesting.NewFakeClock(time.Now())
		a := &KubernetesAuth{Client: cs, Clock: clk, ReviewRate: 1e-9, ReviewBurst: 1} // one review of each kind, never refilled
		if _, status, msg := a.Authorize(ctx, bearerRequest("mallory"), shop); status != 0 {
			t.Fatalf("the first review: %d %s", status, msg)
		}
		clk.Step(31 * time.Second)
		if _, status, msg := a.Authorize(ctx, bearerRequest("mallory"), shop); status != 0 || accesses.Load() != 2 {
			t.Fatalf("the stale verdict reviewed again: %d %s after %d reviews", status, msg, accesses.Load())
		}
		revoked.Store(true)
		clk.Step(31 * time.Second)
		if _, status, _ := a.Authorize(ctx, bearerRequest("mallory"), shop); status != http.StatusTooManyRequests || accesses.Load() != 2 {
			t.Fatalf("stale again, with no budget left: %d after %d reviews, want 429 without a review (never the last verdict)", status, accesses.Load())
		}
	})
}

// Requests of one token for one project at once cost one review, whether the project has no
// verdict yet or a stale one, and none of them gets 429 for it.
func TestKubernetesAuthReviewsAKeyOnce(t *testing.T) {
	cs, _, accesses := countingClient()
	var gate atomic.Pointer[chan struct{}] // while set, access reviews wait for it to close
	cs.PrependReactor("create", "subjectaccessreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		if g := gate.Load(); g != nil {
			<-*g
		}
		return false, nil, nil
	})
	clk := clocktesting.NewFakeClock(time.Now())
	a := &KubernetesAuth{Client: cs, Clock: clk}
	ctx := context.Background()
	allowed := types.NamespacedName{Namespace: "ns", Name: "allowed"}
	// The token first: the fake client runs one reactor at a time.
	if _, status, _ := a.Authorize(ctx, bearerRequest("good"), types.NamespacedName{Namespace: "ns", Name: "warm"}); status != http.StatusForbidden {
		t.Fatalf("warming up: %d", status)
	}
	for _, round := range []string{"no verdict", "a stale verdict"} {
		before := accesses.Load()
		release := make(chan struct{})
		gate.Store(&release)
		results := make(chan int, 3*maxReviewsInFlight)
		for range cap(results) {
			go func() {
				_, status, _ := a.Authorize(ctx, bearerRequest("good"), allowed)
				results <- status
			}()
		}
		time.Sleep(100 * time.Millisecond) // let them meet at the review
		gate.Store(nil)
		close(release)
		for range cap(results) {
			if status := <-results; status != 0 {
				t.Fatalf("%s, %d requests at once: one got %d", round, cap(results), status)
			}
		}
		if n := accesses.Load() - before; n != 1 {
			t.Fatalf("%s, %d requests at once: %d reviews, want 1", round, cap(results), n)
		}
		clk.Step(31 * time.Second)
	}
}
