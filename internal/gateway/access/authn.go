package access

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sync/singleflight"
	"golang.org/x/time/rate"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/peer"
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
// where the OS says which one is calling (internal/peer).
const localPrincipal = "local"

// localPrincipalOf is the principal of local user uid, when known.
func localPrincipalOf(uid int, known bool) string {
	if !known {
		return localPrincipal
	}
	return localPrincipal + ":uid:" + strconv.Itoa(uid)
}

// LocalRule is local mode's access rule: loopback callers only, with a loopback name in Host
// (against DNS rebinding), run by the controller's own user. Another user of the machine is
// refused unless UIDs names it, and so is a caller whose user the OS cannot name, unless AnyUID.
// The zero LocalRule admits the controller's own user alone.
type LocalRule struct {
	// UIDs are the other local users admitted (--local-allow-uid).
	UIDs []int
	// AnyUID admits every local user, and callers whose user the OS cannot name
	// (--local-allow-any-uid).
	AnyUID bool
}

// The flags that widen LocalRule, as its refusals name them.
const (
	LocalAllowUIDFlag    = "--local-allow-uid"
	LocalAllowAnyUIDFlag = "--local-allow-any-uid"
)

// ownUID is the controller's own user.
var ownUID = os.Getuid()

// Authorize returns the caller's principal and 0, else 403 and why: which user was refused,
// and the flag that admits it.
func (l LocalRule) Authorize(r *http.Request) (string, int, string) {
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
	uid, known := peer.OfRequest(r)
	switch {
	case l.AnyUID:
	case !known:
		return "", http.StatusForbidden, fmt.Sprintf("the local gateway admits its own user (uid %d) alone, and the system does not say which user is calling; %s admits every local user",
			ownUID, LocalAllowAnyUIDFlag)
	case uid != ownUID && !slices.Contains(l.UIDs, uid):
		return "", http.StatusForbidden, fmt.Sprintf("the local gateway admits its own user (uid %d), not uid %d; %s %d admits that user, %s every local user",
			ownUID, uid, LocalAllowUIDFlag, uid, LocalAllowAnyUIDFlag)
	}
	return localPrincipalOf(uid, known), 0, ""
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
// Four rules keep one caller from hurting the others:
//   - a token the gateway does not know costs a TokenReview only within two budgets, one for
//     all callers (NewTokenRate) and one per source address (SourceRate): past either, 429 at
//     once, so a flood of made-up tokens neither reaches the API server nor queues other users'
//     reviews behind it. A token known to be valid (fresh or stale) is never charged;
//   - invalid tokens are remembered in a small cache of their own, so a flood of them never
//     evicts a valid user's verdict;
//   - each user may cause at most ReviewRate new access reviews a second (burst ReviewBurst),
//     and have at most maxReviewsInFlight waiting at once: a user spraying project paths gets
//     429 for the rest, and every other user's reviews and the controller's own API calls go on.
//     Reviews of verdicts gone stale draw on an allowance of their own of the same size, which
//     no spray of new paths can spend;
//   - every review is bounded by ReviewTimeout, and a verdict is fresh for TTL and kept up to
//     MaxStale after that: when a review fails (the API server is unreachable or does not
//     answer in time), the last verdict stands, so live sessions keep working through an API
//     server outage. A user over its budget gets 429, never the last verdict: a user whose
//     grant was revoked cannot keep it by spending its own budget.
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
	// NewTokenRate and NewTokenBurst bound the TokenReviews of tokens the gateway does not
	// know, all callers together (default 50 a second, burst 100).
	NewTokenRate  rate.Limit
	NewTokenBurst int
	// SourceRate and SourceBurst bound them per source: the caller's IP address, an IPv6
	// caller's /64 (default 5 a second, burst 20).
	SourceRate  rate.Limit
	SourceBurst int
	// ReviewTimeout bounds each TokenReview and SubjectAccessReview (default 5 s).
	ReviewTimeout time.Duration
	// ItemClient makes the RBAC item reviews (rbac.go; default: Client). Give it a client of
	// its own, with its own rate limit: a list of an RBAC project may cost hundreds of reviews,
	// and none of them may queue a TokenReview or a use review behind it.
	ItemClient kubernetes.Interface
	// ItemReviewRate and ItemReviewBurst bound the item reviews one user may cause (default 50
	// a second, burst 512); past them items are withheld, and a use of one is refused.
	ItemReviewRate  rate.Limit
	ItemReviewBurst int
	// ListItemReviews bounds the items of one list reviewed one by one, by their own names
	// (default 256): the rest are withheld, and a line is logged. The wildcards that grant whole
	// servers or the whole project grant any number.
	ListItemReviews int
	// Log says when items are withheld for a bound (never with a token or a session id).
	Log logr.Logger
	// Audiences, when set, are the audiences the gateway accepts: a TokenReview asks for them
	// and a token for none of them is not valid. Empty: the API server's own audiences.
	Audiences []string
	Clock     clock.PassiveClock // default: real

	once sync.Once
	// mu makes the get-or-add of budgets and sources, and the claims of stale verdicts, atomic.
	mu        sync.Mutex
	users     *cache.LRUExpireCache // token hash → userEntry, valid tokens only
	invalid   *cache.LRUExpireCache // token hash → struct{}: tokens the API server refused
	decisions *cache.LRUExpireCache // decisionKey → decision
	limiters  *cache.LRUExpireCache // user name → *reviewBudget
	items     *cache.LRUExpireCache // itemKey → itemVerdict (rbac.go)
	itemUsers *cache.LRUExpireCache // user name → *itemBudget (rbac.go)
	// decisionFlights and itemFlights run one review per key at a time.
	decisionFlights singleflight.Group
	itemFlights     singleflight.Group
	sources         *cache.LRUExpireCache // source → *rate.Limiter
	newTokens       *rate.Limiter
}

