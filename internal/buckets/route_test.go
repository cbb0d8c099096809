package buckets

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dsh-dev/projectmcp/internal/metrics"
)

// fixedOwnership serves the buckets in serving and knows the owners in owners.
type fixedOwnership struct {
	serving map[int]bool
	owners  map[int]string
}

func (f fixedOwnership) Serving(k int) (int64, bool) { return 1, f.serving[k] }
func (f fixedOwnership) Address(k int) (string, bool) {
	addr, ok := f.owners[k]
	return addr, ok
}

func TestProjectOf(t *testing.T) {
	cases := map[string]string{
		"/projects/ns/p/mcp":              "ns/p",
		"/projects/ns/p/servers/s/mcp":    "ns/p",
		"/projects/ns/p":                  "ns/p",
		"/projects/ns/":                   "",
		"/projects//p/mcp":                "",
		"/healthz":                        "",
		"/projectsx/ns/p/mcp":             "",
		"/projects/team-a/shop/mcp?x=1":   "team-a/shop",
		"/projects/ns/p/servers/s/mcp/xx": "ns/p",
	}
	for path, want := range cases {
		key, ok := ProjectOf(strings.SplitN(path, "?", 2)[0])
		got := ""
		if ok {
			got = key.String()
		}
		if got != want {
			t.Errorf("ProjectOf(%q) = %q, want %q", path, got, want)
		}
	}
}

