package access

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
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

func TestResourceNames(t *testing.T) {
	for _, tc := range []struct {
		item Item
		want []string
	}{
		{Item{Resource: ResourceTools, Server: "github", Name: "create_issue"},
			[]string{"shop/*", "shop/github__*", "shop/github__create_issue"}},
		{Item{Resource: ResourcePrompts, Server: "a", Name: "greet"},
			[]string{"shop/*", "shop/a__*", "shop/a__greet"}},
		{Item{Resource: ResourceResources, Server: "fs", Name: "file:///etc/hosts"},
			[]string{"shop/*", "shop/fs__*", "shop/file:///etc/hosts"}},
		{Item{Resource: ResourceResources, Server: "fs", Name: "file:///x/{id}"}, // a template, as listed
			[]string{"shop/*", "shop/fs__*", "shop/file:///x/{id}"}},
		// A URI read through a template is granted by the template: the reviewed names are
		// the catalog's, whatever URIs a caller makes up.
		{Item{Resource: ResourceResources, Server: "fs", Name: "file:///x/1", Template: "file:///x/{id}", Unlisted: true},
			[]string{"shop/*", "shop/fs__*", "shop/file:///x/{id}"}},
		// Names no list holds (a per-server endpoint passes them on): the wildcards alone.
		{Item{Resource: ResourceTools, Server: "a", Name: "made_up_1", Unlisted: true}, []string{"shop/*", "shop/a__*"}},
		{Item{Resource: ResourceResources, Server: "a", Name: "secret://x", Unlisted: true}, []string{"shop/*", "shop/a__*"}},
		// A listed "URI" without a scheme never reads as another grant (shop/github__*).
		{Item{Resource: ResourceResources, Server: "a", Name: "github__*"}, []string{"shop/*", "shop/a__*"}},
		{Item{Resource: ResourceResources, Server: "a", Name: "*"}, []string{"shop/*", "shop/a__*"}},
		{Item{Resource: ResourceResources, Server: "a", Name: "x", Template: "{x}", Unlisted: true}, []string{"shop/*", "shop/a__*"}},
	} {
		if got := ResourceNames("shop", tc.item); !slices.Equal(got, tc.want) {
			t.Errorf("ResourceNames(%+v) = %q, want %q", tc.item, got, tc.want)
		}
	}
}

// A refusal names what would grant the use, in the words a Role is written in.
func TestDeniedItemSaysWhatGrants(t *testing.T) {
	msg := (&DeniedItem{Project: "shop", Item: Item{Resource: ResourceTools, Server: "deploy", Name: "rollout"}}).Error()
	for _, want := range []string{`tool "rollout"`, `server "deploy"`, `"call"`, "tools.mcp.dsh.dev", `"shop/deploy__rollout"`, `"shop/deploy__*"`, `"shop/*"`} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q lacks %s", msg, want)
		}
	}
}

func TestHasScheme(t *testing.T) {
	for s, want := range map[string]bool{
		"file:///x": true, "fixture://a/readme": true, "urn:isbn:1": true, "git+ssh://h/r": true, "a1.-+:x": true,
		"": false, "github__*": false, "*": false, ":x": false, "1abc:x": false, "a b:x": false, "/x:y": false,
	} {
		if got := hasScheme(s); got != want {
			t.Errorf("hasScheme(%q) = %v", s, got)
		}
	}
}