// maxAuthEntries bounds each cache of valid verdicts and budgets.
const maxAuthEntries = 4096

// maxInvalidEntries bounds the cache of invalid tokens: it only saves reviews of a client that
// keeps sending the same bad token, and anyone can fill it.
const maxInvalidEntries = 512

type decisionKey struct {
	token   [32]byte
	project types.NamespacedName
}

type userEntry struct {
	user    *authnv1.UserInfo
	fresh   time.Time
	expires time.Time // when it leaves the cache, stale or not
}

type decision struct {
	principal string
	status    int
	message   string
	fresh     time.Time
	// expires is when the review's verdict goes, however often it is claimed meanwhile.
	expires time.Time
}

func (a *KubernetesAuth) init() {
	a.once.Do(func() {
		if a.Clock == nil {
			a.Clock = clock.RealClock{}
		}
		a.TTL = orDefault(a.TTL, 30*time.Second)
		a.MaxStale = orDefault(a.MaxStale, 10*time.Minute)
		a.ReviewTimeout = orDefault(a.ReviewTimeout, 5*time.Second)
		a.ReviewRate = orDefault(a.ReviewRate, 20)
		a.ReviewBurst = orDefault(a.ReviewBurst, 100)
		a.NewTokenRate = orDefault(a.NewTokenRate, DefaultNewTokenRate)
		a.NewTokenBurst = orDefault(a.NewTokenBurst, max(1, 2*int(a.NewTokenRate)))
		a.SourceRate = orDefault(a.SourceRate, DefaultSourceRate)
		a.SourceBurst = orDefault(a.SourceBurst, max(1, 4*int(a.SourceRate)))
		a.ItemReviewRate = orDefault(a.ItemReviewRate, 50)
		a.ItemReviewBurst = orDefault(a.ItemReviewBurst, 512)
		a.ListItemReviews = orDefault(a.ListItemReviews, 256)
		if a.ItemClient == nil {
			a.ItemClient = a.Client
		}
		a.users = cache.NewLRUExpireCacheWithClock(maxAuthEntries, a.Clock)
		a.invalid = cache.NewLRUExpireCacheWithClock(maxInvalidEntries, a.Clock)
		a.decisions = cache.NewLRUExpireCacheWithClock(maxAuthEntries, a.Clock)
		a.limiters = cache.NewLRUExpireCacheWithClock(maxAuthEntries, a.Clock)
		a.items = cache.NewLRUExpireCacheWithClock(maxItemEntries, a.Clock)
		a.itemUsers = cache.NewLRUExpireCacheWithClock(maxAuthEntries, a.Clock)
		a.sources = cache.NewLRUExpireCacheWithClock(maxAuthEntries, a.Clock)
		a.newTokens = rate.NewLimiter(a.NewTokenRate, a.NewTokenBurst)
	})
}

