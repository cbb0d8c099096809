package buckets

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/dsh-dev/projectmcp/internal/metrics"
	"github.com/dsh-dev/projectmcp/internal/peer"
)

// HeaderProxiedBy is added to a request each time a replica proxies it to another: the
// sender's gateway address. It counts the hops (maxHops), so views of the Leases that disagree
// for a moment cannot make a loop.
const HeaderProxiedBy = "X-ProjectMCP-Proxied-By"

// HeaderClientAddr and HeaderClientUID carry, on a request one replica proxies to another,
// the address of the client it came from and the uid of the client's process when the proxying
// replica knew it (internal/peer): the owner's gateway then sees the client, not the replica
// (its per-source budgets, a stateless session's name, local mode's principal). They are
// believed only on a connection Trusted says is another replica's; anyone else's are dropped.
const (
	HeaderClientAddr = "X-ProjectMCP-Client-Addr"
	HeaderClientUID  = "X-ProjectMCP-Client-UID"
)

// HeaderReplicaToken carries, on a request one replica proxies to another, a token of the
// proxying replica's own identity (Router.Credential): with it the serving replica can tell
// another replica from any other process at a replica's address (Trusted). It never reaches
// the gateway, nor a further replica.
const HeaderReplicaToken = "X-ProjectMCP-Replica-Token"

// ReplicaAudience is the audience of the tokens replicas vouch for themselves with
// (HeaderReplicaToken): a token for it is of no use against the API server, nor to a
// gateway that wants its own audiences.
const ReplicaAudience = "projectmcp-replica"

// HeaderMoved marks the local gateway's answer to a request it did nothing with because the
// project's bucket was handed off after the Router sent the request there (a 503). The Router
// drops that answer and sends the request on to the bucket's next holder; a client never sees
// the header.
const HeaderMoved = "X-ProjectMCP-Moved"

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
	// Trusted says whether a request's connection is another replica's, whose HeaderClientAddr
	// and HeaderClientUID are then believed (nil: nobody's are). It sees the request's
	// HeaderReplicaToken, which is taken off the request afterwards.
	Trusted func(*http.Request) bool
	// Credential is the token this replica sends with every request it proxies
	// (HeaderReplicaToken); nil or "": none.
	Credential func() string

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
	r = rt.identify(r)
	key, ok := ProjectOf(r.URL.Path)
	if !ok {
		rt.Next.ServeHTTP(w, r)
		return
	}
	k := rt.BucketOf(key)
	visited := visitedBy(r)
	body := keep(r)
	var wait *time.Timer
	unreached := "" // an owner that took no connection: not dialled again while the Leases name it
	for {
		// An attempt that did nothing with the request (the gateway here answered moved, or
		// the owner could not be reached) leaves it to be sent again, from its first byte: the
		// attempt's handler may have put a body of its own in its place.
		r.Body = body
		done := false
		if _, serving := rt.Ownership.Serving(k); serving {
			done = rt.here(w, r)
		} else if owner, known := rt.Ownership.Address(k); known && owner != rt.Address && owner != unreached && len(visited) < maxHops {
			if done = rt.proxied(w, r, owner); !done {
				unreached = owner
			}
		}
		if done || !body.rewind() {
			if !done {
				rt.unavailable(w, k)
			}
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

// identify is r as from the client another replica proxied it for, when r comes from a
// replica (Trusted); any other caller's client headers are dropped.
func (rt *Router) identify(r *http.Request) *http.Request {
	addr, uid := r.Header.Get(HeaderClientAddr), r.Header.Get(HeaderClientUID)
	r.Header.Del(HeaderClientAddr)
	r.Header.Del(HeaderClientUID)
	trusted := addr != "" && rt.Trusted != nil && rt.Trusted(r)
	r.Header.Del(HeaderReplicaToken)
	if !trusted {
		return r
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return r
	}
	n, err := strconv.Atoi(uid)
	out := r.WithContext(peer.WithUID(r.Context(), n, err == nil && n >= 0))
	out.RemoteAddr = addr
	return out
}

// here serves r on this replica's gateway; false when the gateway answered moved (and nothing
// of its answer was written).
func (rt *Router) here(w http.ResponseWriter, r *http.Request) bool {
	cw := &catcher{ResponseWriter: w}
	if len(w.Header()) > 0 {
		cw.before = w.Header().Clone()
	}
	rt.Next.ServeHTTP(cw, r)
	if cw.moved {
		cw.restore()
	}
	return !cw.moved
}

// proxied sends r to the replica at owner; false when it could not be reached (nothing was
// sent).
func (rt *Router) proxied(w http.ResponseWriter, r *http.Request, owner string) bool {
	attempt := &proxyAttempt{owner: owner}
	defer func() { // also when the proxy aborts the handler (a client gone mid-answer)
		if !attempt.unreached {
			metrics.ProxiedRequests.WithLabelValues("proxied").Inc()
		}
	}()
	rt.reverseProxy().ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), attemptKey{}, attempt)))
	return !attempt.unreached
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

// proxyAttempt is one proxying of a request: where to, and whether the owner could not be
// reached.
type proxyAttempt struct {
	owner     string
	unreached bool
}

type attemptKey struct{}

func attemptOf(ctx context.Context) *proxyAttempt {
	a, _ := ctx.Value(attemptKey{}).(*proxyAttempt)
	return a
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
			pr.Out.URL.Host = attemptOf(pr.In.Context()).owner
			pr.Out.Host = pr.In.Host // the owner checks Host as the client sent it (DNS rebinding)
			pr.SetXForwarded()
			pr.Out.Header.Add(HeaderProxiedBy, rt.Address)
			pr.Out.Header.Set(HeaderClientAddr, pr.In.RemoteAddr) // the client's, when identify believed a replica
			if uid, ok := peer.UID(pr.In.Context()); ok {
				pr.Out.Header.Set(HeaderClientUID, strconv.Itoa(uid))
			}
			if rt.Credential != nil {
				if token := rt.Credential(); token != "" {
					pr.Out.Header.Set(HeaderReplicaToken, token)
				}
			}
		},
		Transport:     transport,
		BufferPool:    copyBuffers{},
		FlushInterval: -1, // SSE streams and long calls: every write goes through at once
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if unreachable(err) && r.Context().Err() == nil {
				attemptOf(r.Context()).unreached = true // the Router tries again, or answers 503
				return
			}
			w.Header().Set("Retry-After", "1")
			http.Error(w, "the replica serving this project could not be reached: "+err.Error(), http.StatusBadGateway)
		},
	}
}

// unreachable reports whether a proxied request failed before anything was sent: the owner's
// address took no connection (a replica that has just stopped).
func unreachable(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// copyBuffers lends the proxy its copy buffers: without them each proxied response allocated
// one of 32 KiB.
type copyBuffers struct{}

var copyBufferPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (copyBuffers) Get() []byte  { return *copyBufferPool.Get().(*[]byte) }
func (copyBuffers) Put(b []byte) { copyBufferPool.Put(&b) }
