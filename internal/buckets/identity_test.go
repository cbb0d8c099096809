package buckets

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/dsh-dev/projectmcp/internal/peer"
)

// seen is what an owner's gateway saw of its callers.
type seen struct {
	mu      sync.Mutex
	remote  string
	uid     int
	known   bool
	headers bool // a client header reached the gateway
}

func (s *seen) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.remote = r.RemoteAddr
		s.uid, s.known = peer.UID(r.Context())
		s.headers = r.Header.Get(HeaderClientAddr) != "" || r.Header.Get(HeaderClientUID) != ""
	})
}

// A request proxied by a replica reaches the owner's gateway as its client's: the client's
// address and the uid of its process (local mode's principal), when the owner trusts the
// connection as a replica's. From anyone else, the words on a client are dropped, and the
// gateway sees the connection as it is: a local user cannot pass for another by proxying
// through a replica, nor by sending the headers itself.
func TestRouterCarriesTheClientsIdentity(t *testing.T) {
	var trusted bool
	at := &seen{}
	owner := httptest.NewUnstartedServer(&Router{Ownership: fixedOwnership{serving: map[int]bool{0: true}}, BucketOf: func(types.NamespacedName) int { return 0 },
		Next: at.handler(), Trusted: func(*http.Request) bool { return trusted }})
	owner.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
		return peer.WithUID(ctx, 0, true) // whoever connects runs as uid 0 (the replicas do)
	}
	owner.Start()
	defer owner.Close()
	ownerAddr := strings.TrimPrefix(owner.URL, "http://")

	var clientAddr string
	var mu sync.Mutex
	front := httptest.NewUnstartedServer(&Router{Ownership: fixedOwnership{owners: map[int]string{0: ownerAddr}},
		BucketOf: func(types.NamespacedName) int { return 0 }, Address: "front:1", Next: http.NotFoundHandler()})
	front.Config.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		mu.Lock()
		clientAddr = c.RemoteAddr().String()
		mu.Unlock()
		return peer.WithUID(ctx, 4242, true) // the client's process, as the OS names it
	}
	front.Start()
	defer front.Close()

	get := func(url string, h http.Header) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, url+"/projects/ns/p/mcp", nil)
		for k, v := range h {
			req.Header[k] = v
		}
		resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}

	trusted = true
	get(front.URL, nil)
	mu.Lock()
	want := clientAddr
	mu.Unlock()
	if at.remote != want || !at.known || at.uid != 4242 || at.headers {
		t.Errorf("proxied by a trusted replica: the gateway saw %s uid %d (known %v, headers %v), want the client's %s uid 4242", at.remote, at.uid, at.known, at.headers, want)
	}

	// A client whose process the OS does not name is no one's uid, not the replica's.
	unnamed := httptest.NewServer(&Router{Ownership: fixedOwnership{owners: map[int]string{0: ownerAddr}},
		BucketOf: func(types.NamespacedName) int { return 0 }, Address: "front:2", Next: http.NotFoundHandler()})
	defer unnamed.Close()
	get(unnamed.URL, nil)
	if at.known || at.headers {
		t.Errorf("proxied for a client of no known uid: the gateway saw uid %d (known %v, headers %v), want none", at.uid, at.known, at.headers)
	}

	trusted = false
	get(front.URL, nil)
	if at.remote == want || !at.known || at.uid != 0 || at.headers {
		t.Errorf("proxied by a connection not trusted: the gateway saw %s uid %d (known %v, headers %v), want the proxy's connection", at.remote, at.uid, at.known, at.headers)
	}

	get(owner.URL, http.Header{HeaderClientAddr: {"10.9.9.9:1"}, HeaderClientUID: {"4242"}})
	if at.remote == "10.9.9.9:1" || at.uid != 0 || at.headers {
		t.Errorf("a client's own client headers: the gateway saw %s uid %d (known %v, headers %v)", at.remote, at.uid, at.known, at.headers)
	}
}

// A replica sends its token with what it proxies, and the serving replica's Trusted sees it;
// the token reaches neither the gateway nor a further replica, whoever sent it.
func TestRouterCarriesTheReplicaToken(t *testing.T) {
	var mu sync.Mutex
	var tokens []string // what the owner's Trusted saw
	at := &seen{}
	var gatewayToken bool
	next := at.handler()
	owner := httptest.NewServer(&Router{Ownership: fixedOwnership{serving: map[int]bool{0: true}}, BucketOf: func(types.NamespacedName) int { return 0 },
		Next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			gatewayToken = gatewayToken || r.Header.Get(HeaderReplicaToken) != ""
			mu.Unlock()
			next.ServeHTTP(w, r)
		}),
		Trusted: func(r *http.Request) bool {
			mu.Lock()
			defer mu.Unlock()
			tokens = append(tokens, r.Header.Get(HeaderReplicaToken))
			return r.Header.Get(HeaderReplicaToken) == "replica-token"
		}})
	defer owner.Close()
	front := httptest.NewServer(&Router{Ownership: fixedOwnership{owners: map[int]string{0: strings.TrimPrefix(owner.URL, "http://")}},
		BucketOf: func(types.NamespacedName) int { return 0 }, Address: "front:1", Next: http.NotFoundHandler(),
		Credential: func() string { return "replica-token" }})
	defer front.Close()

	get := func(url string, h http.Header) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, url+"/projects/ns/p/mcp", nil)
		for k, v := range h {
			req.Header[k] = v
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	// A client's own token header is not the replica's: the front drops it and sends its own.
	get(front.URL, http.Header{HeaderReplicaToken: {"the client's"}})
	get(owner.URL, http.Header{HeaderReplicaToken: {"replica-token"}, HeaderClientAddr: {"10.9.9.9:1"}})
	mu.Lock()
	defer mu.Unlock()
	if len(tokens) != 2 || tokens[0] != "replica-token" || tokens[1] != "replica-token" {
		t.Errorf("the owner's Trusted saw tokens %q, want the front's, then the caller's own", tokens)
	}
	if gatewayToken {
		t.Error("a replica token reached the gateway")
	}
}
