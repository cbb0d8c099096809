package main

import (
	"context"
	crand "crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/dsh-dev/projectmcp/controllers"
	"github.com/dsh-dev/projectmcp/internal/buckets"
	"github.com/dsh-dev/projectmcp/internal/peer"
)

// With --leader-elect the replicas share the projects: each holds about its share of the
// buckets' Leases (internal/buckets) and serves the projects in them, and its gateway proxies
// a request for any other project to the replica serving it. Without it, this process serves
// every project.

// replicaIdentity names this replica in the Leases: the host (the pod's name in a cluster) and
// a random suffix, so that a restarted container is a new holder.
func replicaIdentity() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "projectmcp"
	}
	b := make([]byte, 3)
	_, _ = crand.Read(b)
	return host + "-" + hex.EncodeToString(b)
}

// advertisedAddress is the gateway address other replicas proxy to: --advertise-address, else
// the bound address when it names a host, else the pod's IP (POD_IP, from the downward API) or
// the host name, with the bound port.
func (f *controllerFlags) advertisedAddress(bound string) (string, error) {
	if f.advertise != "" {
		if _, _, err := net.SplitHostPort(f.advertise); err != nil {
			return "", fmt.Errorf("--advertise-address %q: want host:port: %w", f.advertise, err)
		}
		return f.advertise, nil
	}
	host, port, err := net.SplitHostPort(bound)
	if err != nil {
		return "", err
	}
	if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() {
		return bound, nil
	}
	if ip := os.Getenv("POD_IP"); ip != "" {
		return net.JoinHostPort(ip, port), nil
	}
	name, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("the gateway listens on every address (%s) and neither --advertise-address nor POD_IP says which one other replicas reach: %w", bound, err)
	}
	return net.JoinHostPort(name, port), nil
}

// checkBuckets refuses a bucket count or handoff bound that cannot work, naming the flag.
func (f *controllerFlags) checkBuckets() error {
	switch {
	case !f.leaderElect:
		return nil
	case f.buckets < 1 || f.buckets > buckets.MaxBuckets:
		return fmt.Errorf("--buckets must be within 1..%d, not %d", buckets.MaxBuckets, f.buckets)
	case f.handoffTimeout <= 0:
		return fmt.Errorf("--handoff-timeout must be positive, not %s", f.handoffTimeout)
	}
	return nil
}

// bucketNamespace is where the bucket Leases live: --leader-election-namespace, else (in a
// cluster) the pod's namespace.
func (f *controllerFlags) bucketNamespace() (string, error) {
	if f.leaderElectNS != "" {
		return f.leaderElectNS, nil
	}
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns, nil
	}
	data, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
	if err != nil {
		return "", fmt.Errorf("the namespace of the bucket Leases: set --leader-election-namespace or POD_NAMESPACE (%w)", err)
	}
	return strings.TrimSpace(string(data)), nil
}

// newHolder makes the Holder of this replica's buckets, its projects built and stopped by r.
func (f *controllerFlags) newHolder(mgr manager.Manager, r *controllers.Reconciler, address string) (*buckets.Holder, error) {
	ns, err := f.bucketNamespace()
	if err != nil {
		return nil, err
	}
	leases, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme()}) // uncached: see buckets.Config
	if err != nil {
		return nil, err
	}
	log := ctrl.Log.WithName("buckets")
	identity := replicaIdentity()
	ctx, cancel := context.WithCancel(context.Background())
	h, err := buckets.New(buckets.Config{
		Client: leases, Namespace: ns, Identity: identity, Address: address, Buckets: f.buckets,
		LeaseDuration: f.leaseDuration, RenewDeadline: f.renewDeadline, RetryPeriod: f.retryPeriod,
		HandoffTimeout: f.handoffTimeout, Log: log,
		Acquired: func(k int, _ int64) {
			go func() {
				if err := r.BucketTaken(ctx, k); err != nil {
					log.Error(err, "listing a bucket's projects failed; they are built at the next resync", "bucket", k)
				}
			}()
		},
		Release: func(ctx context.Context, k int) error {
			start := time.Now()
			if err := r.BucketReleased(ctx, k); err != nil {
				return err
			}
			log.Info("Stopped a bucket's projects", "bucket", k, "took", time.Since(start).Round(time.Millisecond).String())
			return nil
		},
	})
	if err != nil {
		cancel()
		return nil, err
	}
	log.Info("Sharing projects by bucket", "buckets", f.buckets, "namespace", ns, "identity", identity, "address", address)
	return h, mgr.Add(manager.RunnableFunc(func(runCtx context.Context) error {
		defer cancel()
		h.Run(runCtx)
		return nil
	}))
}

// bucketsSettled is the readiness of a replica sharing projects: it has made its first moves
// (taken the buckets it could), and it is not stopping.
func bucketsSettled(h *buckets.Holder) func(*http.Request) error {
	return func(*http.Request) error {
		select {
		case <-h.Stopping():
			return errors.New("stopping: handing the buckets off")
		default:
		}
		select {
		case <-h.Settled():
			return nil
		default:
			return errors.New("taking buckets")
		}
	}
}

