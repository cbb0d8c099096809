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

	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	clocktesting "k8s.io/utils/clock/testing"
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