// itemAPIServer is an API server over HTTP, so that reviews run at once (the fake clientset
// runs one at a time): TokenReviews say "good" is alice; SubjectAccessReviews grant tool echo of
// server a in project p by its own name, each after a moment, and fail while down. It counts
// the SubjectAccessReviews.
func itemAPIServer(t testing.TB, down *atomic.Bool) (kubernetes.Interface, *atomic.Int32) {
	t.Helper()
	var reviews atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if strings.HasSuffix(r.URL.Path, "/tokenreviews") {
			_, _ = io.Copy(io.Discard, r.Body)
			fmt.Fprint(w, `{"apiVersion":"authentication.k8s.io/v1","kind":"TokenReview","status":{"authenticated":true,"user":{"username":"alice"}}}`)
			return
		}
		reviews.Add(1)
		var sar authzv1.SubjectAccessReview
		if err := json.NewDecoder(r.Body).Decode(&sar); err != nil || down.Load() {
			http.Error(w, "unavailable", http.StatusServiceUnavailable)
			return
		}
		time.Sleep(50 * time.Millisecond) // long enough for the requests of a burst to meet
		ra := sar.Spec.ResourceAttributes
		sar.Status.Allowed = ra.Group == "mcp.dsh.dev" && ra.Verb == ItemVerb && ra.Resource == "tools" && ra.Name == "p/a__echo"
		_ = json.NewEncoder(w).Encode(&sar)
	}))
	t.Cleanup(srv.Close)
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL, QPS: -1, ContentConfig: rest.ContentConfig{ContentType: "application/json"}})
	if err != nil {
		t.Fatal(err)
	}
	return cs, &reviews
}

var echo = []Item{{Resource: ResourceTools, Server: "a", Name: "echo"}, {Resource: ResourceTools, Server: "a", Name: "fail"}}

func permits(a *KubernetesAuth) []bool {
	return a.Permit(context.Background(), Identity{token: "good"}, types.NamespacedName{Namespace: "ns", Name: "p"}, echo)
}

// Many requests at once cost one review per name; while the API server is down a verdict past
// its TTL stands, however often it is claimed, until MaxStale after its review, and never longer.
func TestPermitReviewsOnceAndStaysStaleNoLonger(t *testing.T) {
	var down atomic.Bool
	cs, reviews := itemAPIServer(t, &down)
	clk := clocktesting.NewFakeClock(time.Now())
	a := &KubernetesAuth{Client: cs, Clock: clk, TTL: 30 * time.Second, MaxStale: 5 * time.Minute}
	// The token first (a Permit of nothing reviews it alone), so that the burst meets at the
	// item reviews.
	a.Permit(context.Background(), Identity{token: "good"}, types.NamespacedName{Namespace: "ns", Name: "p"}, nil)
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			if got := permits(a); !slices.Equal(got, []bool{true, false}) {
				t.Errorf("permits %v, want echo alone", got)
			}
		})
	}
	wg.Wait()
	// p/* and p/a__* once each, then p/a__echo and p/a__fail: four names.
	if n := reviews.Load(); n != 4 {
		t.Fatalf("20 requests at once cost %d reviews, want 4 (one per name)", n)
	}
	down.Store(true)
	for elapsed := time.Duration(0); elapsed < 5*time.Minute; elapsed += 20 * time.Second {
		clk.Step(20 * time.Second)
		if got := permits(a); !slices.Equal(got, []bool{true, false}) {
			t.Fatalf("%s into the outage: %v, want the last verdicts", elapsed+20*time.Second, got)
		}
	}
	clk.Step(time.Minute) // past TTL + MaxStale of the last review
	if got := permits(a); !slices.Equal(got, []bool{false, false}) {
		t.Fatalf("past MaxStale: %v, want nothing permitted", got)
	}
}

// The cost of the decisions of an RBAC project once the verdicts are cached: a tools/list of
// 100 tools granted one by one (each checked at its three names), and one call.
func BenchmarkPermitCached(b *testing.B) {
	var down atomic.Bool
	cs, _ := itemAPIServer(b, &down)
	a := &KubernetesAuth{Client: cs}
	items := make([]Item, 100)
	for i := range items {
		items[i] = Item{Resource: ResourceTools, Server: "a", Name: fmt.Sprintf("tool_%d", i)}
	}
	who := Identity{token: "good"}
	key := types.NamespacedName{Namespace: "ns", Name: "p"}
	a.Permit(context.Background(), who, key, items) // the reviews, once
	for _, bc := range []struct {
		name  string
		items []Item
	}{{"list-100", items}, {"call", items[:1]}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				a.Permit(context.Background(), who, key, bc.items)
			}
		})
	}
}

