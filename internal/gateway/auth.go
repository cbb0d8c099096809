package gateway

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
	// Authorize returns 0 when allowed, else an HTTP status (401 or 403) and a message.
	Authorize(ctx context.Context, r *http.Request, project types.NamespacedName) (int, string)
}

// authorize applies the configured access rule: the Authorizer in cluster mode, loopback
// callers and Host headers (against DNS rebinding) in local mode.
func (g *Gateway) authorize(r *http.Request, key types.NamespacedName) (int, string) {
	if g.opts.Auth != nil {
		return g.opts.Auth.Authorize(r.Context(), r, key)
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil || !isLoopback(host) {
		return http.StatusForbidden, "the local gateway accepts loopback callers only"
	}
	h := r.Host
	if hh, _, err := net.SplitHostPort(h); err == nil {
		h = hh
	}
	if !isLoopback(h) {
		return http.StatusForbidden, fmt.Sprintf("Host %q is not a loopback name (DNS rebinding protection)", r.Host)
	}
	return 0, ""
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
// a SubjectAccessReview for verb "use" on the ProjectMCP. Both verdicts are cached briefly,
// keyed by a hash of the token (never the token): a session's requests do not each cost two
// API calls, a token is reviewed once whatever paths it asks for, and the caches are bounded
// (maxAuthEntries each; expired entries are swept when a cache is full, then arbitrary ones),
// so a caller spraying paths costs one access review per new path and no unbounded memory.
type KubernetesAuth struct {
	Client kubernetes.Interface
	TTL    time.Duration
	Clock  clock.PassiveClock // default: real

	mu        sync.Mutex
	users     map[[32]byte]userEntry   // token hash → who (or 401)
	decisions map[decisionKey]decision // (token hash, project) → verdict
}

// maxAuthEntries bounds each cache.
const maxAuthEntries = 4096

type decisionKey struct {
	token   [32]byte
	project types.NamespacedName
}

type userEntry struct {
	user    *authnv1.UserInfo // nil: the token is not valid
	expires time.Time
}

type decision struct {
	status  int
	message string
	expires time.Time
}

func (a *KubernetesAuth) now() time.Time {
	if a.Clock != nil {
		return a.Clock.Now()
	}
	return time.Now()
}

func (a *KubernetesAuth) ttl() time.Duration {
	if a.TTL > 0 {
		return a.TTL
	}
	return 30 * time.Second
}

// Authorize implements Authorizer.
func (a *KubernetesAuth) Authorize(ctx context.Context, r *http.Request, key types.NamespacedName) (int, string) {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		return http.StatusUnauthorized, "a bearer token is required"
	}
	sum := sha256.Sum256([]byte(token))
	now := a.now()
	dk := decisionKey{sum, key}
	a.mu.Lock()
	if d, ok := a.decisions[dk]; ok && now.Before(d.expires) {
		a.mu.Unlock()
		return d.status, d.message
	}
	u, known := a.users[sum]
	a.mu.Unlock()
	if !known || !now.Before(u.expires) {
		user, status := a.authenticate(ctx, token)
		if status == http.StatusInternalServerError {
			return status, "token review failed"
		}
		u = userEntry{user: user, expires: now.Add(a.ttl())}
		a.mu.Lock()
		a.users = put(a.users, sum, u, now, func(e userEntry) time.Time { return e.expires })
		a.mu.Unlock()
	}
	if u.user == nil {
		return http.StatusUnauthorized, "the bearer token is not valid"
	}
	status, msg := a.authorize(ctx, u.user, key)
	if status != http.StatusInternalServerError {
		a.mu.Lock()
		a.decisions = put(a.decisions, dk, decision{status, msg, now.Add(a.ttl())}, now, func(d decision) time.Time { return d.expires })
		a.mu.Unlock()
	}
	return status, msg
}

// put adds an entry to a bounded cache. Callers hold a.mu.
func put[K comparable, V any](m map[K]V, k K, v V, now time.Time, expires func(V) time.Time) map[K]V {
	if m == nil {
		m = map[K]V{}
	}
	if len(m) >= maxAuthEntries {
		for key, e := range m {
			if !now.Before(expires(e)) {
				delete(m, key)
			}
		}
		for key := range m { // still full: drop arbitrary entries down to three quarters
			if len(m) < maxAuthEntries*3/4 {
				break
			}
			delete(m, key)
		}
	}
	m[k] = v
	return m
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
