package gateway

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
)

// UseVerb is the RBAC verb that lets a caller use a project's tools through the gateway:
//
//	rules:
//	- apiGroups: ["mcp.dsh.dev"]
//	  resources: ["projectmcps"]
//	  resourceNames: ["web"]     # optional: one project
//	  verbs: ["use"]
const UseVerb = "use"

// Authorizer decides whether a request may use a project.
type Authorizer interface {
	// Authorize returns who is asking (the principal, see Principal) and 0 when allowed, else
	// an HTTP status (401, 403 or 429) and a message.
	Authorize(ctx context.Context, r *http.Request, project types.NamespacedName) (principal string, status int, msg string)
}

// Principal is how the gateway names the identity a session belongs to: the Kubernetes user
// name and uid (two users of one name at different times are two principals). Sessions are
// bound to it: a request naming a session its principal did not open is answered as if the
// session did not exist.
func Principal(u *authnv1.UserInfo) string { return "user:" + u.Username + "/" + u.UID }

// localPrincipal is the principal of local mode's callers: the local user, told apart by uid
// where the OS says which one is calling (peer.go).
const localPrincipal = "local"

// authorize applies the configured access rule: the Authorizer in cluster mode, loopback
// callers and Host headers (against DNS rebinding) in local mode.
func (g *Gateway) authorize(r *http.Request, key types.NamespacedName) (string, int, string) {
	if g.opts.Auth != nil {
		return g.opts.Auth.Authorize(r.Context(), r, key)
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil || !isLoopback(host) {
		return "", http.StatusForbidden, "the local gateway accepts loopback callers only"
	}
	h := r.Host
	if hh, _, err := net.SplitHostPort(h); err == nil {
		h = hh
	}
	if !isLoopback(h) {
		return "", http.StatusForbidden, fmt.Sprintf("Host %q is not a loopback name (DNS rebinding protection)", r.Host)
	}
	return localPrincipalOf(r.Context()), 0, ""
}

func isLoopback(host string) bool {
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// KubernetesAuth authenticates a bearer token with a TokenReview and authorizes the user with
// a SubjectAccessReview for verb "use" on the ProjectMCP. Both verdicts are cached, keyed by a
// hash of the token (never the token), in bounded LRU caches (apimachinery's), so a session's
// requests do not each cost two API calls and a token is reviewed once whatever paths it asks
// for.
//
// Two rules keep one caller from hurting the others:
//   - each user may cause at most ReviewRate new access reviews a second (burst ReviewBurst),
//     and have at most maxReviewsInFlight waiting at once: a user spraying project paths gets
//     429 for the rest, and every other user's reviews and the controller's own API calls go on;
//   - a verdict is fresh for TTL, and is kept up to MaxStale after that: when a review cannot be
//     made (the API server is unreachable, or the user is over its review rate), the last
//     verdict stands, so live sessions keep working through an API server outage.
type KubernetesAuth struct {
	Client kubernetes.Interface
	TTL    time.Duration
	// MaxStale is how long past TTL a verdict still answers when no review can be made
	// (default 10 minutes).
	MaxStale time.Duration
	// ReviewRate and ReviewBurst bound the new access reviews one user may cause (default 20
	// a second, burst 100).
	ReviewRate  rate.Limit
	ReviewBurst int
	Clock       clock.PassiveClock // default: real

	once      sync.Once
	mu        sync.Mutex            // makes budget's get-or-add atomic
	users     *cache.LRUExpireCache // token hash → userEntry
	decisions *cache.LRUExpireCache // decisionKey → decision
	limiters  *cache.LRUExpireCache // user name → *reviewBudget
	items     *cache.LRUExpireCache // itemKey → itemVerdict (rbac.go)
}

// maxAuthEntries bounds each cache.
const maxAuthEntries = 4096

type decisionKey struct {
	token   [32]byte
	project types.NamespacedName
}

type userEntry struct {
	user  *authnv1.UserInfo // nil: the token is not valid
	fresh time.Time
}

type decision struct {
	principal string
	status    int
	message   string
	fresh     time.Time
}

func (a *KubernetesAuth) init() {
	a.once.Do(func() {
		if a.Clock == nil {
			a.Clock = clock.RealClock{}
		}
		if a.TTL <= 0 {
			a.TTL = 30 * time.Second
		}
		if a.MaxStale <= 0 {
			a.MaxStale = 10 * time.Minute
		}
		if a.ReviewRate <= 0 {
			a.ReviewRate = 20
		}
		if a.ReviewBurst <= 0 {
			a.ReviewBurst = 100
		}
		a.users = cache.NewLRUExpireCacheWithClock(maxAuthEntries, a.Clock)
		a.decisions = cache.NewLRUExpireCacheWithClock(maxAuthEntries, a.Clock)
		a.limiters = cache.NewLRUExpireCacheWithClock(maxAuthEntries, a.Clock)
		a.items = cache.NewLRUExpireCacheWithClock(maxItemEntries, a.Clock)
	})
}

// Authorize implements Authorizer.
func (a *KubernetesAuth) Authorize(ctx context.Context, r *http.Request, key types.NamespacedName) (string, int, string) {
	a.init()
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		return "", http.StatusUnauthorized, "a bearer token is required"
	}
	sum := sha256.Sum256([]byte(token))
	now := a.Clock.Now()
	dk := decisionKey{sum, key}
	var stale *decision
	if v, ok := a.decisions.Get(dk); ok {
		d := v.(decision)
		if now.Before(d.fresh) {
			return d.principal, d.status, d.message
		}
		stale = &d
	}
	u, status := a.user(ctx, token, sum, now)
	switch {
	case status != 0 && stale != nil:
		return stale.principal, stale.status, stale.message // the API server cannot answer: keep the last verdict
	case status != 0:
		return "", status, "token review failed"
	case u == nil:
		return "", http.StatusUnauthorized, "the bearer token is not valid"
	}
	principal := Principal(u)
	b := a.budget(u.Username)
	if !b.take(now) {
		if stale != nil {
			return stale.principal, stale.status, stale.message
		}
		return "", http.StatusTooManyRequests, fmt.Sprintf("%s asked for too many projects at once (more than %d access reviews in flight or %g a second); retry",
			u.Username, maxReviewsInFlight, float64(a.ReviewRate))
	}
	status, msg := a.authorize(ctx, u, key)
	b.done()
	if status == http.StatusInternalServerError {
		if stale != nil {
			return stale.principal, stale.status, stale.message
		}
		return "", status, msg
	}
	a.decisions.Add(dk, decision{principal, status, msg, now.Add(a.TTL)}, a.TTL+a.MaxStale)
	return principal, status, msg
}

// user returns who a token is (nil: not valid), from the cache or a TokenReview; a stale entry
// answers when the review fails. status is 500 when there is no answer at all.
func (a *KubernetesAuth) user(ctx context.Context, token string, sum [32]byte, now time.Time) (*authnv1.UserInfo, int) {
	var stale *userEntry
	if v, ok := a.users.Get(sum); ok {
		e := v.(userEntry)
		if now.Before(e.fresh) {
			return e.user, 0
		}
		stale = &e
	}
	user, status := a.authenticate(ctx, token)
	if status == http.StatusInternalServerError {
		if stale != nil {
			return stale.user, 0
		}
		return nil, status
	}
	a.users.Add(sum, userEntry{user, now.Add(a.TTL)}, a.TTL+a.MaxStale)
	return user, 0
}

// maxReviewsInFlight bounds one user's access reviews waiting on the API server at once: a
// user spraying paths faster than the API server answers gets 429 instead of a queue.
const maxReviewsInFlight = 4

// reviewBudget is one user's allowance of new access reviews: a rate, and a bound on those in
// flight.
type reviewBudget struct {
	rate     *rate.Limiter
	inFlight atomic.Int32
}

func (b *reviewBudget) take(now time.Time) bool {
	if b.inFlight.Add(1) > maxReviewsInFlight {
		b.inFlight.Add(-1)
		return false
	}
	if !b.rate.AllowN(now, 1) {
		b.inFlight.Add(-1)
		return false
	}
	return true
}

func (b *reviewBudget) done() { b.inFlight.Add(-1) }

// budget is the user's review budget.
func (a *KubernetesAuth) budget(user string) *reviewBudget {
	a.mu.Lock()
	defer a.mu.Unlock()
	if v, ok := a.limiters.Get(user); ok {
		return v.(*reviewBudget)
	}
	b := &reviewBudget{rate: rate.NewLimiter(a.ReviewRate, a.ReviewBurst)}
	a.limiters.Add(user, b, time.Hour)
	return b
}

// authenticate asks a TokenReview who the token is: the user, nil for an invalid token, or
// 500 when the review itself failed.
func (a *KubernetesAuth) authenticate(ctx context.Context, token string) (*authnv1.UserInfo, int) {
	tr, err := a.Client.AuthenticationV1().TokenReviews().Create(ctx,
		&authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return nil, http.StatusInternalServerError
	}
	if !tr.Status.Authenticated {
		return nil, 0
	}
	return &tr.Status.User, 0
}

// authorize asks a SubjectAccessReview whether the user may use the project.
func (a *KubernetesAuth) authorize(ctx context.Context, u *authnv1.UserInfo, key types.NamespacedName) (int, string) {
	extra := map[string]authzv1.ExtraValue{}
	for k, v := range u.Extra {
		extra[k] = authzv1.ExtraValue(v)
	}
	sar, err := a.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: u.Username, Groups: u.Groups, UID: u.UID, Extra: extra,
		ResourceAttributes: &authzv1.ResourceAttributes{
			Namespace: key.Namespace, Name: key.Name, Verb: UseVerb,
			Group: v1alpha1.GroupVersion.Group, Version: v1alpha1.GroupVersion.Version, Resource: "projectmcps",
		},
	}}, metav1.CreateOptions{})
	if err != nil {
		return http.StatusInternalServerError, "access review failed"
	}
	if !sar.Status.Allowed {
		return http.StatusForbidden, fmt.Sprintf("%s may not %s projectmcp %s", u.Username, UseVerb, key)
	}
	return 0, ""
}
