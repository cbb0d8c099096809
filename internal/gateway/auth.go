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
// a SubjectAccessReview for verb "use" on the ProjectMCP. Decisions are cached briefly (keyed
// by a hash of the token, never the token) so that a session's requests do not each cost two
// API calls.
type KubernetesAuth struct {
	Client kubernetes.Interface
	TTL    time.Duration
	Clock  clock.PassiveClock // default: real

	mu    sync.Mutex
	cache map[string]decision
}

type decision struct {
	status  int
	message string
	expires time.Time
}

// Authorize implements Authorizer.
func (a *KubernetesAuth) Authorize(ctx context.Context, r *http.Request, key types.NamespacedName) (int, string) {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		return http.StatusUnauthorized, "a bearer token is required"
	}
	sum := sha256.Sum256([]byte(token))
	ck := fmt.Sprintf("%x|%s", sum, key)
	var now time.Time
	if a.Clock != nil {
		now = a.Clock.Now()
	} else {
		now = time.Now()
	}
	a.mu.Lock()
	if d, ok := a.cache[ck]; ok && now.Before(d.expires) {
		a.mu.Unlock()
		return d.status, d.message
	}
	a.mu.Unlock()
	status, msg := a.review(ctx, token, key)
	// Only verdicts on valid tokens are cached: random tokens must not grow the cache.
	if status != http.StatusInternalServerError && status != http.StatusUnauthorized {
		a.mu.Lock()
		if a.cache == nil {
			a.cache = map[string]decision{}
		}
		for k, d := range a.cache { // expired entries go as new ones come
			if now.After(d.expires) {
				delete(a.cache, k)
			}
		}
		ttl := a.TTL
		if ttl <= 0 {
			ttl = 30 * time.Second
		}
		a.cache[ck] = decision{status, msg, now.Add(ttl)}
		a.mu.Unlock()
	}
	return status, msg
}

func (a *KubernetesAuth) review(ctx context.Context, token string, key types.NamespacedName) (int, string) {
	tr, err := a.Client.AuthenticationV1().TokenReviews().Create(ctx,
		&authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return http.StatusInternalServerError, "token review failed"
	}
	if !tr.Status.Authenticated {
		return http.StatusUnauthorized, "the bearer token is not valid"
	}
	u := tr.Status.User
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