// DefaultNewTokenRate and DefaultSourceRate are the default budgets, a second, of reviews of
// tokens the gateway does not know: all callers together, and per source.
const (
	DefaultNewTokenRate = 50
	DefaultSourceRate   = 5
)

// orDefault is v, or def when v is not positive.
func orDefault[T int | time.Duration | rate.Limit](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
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
	u, status, msg := a.user(ctx, token, sum, sourceOf(r.RemoteAddr), now)
	switch {
	case status == http.StatusInternalServerError && stale != nil:
		return stale.principal, stale.status, stale.message // the review failed: the last verdict stands
	case status != 0:
		return "", status, msg
	}
	return a.decide(ctx, u, dk, now)
}

// decide is the user's verdict on the project of dk: the cached one while fresh, else a
// review's. A key with no verdict is reviewed within the user's budget of new reviews, once
// however many requests ask at once; a stale one within the allowance for reviewing verdicts
// again, by the request that finds it stale, while its others take the last verdict (up to
// ReviewTimeout). The last verdict answers only when the review fails; past the budget the
// answer is 429.
func (a *KubernetesAuth) decide(ctx context.Context, u *authnv1.UserInfo, dk decisionKey, now time.Time) (string, int, string) {
	principal := Principal(u)
	b := a.budget(u.Username)
	a.mu.Lock()
	var stale *decision
	if v, ok := a.decisions.Get(dk); ok {
		d := v.(decision)
		if now.Before(d.fresh) { // another request's claim, or its review's verdict
			a.mu.Unlock()
			return d.principal, d.status, d.message
		}
		if !b.renew.take(now) {
			a.mu.Unlock()
			return "", http.StatusTooManyRequests, a.overBudget(u)
		}
		stale = &d
		if left := d.expires.Sub(now); left > 0 { // the claim
			claimed := d
			claimed.fresh = now.Add(a.ReviewTimeout)
			a.decisions.Add(dk, claimed, left)
		}
	}
	a.mu.Unlock()
	if stale != nil {
		status, msg := a.authorize(ctx, u, dk.project)
		b.renew.done()
		if status == http.StatusInternalServerError {
			return stale.principal, stale.status, stale.message // the review failed: the last verdict stands
		}
		a.remember(dk, principal, status, msg)
		return principal, status, msg
	}
	flight := fmt.Sprintf("%x/%s", dk.token, dk.project)
	res, _, _ := a.decisionFlights.Do(flight, func() (any, error) {
		if !b.fresh.take(a.Clock.Now()) {
			return decision{status: http.StatusTooManyRequests, message: a.overBudget(u)}, nil
		}
		defer b.fresh.done()
		// The review is shared by every request that asked meanwhile: it is not the first
		// one's to cancel (ReviewTimeout bounds it).
		status, msg := a.authorize(context.WithoutCancel(ctx), u, dk.project)
		if status != http.StatusInternalServerError {
			a.remember(dk, principal, status, msg)
		}
		return decision{principal: principal, status: status, message: msg}, nil
	})
	d := res.(decision)
	if d.status == http.StatusInternalServerError || d.status == http.StatusTooManyRequests {
		return "", d.status, d.message
	}
	return principal, d.status, d.message
}

// remember caches a review's verdict: fresh for TTL, standing MaxStale more for when no review
// can be made.
func (a *KubernetesAuth) remember(dk decisionKey, principal string, status int, msg string) {
	now := a.Clock.Now()
	a.decisions.Add(dk, decision{principal, status, msg, now.Add(a.TTL), now.Add(a.TTL + a.MaxStale)}, a.TTL+a.MaxStale)
}