// itemClient answers TokenReviews (a token "<user>/<anything>" is that user) and
// SubjectAccessReviews (granted: what grant says of the user and the resource name), and
// counts the SubjectAccessReviews by verb.
func itemClient(grant func(user, name string) bool) (*fake.Clientset, *sync.Map) {
	cs := fake.NewClientset()
	var counts sync.Map // verb → *atomic.Int32
	cs.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		tr := a.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview)
		user, _, _ := strings.Cut(tr.Spec.Token, "/")
		tr.Status.Authenticated, tr.Status.User = true, authnv1.UserInfo{Username: user, UID: "uid-" + user, Groups: []string{"system:authenticated"}}
		return true, tr, nil
	})
	cs.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authzv1.SubjectAccessReview)
		n, _ := counts.LoadOrStore(sar.Spec.ResourceAttributes.Verb, new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
		sar.Status.Allowed = grant(sar.Spec.User, sar.Spec.ResourceAttributes.Name)
		return true, sar, nil
	})
	return cs, &counts
}

func count(counts *sync.Map, verb string) int {
	n, ok := counts.Load(verb)
	if !ok {
		return 0
	}
	return int(n.(*atomic.Int32).Load())
}

// files is a list of n resources of server fs, granted one by one.
func files(n int) []Item {
	items := make([]Item, n)
	for i := range items {
		items[i] = Item{Resource: ResourceResources, Server: "fs", Name: fmt.Sprintf("file:///f/%d", i)}
	}
	return items
}

func grantedOneByOne(_, name string) bool { return strings.HasPrefix(name, "p/file:///") }

// One list of an RBAC project reviews at most a bound of its items one by one (256): a page of
// 3,000 resources granted one by one costs 258 SubjectAccessReviews (with the two wildcards),
// not 3,002; the first 256 are shown and the rest withheld.
func TestPermitReviewsABoundOfOneList(t *testing.T) {
	const listBound = 256 // the default
	cs, counts := itemClient(grantedOneByOne)
	a := &KubernetesAuth{Client: cs}
	got := a.Permit(context.Background(), Identity{token: "alice/1"}, types.NamespacedName{Namespace: "ns", Name: "p"}, files(3000))
	if n := count(counts, ItemVerb); n > listBound+2 {
		t.Fatalf("one list of 3000 resources cost %d SubjectAccessReviews, want at most %d", n, listBound+2)
	}
	for i, ok := range got {
		if want := i < listBound; ok != want {
			t.Fatalf("resource %d of 3000: permitted %v, want %v (the first %d reviewed, the rest withheld)", i, ok, want, listBound)
		}
	}
	// Items granted by a wildcard are not bounded so: the server's grant costs one review.
	cs, counts = itemClient(func(_, name string) bool { return name == "p/fs__*" })
	a = &KubernetesAuth{Client: cs}
	got = a.Permit(context.Background(), Identity{token: "alice/1"}, types.NamespacedName{Namespace: "ns", Name: "p"}, files(3000))
	if n := count(counts, ItemVerb); n != 2 || slices.Contains(got, false) {
		t.Fatalf("3000 resources of a server granted whole: %d reviews, all permitted: %v; want 2 and true", count(counts, ItemVerb), !slices.Contains(got, false))
	}
}

// What a list withholds for a bound is logged, at most once a minute per user, naming the user
// and the project and never the token.
func TestPermitSaysWhatItWithheld(t *testing.T) {
	cs, _ := itemClient(grantedOneByOne)
	var logs testutil.LogLines
	clk := clocktesting.NewFakeClock(time.Now())
	a := &KubernetesAuth{Client: cs, Clock: clk, ListItemReviews: 10, Log: logs.Logger()}
	key := types.NamespacedName{Namespace: "ns", Name: "p"}
	const token = "alice/secret-token-value"
	for range 3 {
		a.Permit(context.Background(), Identity{token: token}, key, files(50))
	}
	lines := logs.Matching("RBAC items withheld")
	if len(lines) != 1 {
		t.Fatalf("three lists over the bound logged %d lines, want 1: %q", len(lines), logs.Lines())
	}
	for _, want := range []string{`"projectmcp"="ns/p"`, `"user"="alice"`, `"pastListBound"=40`, `"listBound"=10`} {
		if !strings.Contains(lines[0], want) {
			t.Errorf("%s lacks %s", lines[0], want)
		}
	}
	if strings.Contains(strings.Join(logs.Lines(), "\n"), "secret-token-value") {
		t.Errorf("the log holds the token: %q", logs.Lines())
	}
	clk.Step(time.Minute)
	a.Permit(context.Background(), Identity{token: token}, key, files(50))
	if n := len(logs.Matching("RBAC items withheld")); n != 2 {
		t.Fatalf("a minute later: %d lines, want 2", n)
	}
}

