package buckets

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// switching is an Ownership whose view changes while a request is served: the bucket is
// served here until handOff, and its owner's address is whatever owner says then.
type switching struct {
	mu      sync.Mutex
	serving bool
	owner   string
}

func (s *switching) Serving(int) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return 7, s.serving
}

func (s *switching) Address(int) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.owner, s.owner != ""
}

func (s *switching) handOff(owner string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.serving, s.owner = false, owner
}

// echoOwner is a replica's gateway that answers with what it got.
func echoOwner(t *testing.T) (addr string) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		_, _ = io.WriteString(w, "owner got "+string(body))
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// A request the gateway here answers moved (its bucket was handed off after the Router looked,
// and the gateway did nothing with it) is sent on, whole, to the bucket's next holder; the
// client gets the next holder's answer and nothing of the moved one (status, headers, body).
func TestRouterSendsAMovedRequestOn(t *testing.T) {
	next := echoOwner(t)
	own := &switching{serving: true}
	var here int
	rt := &Router{Ownership: own, BucketOf: func(types.NamespacedName) int { return 0 }, Identity: "here", Address: "here:1", Wait: 5 * time.Second,
		Next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			here++
			_, _ = io.ReadAll(r.Body)                    // as the gateway reads the body before it finds the project gone,
			r.Body = io.NopCloser(strings.NewReader("")) // and puts a reader of its own in its place
			own.handOff(next)
			w.Header().Set(HeaderMoved, "1")
			w.Header().Set("Retry-After", "1")
			http.Error(w, "moving", http.StatusServiceUnavailable)
		})}
	front := httptest.NewServer(rt)
	defer front.Close()
	resp, err := http.Post(front.URL+"/projects/ns/p/mcp", "application/json", strings.NewReader(`{"call":1}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || string(body) != `owner got {"call":1}` || here != 1 {
		t.Fatalf("%d %q after %d attempts here, want the next holder's answer to the whole body", resp.StatusCode, body, here)
	}
	for _, h := range []string{HeaderMoved, "Retry-After", "X-Content-Type-Options"} {
		if resp.Header.Get(h) != "" {
			t.Errorf("the client got the moved answer's %s header", h)
		}
	}
}

// An answer of the gateway here that is not marked moved is the client's, 503s included.
func TestRouterKeepsTheGatewaysOwn503(t *testing.T) {
	rt := &Router{Ownership: &switching{serving: true}, BucketOf: func(types.NamespacedName) int { return 0 }, Wait: time.Second,
		Next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "not set up yet", http.StatusServiceUnavailable)
		})}
	front := httptest.NewServer(rt)
	defer front.Close()
	resp, err := http.Post(front.URL+"/projects/ns/p/mcp", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "not set up yet") {
		t.Fatalf("%d %q, want the gateway's own 503", resp.StatusCode, body)
	}
}

// A holder whose address takes no connection (a replica that has just stopped) is not an
// answer: the request goes to the next holder the Leases name, body and all.
func TestRouterTriesTheNextHolderOfAGoneOne(t *testing.T) {
	gone, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	goneAddr := gone.Addr().String()
	gone.Close()
	next := echoOwner(t)
	own := &switching{owner: goneAddr}
	go func() {
		time.Sleep(200 * time.Millisecond)
		own.handOff(next)
	}()
	front := httptest.NewServer(&Router{Ownership: own, BucketOf: func(types.NamespacedName) int { return 0 }, Address: "here:1", Wait: 5 * time.Second,
		Next: http.NotFoundHandler()})
	defer front.Close()
	resp, err := http.Post(front.URL+"/projects/ns/p/mcp", "application/json", strings.NewReader(`{"call":2}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || string(body) != `owner got {"call":2}` {
		t.Fatalf("%d %q, want the next holder's answer", resp.StatusCode, body)
	}
}

// What an attempt read of a body is read again, in full, by the next; a body past maxKept is
// not kept, and there is no next attempt.
func TestKeptBody(t *testing.T) {
	r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader("abcdef"))
	k := keep(r)
	part := make([]byte, 2)
	if n, _ := r.Body.Read(part); string(part[:n]) != "ab" {
		t.Fatalf("first read %q", part[:n])
	}
	if !k.rewind() {
		t.Fatal("a small body cannot be rewound")
	}
	if all, _ := io.ReadAll(r.Body); string(all) != "abcdef" {
		t.Fatalf("the second attempt read %q", all)
	}
	if !k.rewind() {
		t.Fatal("cannot rewind twice")
	}
	if all, _ := io.ReadAll(r.Body); string(all) != "abcdef" {
		t.Fatalf("the third attempt read %q", all)
	}

	big := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(strings.Repeat("x", maxKept+1)))
	k = keep(big)
	if n, _ := io.Copy(io.Discard, big.Body); n != maxKept+1 {
		t.Fatalf("read %d bytes", n)
	}
	if k.rewind() {
		t.Fatal("a body past maxKept was kept")
	}
}

// A body of a declared length is not read past it: the client's body may be closed by then (an
// HTTP/1.x server closes it once the proxied answer's header is written), and a read that
// failed there had the transport close the connection the answer streamed on.
func TestKeptBodyEndsAtItsLength(t *testing.T) {
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	r.Body, r.ContentLength = &closedAfter{data: []byte("abcdef")}, 6
	keep(r)
	all, err := io.ReadAll(r.Body)
	if err != nil || string(all) != "abcdef" {
		t.Fatalf("read %q, %v", all, err)
	}
}

// closedAfter gives its data, then fails every read, as a closed body does (without the EOF a
// body read to its end gives).
type closedAfter struct{ data []byte }

func (c *closedAfter) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, errors.New("http: invalid Read on closed Body")
	}
	n := copy(p, c.data)
	c.data = c.data[n:]
	return n, nil
}

func (c *closedAfter) Close() error { return nil }