// overBudget is the refusal of a user past its review budget.
func (a *KubernetesAuth) overBudget(u *authnv1.UserInfo) string {
	return fmt.Sprintf("%s asked for too many projects at once (more than %d access reviews in flight or %g a second); retry",
		u.Username, maxReviewsInFlight, float64(a.ReviewRate))
}

// user returns who a token is, from the caches or a TokenReview; a stale entry answers when the
// review fails. A token the caches do not know is reviewed only within the new-token budgets.
// status is 401 for a token that is not valid, 429 past a budget, 500 when there is no answer.
func (a *KubernetesAuth) user(ctx context.Context, token string, sum [32]byte, source string, now time.Time) (*authnv1.UserInfo, int, string) {
	e, fresh, known := a.knownUser(sum, now)
	switch {
	case fresh:
		return e.user, 0, ""
	case known: // stale: reviewed again, uncharged
	case a.isInvalid(sum):
		return nil, http.StatusUnauthorized, invalidToken
	case !a.admit(source, now):
		return nil, http.StatusTooManyRequests, "too many new tokens to review, from this address or from all callers; retry"
	}
	user, err := a.authenticate(ctx, token)
	switch {
	case err != nil && known:
		return e.user, 0, ""
	case err != nil:
		return nil, http.StatusInternalServerError, "token review failed"
	case user == nil:
		a.users.Remove(sum)
		a.invalid.Add(sum, struct{}{}, a.TTL)
		return nil, http.StatusUnauthorized, invalidToken
	}
	a.users.Add(sum, userEntry{user, now.Add(a.TTL), now.Add(a.TTL + a.MaxStale)}, a.TTL+a.MaxStale)
	return user, 0, ""
}

// knownUser looks a valid token up: its entry, whether it is fresh, whether there is one. The
// request that finds an entry stale reviews it again, and the token's other requests meanwhile
// (up to ReviewTimeout) take the last verdict, so a stale token costs one TokenReview however
// many requests it has in flight.
func (a *KubernetesAuth) knownUser(sum [32]byte, now time.Time) (e userEntry, fresh, known bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	v, ok := a.users.Get(sum)
	if !ok {
		return userEntry{}, false, false
	}
	e = v.(userEntry)
	if now.Before(e.fresh) {
		return e, true, true
	}
	if left := e.expires.Sub(now); left > 0 {
		a.users.Add(sum, userEntry{e.user, now.Add(a.ReviewTimeout), e.expires}, left)
	}
	return e, false, true
}

const invalidToken = "the bearer token is not valid"

// isInvalid reports whether the API server refused the token lately.
func (a *KubernetesAuth) isInvalid(sum [32]byte) bool {
	_, ok := a.invalid.Get(sum)
	return ok
}

// admit takes one review of a new token from the source's budget and from the budget of all
// callers; false, with nothing taken, when either is spent.
func (a *KubernetesAuth) admit(source string, now time.Time) bool {
	r := a.sourceBudget(source).ReserveN(now, 1)
	if !r.OK() || r.DelayFrom(now) > 0 {
		r.CancelAt(now)
		return false
	}
	if !a.newTokens.AllowN(now, 1) {
		r.CancelAt(now)
		return false
	}
	return true
}

// sourceBudget is the new-token budget of one source.
func (a *KubernetesAuth) sourceBudget(source string) *rate.Limiter {
	a.mu.Lock()
	defer a.mu.Unlock()
	if v, ok := a.sources.Get(source); ok {
		return v.(*rate.Limiter)
	}
	l := rate.NewLimiter(a.SourceRate, a.SourceBurst)
	a.sources.Add(source, l, time.Hour)
	return l
}

// sourceOf names the source of a request by its remote address (the TCP peer, never a header a
// client could set): the IP address, or for IPv6 its /64, which one host usually holds whole.
// An address that is not IP (a Unix socket) is its own source.
func sourceOf(remoteAddr string) string {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	ip = ip.Unmap()
	if ip.Is4() {
		return ip.String()
	}
	p, _ := ip.WithZone("").Prefix(64)
	return p.String()
}

// maxReviewsInFlight bounds one user's access reviews waiting on the API server at once, in each
// part of its budget: a user spraying paths faster than the API server answers gets 429 instead
// of a queue.
const maxReviewsInFlight = 4