// A request for a project another replica serves reaches that replica's gateway as the client
// sent it (method, path, query, body, Host), streamed both ways and cancelled with the
// client; one for a bucket nobody serves, or one proxied already, is a 503 with Retry-After.
func TestRouterProxiesToTheOwner(t *testing.T) {
	release := make(chan struct{})
	var releaseOnce sync.Once
	defer releaseOnce.Do(func() { close(release) }) // a failed check must not leave the handler waiting
	cancelled := make(chan struct{})
	owner := httptest.NewServer(&Router{
		Ownership: fixedOwnership{serving: map[int]bool{0: true}},
		BucketOf:  func(types.NamespacedName) int { return 0 },
		Identity:  "owner",
		Next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: "+r.Method+" "+r.URL.RequestURI()+" "+string(body)+" host="+r.Host+" by="+r.Header.Get(HeaderProxiedBy)+"\n\n")
			w.(http.Flusher).Flush()
			if r.URL.Query().Has("hold") {
				<-r.Context().Done()
				close(cancelled)
				return
			}
			select {
			case <-release:
				_, _ = io.WriteString(w, "data: done\n\n")
			case <-r.Context().Done():
			}
		}),
	})
	defer owner.Close()
	ownerAddr := strings.TrimPrefix(owner.URL, "http://")

	proxied := testutil.ToFloat64(metrics.ProxiedRequests.WithLabelValues("proxied"))
	unserved := testutil.ToFloat64(metrics.ProxiedRequests.WithLabelValues("unserved"))
	front := httptest.NewServer(&Router{
		Ownership: fixedOwnership{serving: map[int]bool{}, owners: map[int]string{0: ownerAddr}},
		BucketOf: func(key types.NamespacedName) int {
			if key.Name == "orphan" {
				return 1
			}
			return 0
		},
		Identity: "front", Address: "front:8484",
		Next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, "front's own")
		}),
	})
	defer front.Close()

	// Streamed: the first event arrives while the owner's handler still runs.
	req, _ := http.NewRequest(http.MethodPost, front.URL+"/projects/ns/p/mcp?q=1", strings.NewReader(`{"x":1}`))
	req.Host = "gateway.example:8080"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(resp.Body)
	line, err := r.ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	if want := `data: POST /projects/ns/p/mcp?q=1 {"x":1} host=gateway.example:8080 by=front:8484` + "\n"; line != want {
		t.Fatalf("the owner saw %q, want %q", line, want)
	}
	releaseOnce.Do(func() { close(release) })
	rest, _ := io.ReadAll(r)
	resp.Body.Close()
	if !strings.Contains(string(rest), "data: done") {
		t.Fatalf("the rest of the stream: %q", rest)
	}

	// Cancelled: a client that gives up ends the owner's request.
	ctx, cancel := context.WithCancel(context.Background())
	req, _ = http.NewRequestWithContext(ctx, http.MethodGet, front.URL+"/projects/ns/p/mcp?hold", nil)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = bufio.NewReader(resp.Body).ReadString('\n')
	cancel()
	resp.Body.Close()
	select {
	case <-cancelled:
	case <-time.After(10 * time.Second):
		t.Fatal("the owner's request went on after the client gave up")
	}

	for name, req := range map[string]*http.Request{
		"a bucket nobody holds": mustRequest(t, front.URL+"/projects/ns/orphan/mcp", ""),
		"a request proxied too often (views that disagree would bounce it)": mustRequest(t, front.URL+"/projects/ns/p/mcp", "a:1, b:1, c:1, d:1"),
	} {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" || !strings.Contains(string(body), "projectmcp-bucket-") {
			t.Fatalf("%s: %d Retry-After=%q %s", name, resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
	}

	// Proxied once already (by a replica handing the bucket off): proxied on, the hop added.
	resp, err = http.DefaultClient.Do(mustRequest(t, front.URL+"/projects/ns/p/mcp", "draining:8484"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), "by=draining:8484") {
		t.Fatalf("a request proxied once: %d %s", resp.StatusCode, body)
	}
	// The cancelled request is counted once the front's handler has returned, which may come
	// after the owner saw the cancellation.
	deadline := time.Now().Add(10 * time.Second)
	got := testutil.ToFloat64(metrics.ProxiedRequests.WithLabelValues("proxied")) - proxied
	for ; got < 3 && time.Now().Before(deadline); got = testutil.ToFloat64(metrics.ProxiedRequests.WithLabelValues("proxied")) - proxied {
		time.Sleep(10 * time.Millisecond)
	}
	if got != 3 {
		t.Fatalf("counted %v requests proxied; want 3", got)
	}
	if got := testutil.ToFloat64(metrics.ProxiedRequests.WithLabelValues("unserved")) - unserved; got != 2 {
		t.Fatalf("counted %v requests unserved; want 2", got)
	}

	// Not a project's path: served here.
	resp, err = http.Get(front.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "front's own" {
		t.Fatalf("/healthz: %q", body)
	}
}

func mustRequest(t *testing.T, url, proxiedBy string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if proxiedBy != "" {
		req.Header.Set(HeaderProxiedBy, proxiedBy)
	}
	return req
}

// changingOwnership has no holder for bucket 0 until its owner is set.
type changingOwnership struct{ owner atomic.Pointer[string] }

func (c *changingOwnership) Serving(int) (int64, bool) { return 0, false }
func (c *changingOwnership) Address(int) (string, bool) {
	if o := c.owner.Load(); o != nil {
		return *o, true
	}
	return "", false
}

// A request for a bucket between holders waits for the next one (here 300 ms) within Wait,
// rather than failing: a handoff costs a session no failed call.
func TestRouterWaitsForTheNextHolder(t *testing.T) {
	owner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "served by the next holder")
	}))
	defer owner.Close()
	own := &changingOwnership{}
	front := httptest.NewServer(&Router{Ownership: own, BucketOf: func(types.NamespacedName) int { return 0 },
		Identity: "front", Wait: 10 * time.Second, Next: http.NotFoundHandler()})
	defer front.Close()
	time.AfterFunc(300*time.Millisecond, func() {
		addr := strings.TrimPrefix(owner.URL, "http://")
		own.owner.Store(&addr)
	})
	start := time.Now()
	resp, err := http.Get(front.URL + "/projects/ns/p/mcp")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "served by the next holder" || time.Since(start) < 300*time.Millisecond {
		t.Fatalf("after %s: %d %s", time.Since(start), resp.StatusCode, body)
	}
}