// proxyWait is how long a request for a project whose bucket is between holders waits for the
// next one before it is answered 503: at least the ready budget's default, and long enough for
// a dead replica's bucket to be taken (a lease duration and a tick), so that a move costs a
// client a wait rather than a failure.
func (f *controllerFlags) proxyWait() time.Duration {
	return max(5*time.Second, f.leaseDuration+f.retryPeriod)
}

// serving tells the gateway which projects this replica serves now (their bucket's); nil when
// it serves every project.
func serving(h *buckets.Holder) func(types.NamespacedName) (int64, bool) {
	if h == nil {
		return nil
	}
	return func(key types.NamespacedName) (int64, bool) {
		k := h.Pins().Of(key)
		if epoch, ok := h.Serving(k); ok {
			return epoch, true
		}
		epoch, _ := h.Tenure(k) // a late renewal: not served, but states keep the tenure's epoch
		return epoch, false
	}
}

// front is the gateway's router among the replicas; nil when this process serves every project.
// With auth (--replica-token-file) it sends this replica's token with what it proxies, and
// believes a proxied request's client only from a replica whose token is of its own identity.
func (f *controllerFlags) front(h *buckets.Holder, auth *replicaAuth) func(http.Handler) http.Handler {
	if h == nil {
		return nil
	}
	var credential func() string
	if auth != nil {
		credential = auth.credential
	}
	scheme := "http"
	if f.gatewayTLSCert != "" {
		scheme = "https"
	}
	return func(next http.Handler) http.Handler {
		return &buckets.Router{Ownership: h, BucketOf: h.Pins().Of, Next: next, Identity: h.Identity(),
			Address: h.Advertised(), Scheme: scheme, Transport: f.proxyTransport(), Wait: f.proxyWait(),
			Credential: credential, Trusted: replicaTrusted(h.Replica, auth)}
	}
}

// replicaTrusted says whether a request comes from another replica (fromReplica) and, with
// auth, carries a token of this replica's own identity.
func replicaTrusted(replica func(host string) bool, auth *replicaAuth) func(*http.Request) bool {
	return func(r *http.Request) bool {
		uid, known := peer.UID(r.Context())
		return fromReplica(r.RemoteAddr, replica, peer.Local(r.Context()), uid, known, os.Getuid()) &&
			(auth == nil || auth.vouched(r.Context(), r.Header.Get(buckets.HeaderReplicaToken)))
	}
}

// proxyIdlePerReplica is how many idle connections to each other replica's gateway are kept.
const proxyIdlePerReplica = 256

// fromReplica decides whether a connection from remote is another replica's, whose proxied
// requests say who their client is: it comes from the host of a live replica's address and,
// from this machine or pod (local: the OS can name the process at its other end), from a
// process the OS names as running with this controller's uid (self), unlike a stdio server
// under --server-uid. A local connection whose process the OS does not name is not believed.
func fromReplica(remote string, replica func(host string) bool, local bool, uid int, known bool, self int) bool {
	host, _, err := net.SplitHostPort(remote)
	if err != nil || !replica(host) {
		return false
	}
	if local {
		return known && uid == self
	}
	return true
}

// proxyTransport carries requests to other replicas' gateways. Over TLS it checks their
// certificate as a client of the gateway URL would, also trusting the certificates of the
// gateway's own file (a self-signed one, or a chain that ends in a private CA).
func (f *controllerFlags) proxyTransport() http.RoundTripper {
	t := http.DefaultTransport.(*http.Transport).Clone()
	// A replica that died leaves its Leases for a while: a dial to its gone address fails
	// soon (the Router tries the next holder) rather than after the default 30 s.
	t.DialContext = (&net.Dialer{Timeout: 2 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	// Every proxied request of every session goes to a few hosts: the default pool of two
	// idle connections per host had most of them dial anew (and have the owner look up who
	// is calling: internal/peer).
	t.MaxIdleConnsPerHost = proxyIdlePerReplica
	t.MaxIdleConns = 0 // no bound across replicas beyond the one per replica
	if f.gatewayTLSCert == "" {
		return t
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if pem, err := os.ReadFile(f.gatewayTLSCert); err == nil {
		pool.AppendCertsFromPEM(pem)
	}
	t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	if u, err := url.Parse(f.gatewayURL); err == nil && u.Hostname() != "" {
		t.TLSClientConfig.ServerName = u.Hostname()
	}
	return t
}

// serveUntil is the context the gateway serves in: with buckets, it outlives ctx until every
// bucket is handed off and the Holder's lingering is over, so that nothing reaching this
// replica meanwhile fails.
func serveUntil(ctx context.Context, h *buckets.Holder) context.Context {
	if h == nil {
		return ctx
	}
	serve, cancel := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		defer cancel()
		<-ctx.Done()
		<-h.Done()
	}()
	return serve
}