// reviewBudget is one user's allowance of access reviews, in two parts of one size: reviews of
// keys with no verdict (fresh), and reviews of verdicts gone stale (renew). A user spraying
// made-up paths spends the first; the second, which only verdicts already earned can spend,
// keeps their reviews going, so a verdict never outlives its TTL for want of budget.
type reviewBudget struct {
	fresh, renew allowance
}

// allowance is a rate of reviews and a bound on those in flight.
type allowance struct {
	rate     *rate.Limiter
	inFlight atomic.Int32
}

// take takes one review: false, with nothing taken, past the rate or the bound in flight.
func (al *allowance) take(now time.Time) bool {
	if al.inFlight.Add(1) > maxReviewsInFlight {
		al.inFlight.Add(-1)
		return false
	}
	if !al.rate.AllowN(now, 1) {
		al.inFlight.Add(-1)
		return false
	}
	return true
}

// done ends a review take took.
func (al *allowance) done() { al.inFlight.Add(-1) }

// budget is the user's review budget.
func (a *KubernetesAuth) budget(user string) *reviewBudget {
	a.mu.Lock()
	defer a.mu.Unlock()
	if v, ok := a.limiters.Get(user); ok {
		return v.(*reviewBudget)
	}
	b := &reviewBudget{fresh: allowance{rate: rate.NewLimiter(a.ReviewRate, a.ReviewBurst)},
		renew: allowance{rate: rate.NewLimiter(a.ReviewRate, a.ReviewBurst)}}
	a.limiters.Add(user, b, time.Hour)
	return b
}

// authenticate asks a TokenReview who the token is, within ReviewTimeout: the user, nil for a
// token that is not valid (or not for one of Audiences), or the error of the review itself.
func (a *KubernetesAuth) authenticate(ctx context.Context, token string) (*authnv1.UserInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, a.ReviewTimeout)
	defer cancel()
	tr, err := a.Client.AuthenticationV1().TokenReviews().Create(ctx,
		&authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token, Audiences: a.Audiences}}, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	if !tr.Status.Authenticated || !audienceMatches(a.Audiences, tr.Status.Audiences) {
		return nil, nil
	}
	return &tr.Status.User, nil
}

// audienceMatches reports whether a reviewed token is for one of the wanted audiences (any,
// when none is wanted: the API server checked its own).
func audienceMatches(want, got []string) bool {
	if len(want) == 0 {
		return true
	}
	for _, g := range got {
		if slices.Contains(want, g) {
			return true
		}
	}
	return false
}

// authorize asks a SubjectAccessReview whether the user may use the project: 0, 403 naming
// what was refused, or 500 when the review failed.
func (a *KubernetesAuth) authorize(ctx context.Context, u *authnv1.UserInfo, key types.NamespacedName) (int, string) {
	allowed, err := a.accessReview(ctx, a.Client, u, authzv1.ResourceAttributes{
		Namespace: key.Namespace, Name: key.Name, Verb: UseVerb,
		Group: v1alpha1.GroupVersion.Group, Version: v1alpha1.GroupVersion.Version, Resource: "projectmcps",
	})
	switch {
	case err != nil:
		return http.StatusInternalServerError, "access review failed"
	case !allowed:
		return http.StatusForbidden, fmt.Sprintf("%s may not %s projectmcp %s", u.Username, UseVerb, key)
	}
	return 0, ""
}

// accessReview asks one SubjectAccessReview of cs, within ReviewTimeout, whether the user may do
// what attrs say. Every access review of the gateway goes through it, so none waits on a slow
// API server for longer.
func (a *KubernetesAuth) accessReview(ctx context.Context, cs kubernetes.Interface, u *authnv1.UserInfo, attrs authzv1.ResourceAttributes) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, a.ReviewTimeout)
	defer cancel()
	sar, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: u.Username, Groups: u.Groups, UID: u.UID, Extra: extraOf(u), ResourceAttributes: &attrs,
	}}, metav1.CreateOptions{})
	if err != nil {
		return false, err
	}
	return sar.Status.Allowed, nil
}
