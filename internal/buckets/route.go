package buckets

import (
	"context"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/dsh-dev/projectmcp/internal/metrics"
)

// HeaderProxiedBy is added to a request each time a replica proxies it to another: the
// sender's gateway address. It counts the hops (maxHops), so views of the Leases that disagree
// for a moment cannot make a loop.
const HeaderProxiedBy = "X-ProjectMCP-Proxied-By"

// Ownership is what the Router asks of a Holder.
type Ownership interface {
	Serving(k int) (epoch int64, ok bool)
	Address(k int) (address string, ok bool)
}

// Router sends each project request to the replica serving the project's bucket: here (Next),
// or proxied, streaming, to the holder of the bucket's Lease. A request for a bucket nobody
// serves is answered 503 with Retry-After. Requests that name no project go to Next.
type Router struct {
	Ownership Ownership
	// BucketOf is the bucket of a project (Of, with the project's pin label).
	BucketOf func(types.NamespacedName) int
	Next     http.Handler
	// Identity is this replica's name in the Leases (for errors), Address its gateway's
	// (HeaderProxiedBy); Scheme is the owners' gateway scheme.
	Identity string
	Address  string
	Scheme   string
	// Transport carries proxied requests (nil: a transport of the Router's own, like
	// http.DefaultTransport but not shared with the rest of the process).
	Transport http.RoundTripper
	// RetryAfter is what a 503 tells the client to wait (default: 1 s).
	RetryAfter time.Duration
	// Wait is how long a request for a bucket between holders waits for the next one before
	// it is answered 503 (0: not at all).
	Wait time.Duration

	once  sync.Once
	proxy *httputil.ReverseProxy
}

// ProjectOf is the project a gateway path names (/projects/<namespace>/<name>/...), if any.
func ProjectOf(path string) (types.NamespacedName, bool) {
	rest, ok := strings.CutPrefix(path, "/projects/")
	if !ok {
		return types.NamespacedName{}, false
	}
	ns, rest, ok := strings.Cut(rest, "/")
	if !ok || ns == "" {
		return types.NamespacedName{}, false
	}
	name, _, _ := strings.Cut(rest, "/")
	if name == "" {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: ns, Name: name}, true
}

func (rt *Router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key, ok := ProjectOf(r.URL.Path)
	if !ok {
		rt.Next.ServeHTTP(w, r)
		return
	}
	k := rt.BucketOf(key)
	visited := visitedBy(r)
	var wait *time.Timer
	for {
		if _, serving := rt.Ownership.Serving(k); serving {
			rt.Next.ServeHTTP(w, r)
			return
		}
		if owner, known := rt.Ownership.Address(k); known && owner != rt.Address && len(visited) < maxHops {
			metrics.ProxiedRequests.WithLabelValues("proxied").Inc()
			rt.reverseProxy().ServeHTTP(w, withOwner(r, owner))
			return
		}
		// The bucket is between holders: wait a little for the next one, as a call waits
		// for a connection being swapped, before telling the client to come back.
		if wait == nil {
			wait = time.NewTimer(rt.Wait)
			defer wait.Stop()
		}
		select {
		case <-wait.C:
			rt.unavailable(w, k)
			return
		case <-r.Context().Done():
			return
		case <-time.After(ownerPoll):
		}
	}
}

// maxHops bounds how often one request is proxied: by the replica it reached, then by replicas
// that had just handed the bucket off when it arrived. A request may come back to a replica
// that has taken the bucket back meanwhile; two replicas whose views disagree bounce it at
// most this often before one of them waits for the bucket's next holder.
const maxHops = 4

// ownerPoll is how often a request waiting for its bucket's next holder looks again.
const ownerPoll = 25 * time.Millisecond

// visitedBy is the gateway addresses of the replicas that have proxied r.
func visitedBy(r *http.Request) []string {
	var out []string
	for _, v := range r.Header.Values(HeaderProxiedBy) {
		for _, addr := range strings.Split(v, ",") {
			if addr = strings.TrimSpace(addr); addr != "" {
				out = append(out, addr)
			}
		}
	}
	return out
}

// unavailable answers a request whose project no replica serves now: its bucket is between
// holders (a handoff, or a replica gone whose Lease has not expired yet).
func (rt *Router) unavailable(w http.ResponseWriter, k int) {
	metrics.ProxiedRequests.WithLabelValues("unserved").Inc()
	after := rt.RetryAfter
	if after <= 0 {
		after = time.Second
	}
	w.Header().Set("Retry-After", strconv.Itoa(int(max(after.Round(time.Second), time.Second)/time.Second)))
	http.Error(w, "the project's bucket ("+LeaseName(k)+") has no replica serving it now (as replica "+rt.Identity+" sees the Leases): it is moving between replicas; retry", http.StatusServiceUnavailable)
}

type ownerKey struct{}

// withOwner carries the owner's address to the proxy's Rewrite.
func withOwner(r *http.Request, owner string) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), ownerKey{}, owner))
}

func ownerFrom(ctx context.Context) string {
	owner, _ := ctx.Value(ownerKey{}).(string)
	return owner
}

func (rt *Router) reverseProxy() *httputil.ReverseProxy {
	rt.once.Do(rt.newProxy)
	return rt.proxy
}

func (rt *Router) newProxy() {
	scheme := rt.Scheme
	if scheme == "" {
		scheme = "http"
	}
	transport := rt.Transport
	if transport == nil {
		transport = http.DefaultTransport.(*http.Transport).Clone()
	}
	rt.proxy = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = scheme
			pr.Out.URL.Host = ownerFrom(pr.In.Context())
			pr.Out.Host = pr.In.Host // the owner checks Host as the client sent it (DNS rebinding)
			pr.SetXForwarded()
			pr.Out.Header.Add(HeaderProxiedBy, rt.Address)
		},
		Transport:     transport,
		FlushInterval: -1, // SSE streams and long calls: every write goes through at once
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "the replica serving this project could not be reached: "+err.Error(), http.StatusBadGateway)
		},
	}
}
