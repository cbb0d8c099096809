package main

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// With --metrics-secure, /metrics is served over TLS to callers the API server vouches for: a
// TokenReview of the bearer token, then a SubjectAccessReview of "get" on the non-resource URL
// (the ClusterRole projectmcp-metrics-reader grants it). Metrics name projects, servers and,
// with project labels, namespaces. This is controller-runtime's filters package's contract,
// written here with client-go alone: that package pulls in k8s.io/apiserver and CEL, about
// 11 MB of binary for two API calls.

// metricsReviewTTL is how long a review's verdict is kept: a scrape every 15 to 30 s then costs
// no API call, and a revoked binding takes effect within a minute. A refusal is kept for less,
// so a binding just made works soon.
const (
	metricsAllowTTL = time.Minute
	metricsDenyTTL  = 10 * time.Second
	// metricsCacheSize bounds the verdicts kept; past it they are all dropped (a scraper or two
	// is the expected load, so the bound only matters to a caller spraying tokens).
	metricsCacheSize = 256
	// metricsReviewsAtOnce bounds the reviews under way: a caller spraying tokens gets 429
	// rather than a review each from the API server.
	metricsReviewsAtOnce = 4
)

// metricsSecureOptions are the metrics server's options with --metrics-secure: TLS with a
// certificate made in memory at start (never read from a directory a server could write), and
// the review filter.
func metricsSecureOptions(o metricsserver.Options) (metricsserver.Options, error) {
	pemCert, pemKey, err := certutil.GenerateSelfSignedCertKey("localhost", []net.IP{net.IPv4(127, 0, 0, 1)}, nil)
	if err != nil {
		return o, err
	}
	pair, err := tls.X509KeyPair(pemCert, pemKey)
	if err != nil {
		return o, err
	}
	o.SecureServing = true
	o.TLSOpts = append(o.TLSOpts, func(c *tls.Config) {
		c.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return &pair, nil }
		c.NextProtos = []string{"http/1.1"} // a scrape needs no HTTP/2, nor its rapid-reset exposure
		c.MinVersion = tls.VersionTLS12
	})
	o.FilterProvider = metricsReviewFilter
	return o, nil
}

// metricsReviewFilter is the metrics server's FilterProvider: it reviews each request's bearer
// token and its right to the path with the API server.
func metricsReviewFilter(cfg *rest.Config, hc *http.Client) (metricsserver.Filter, error) {
	cs, err := kubernetes.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, err
	}
	r := newMetricsReviewer(apiReview(cs), time.Now)
	return func(log logr.Logger, next http.Handler) (http.Handler, error) {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			code := r.decide(req, log)
			if code != http.StatusOK {
				http.Error(w, http.StatusText(code), code)
				return
			}
			next.ServeHTTP(w, req)
		}), nil
	}, nil
}

// metricsVerdict is a review's outcome (an HTTP status) and until when it is kept.
type metricsVerdict struct {
	code  int
	until time.Time
}

// reviewFunc asks the API server about token's right to get path: 200, 401 (the token is not
// valid) or 403 (its user may not).
type reviewFunc func(ctx context.Context, token, path string) (int, error)

// metricsReviewer decides requests, keeping verdicts by a hash of token and path (never the
// token itself).
type metricsReviewer struct {
	review   reviewFunc
	now      func() time.Time
	slots    chan struct{} // one per review under way
	mu       sync.Mutex
	verdicts map[[32]byte]metricsVerdict
}

func newMetricsReviewer(review reviewFunc, now func() time.Time) *metricsReviewer {
	return &metricsReviewer{review: review, now: now, slots: make(chan struct{}, metricsReviewsAtOnce), verdicts: map[[32]byte]metricsVerdict{}}
}

// decide is the status a request gets before its handler: 405 for a method other than GET or
// HEAD, 401 without a bearer token, else the review's verdict (kept a while), 429 while
// metricsReviewsAtOnce reviews are under way, or 500 when the review failed.
func (r *metricsReviewer) decide(req *http.Request, log logr.Logger) int {
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		return http.StatusMethodNotAllowed
	}
	token, ok := bearerToken(req.Header.Get("Authorization"))
	if !ok {
		return http.StatusUnauthorized
	}
	key := sha256.Sum256([]byte(token + "\x00" + req.URL.Path))
	if code, ok := r.cached(key); ok {
		return code
	}
	select {
	case r.slots <- struct{}{}:
		defer func() { <-r.slots }()
	default:
		return http.StatusTooManyRequests
	}
	code, err := r.review(req.Context(), token, req.URL.Path)
	if err != nil {
		log.Error(err, "reviewing a metrics request failed", "path", req.URL.Path)
		return http.StatusInternalServerError
	}
	r.keep(key, code)
	return code
}

func (r *metricsReviewer) cached(key [32]byte) (int, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.verdicts[key]
	if !ok || !r.now().Before(v.until) {
		return 0, false
	}
	return v.code, true
}

func (r *metricsReviewer) keep(key [32]byte, code int) {
	ttl := metricsDenyTTL
	if code == http.StatusOK {
		ttl = metricsAllowTTL
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.verdicts) >= metricsCacheSize {
		clear(r.verdicts)
	}
	r.verdicts[key] = metricsVerdict{code: code, until: r.now().Add(ttl)}
}

// bearerToken is the token of an "Authorization: Bearer <token>" header.
func bearerToken(header string) (string, bool) {
	scheme, token, ok := strings.Cut(header, " ")
	token = strings.TrimSpace(token)
	return token, ok && strings.EqualFold(scheme, "Bearer") && token != ""
}

// apiReview is the review against the API server: a TokenReview for the API server's own
// audiences (the scraper's ServiceAccount token), then a SubjectAccessReview of "get" on path.
func apiReview(cs kubernetes.Interface) reviewFunc {
	return func(ctx context.Context, token, path string) (int, error) {
		tr, err := cs.AuthenticationV1().TokenReviews().Create(ctx,
			&authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
		if err != nil {
			return 0, err
		}
		if !tr.Status.Authenticated {
			return http.StatusUnauthorized, nil
		}
		u := tr.Status.User
		extra := map[string]authzv1.ExtraValue{}
		for k, v := range u.Extra {
			extra[k] = authzv1.ExtraValue(v)
		}
		sar, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
			User: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra,
			NonResourceAttributes: &authzv1.NonResourceAttributes{Path: path, Verb: "get"},
		}}, metav1.CreateOptions{})
		if err != nil {
			return 0, err
		}
		if !sar.Status.Allowed {
			return http.StatusForbidden, nil
		}
		return http.StatusOK, nil
	}
}