// Item reviews go to the item client: while it hangs, the tokens and the use of projects are
// still reviewed on the other at once, and it sees no item review.
func TestItemReviewsNeverDelayAuthentication(t *testing.T) {
	auth, authCounts := itemClient(func(string, string) bool { return true })
	items, _ := itemClient(grantedOneByOne)
	release := make(chan struct{})
	var waiting atomic.Int32
	items.PrependReactor("create", "subjectaccessreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		waiting.Add(1)
		<-release
		return false, nil, nil
	})
	a := &KubernetesAuth{Client: auth, ItemClient: items}
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.Permit(context.Background(), Identity{token: "alice/1"}, types.NamespacedName{Namespace: "ns", Name: "p"}, files(100))
	}()
	testutil.Eventually(t, 10*time.Second, "an item review waiting on the item client", func() bool { return waiting.Load() > 0 })
	start := time.Now()
	for i := range 5 {
		if _, status, msg := a.Authorize(context.Background(), bearerRequest(fmt.Sprintf("bob/%d", i)), types.NamespacedName{Namespace: "ns", Name: "p"}); status != 0 {
			t.Fatalf("a new token while item reviews hang: %d %s", status, msg)
		}
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("five new tokens took %s while item reviews hang", took)
	}
	if n := count(authCounts, ItemVerb); n != 0 {
		t.Fatalf("the authentication client made %d item reviews", n)
	}
	close(release)
	<-done
}

// Item reviews are bounded per user: every token of one identity shares its verdicts (minting
// tokens costs no more reviews); past its budget its items are withheld while another user's
// are reviewed; and a stale verdict is reviewed again from the budget's renewal part, never
// granted by the last verdict for want of budget.
func TestPermitItemBudgetPerIdentity(t *testing.T) {
	var revoked atomic.Bool
	cs, counts := itemClient(func(user, name string) bool { return name == "p/a__echo" && !(user == "alice" && revoked.Load()) })
	clk := clocktesting.NewFakeClock(time.Now())
	// Three reviews of each kind, never refilled: one item's three names.
	a := &KubernetesAuth{Client: cs, Clock: clk, ItemReviewRate: 1e-9, ItemReviewBurst: 3}
	key := types.NamespacedName{Namespace: "ns", Name: "p"}
	echoOnly := []Item{{Resource: ResourceTools, Server: "a", Name: "echo"}}
	permit := func(token string, items []Item) []bool {
		return a.Permit(context.Background(), Identity{token: token}, key, items)
	}
	for i := range 5 { // five tokens of alice
		if got := permit(fmt.Sprintf("alice/%d", i), echoOnly); !got[0] {
			t.Fatalf("alice's token %d: echo refused", i)
		}
	}
	if n := count(counts, ItemVerb); n != 3 {
		t.Fatalf("five tokens of one identity cost %d reviews, want 3 (one per name)", n)
	}
	if got := permit("alice/0", []Item{{Resource: ResourceTools, Server: "a", Name: "other"}}); got[0] {
		t.Fatal("an item past alice's budget was permitted")
	}
	if n := count(counts, ItemVerb); n != 3 {
		t.Fatalf("past alice's budget: %d reviews, want still 3", n)
	}
	if got := permit("bob/0", echoOnly); !got[0] {
		t.Fatal("bob's item refused while alice is past her budget")
	}
	clk.Step(31 * time.Second) // alice's verdicts are stale: reviewed again from the renewal part
	if got := permit("alice/0", echoOnly); !got[0] {
		t.Fatal("alice's stale verdicts reviewed again: echo refused")
	}
	revoked.Store(true)
	clk.Step(31 * time.Second) // stale again, and both parts spent
	if got := permit("alice/0", echoOnly); got[0] {
		t.Fatal("alice's grant was revoked, her budget spent: echo permitted by the last verdict")
	}
}
