package access

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
)

// A project with spec.toolAuthorization: RBAC gives each identity only the tools, prompts and
// resources cluster RBAC grants it. Each item is a resource name of the API group the
// ProjectMCP belongs to, which no API serves: SubjectAccessReviews ask about it as they ask
// about any resource, as Kubernetes' own `signers` do. A Role names them as it names anything:
//
//	rules:
//	- apiGroups: ["mcp.dsh.dev"]
//	  resources: ["tools"]
//	  resourceNames: ["shop/github__*", "shop/deploy__status"]
//	  verbs: ["call"]
//
// RBAC matches resource names exactly, so the wildcards are literal names that the gateway asks
// about too (`shop/github__*` grants every tool of server github, `shop/*` everything of the
// project), and `kubectl auth can-i call tools.mcp.dsh.dev/shop/github__*` answers the same
// question the gateway asks. Lists show exactly the items the identity may use, so listing and
// using are decided in one place; a use the identity is not granted is refused naming the
// resource it lacks.

// ItemVerb is the RBAC verb that grants an item.
const ItemVerb = "call"

// Item is one tool, prompt or resource a request lists or uses, as RBAC names it.
type Item struct {
	// Resource is "tools", "prompts" or "resources".
	Resource string
	// Server is the server (of the project's spec) that offers the item.
	Server string
	// Name is the server's own tool or prompt name, or the resource's URI (a template's URI
	// template, for a resource template).
	Name string
	// Template is the resource template a URI is read through ("" for none): a grant of the
	// template grants the URIs it matches.
	Template string
	// Unlisted: no list holds the item (a name a per-server endpoint sends to its server as it
	// is, a URI read through a template). Only the wildcards and the template grant it, so the
	// names the gateway reviews are the catalog's, never ones a caller makes up.
	Unlisted bool
}

// The item resources.
const (
	ResourceTools     = "tools"
	ResourcePrompts   = "prompts"
	ResourceResources = "resources"
)

// ResourceNames are the RBAC resource names that grant an item of project, most general first:
// the project's wildcard, the server's, the item's own (and a resource's template).
func ResourceNames(project string, it Item) []string {
	names := []string{project + "/*", project + "/" + it.Server + "__*"}
	switch {
	case it.Resource == ResourceResources && !hasScheme(it.Template+it.Name):
		// Not a URI (a server may list anything): only the wildcards grant it, so that no
		// listed "URI" such as "github__*" reads as a wildcard of another's.
	case it.Template != "":
		names = append(names, project+"/"+it.Template)
	case it.Unlisted:
	case it.Resource == ResourceResources:
		names = append(names, project+"/"+it.Name)
	default:
		names = append(names, project+"/"+it.Server+"__"+it.Name)
	}
	return names
}

// hasScheme reports whether s begins with a URI scheme and its colon (RFC 3986: a letter, then
// letters, digits, "+", "-" or ".").
func hasScheme(s string) bool {
	scheme, _, ok := strings.Cut(s, ":")
	if !ok || scheme == "" {
		return false
	}
	for i, c := range scheme {
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !letter && (i == 0 || !(c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.')) {
			return false
		}
	}
	return true
}

// ItemAuthorizer is an Authorizer that also decides which of a project's items a caller may
// list and use (spec.toolAuthorization: RBAC).
type ItemAuthorizer interface {
	// Permit reports for each item whether the identity who may use it.
	// An item whose review cannot be made, and has no verdict to fall back on, is not permitted.
	Permit(ctx context.Context, who Identity, project types.NamespacedName, items []Item) []bool
}

// DeniedItem is a use of an item RBAC does not grant the caller.
type DeniedItem struct {
	Project string
	Item    Item
}

func (d *DeniedItem) Error() string {
	names := ResourceNames(d.Project, d.Item)
	kind := strings.TrimSuffix(d.Item.Resource, "s")
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = fmt.Sprintf("%q", n)
	}
	return fmt.Sprintf("%s %q of server %q is not allowed for this identity: the project authorizes %ss by RBAC, and no Role grants the verb %q on %s.%s named %s",
		kind, d.Item.Name, d.Item.Server, kind, ItemVerb, d.Item.Resource, v1alpha1.GroupVersion.Group, strings.Join(quoted, " or "))
}

// itemMethods are the methods that use an item: each must name it, or it is refused on an RBAC
// project. Any request that names an item is checked, whatever its method (a subscription a
// listen stream opens carries the listen's item).
var itemMethods = map[string]bool{
	"tools/call": true, "prompts/get": true, "resources/read": true, "resources/subscribe": true, "completion/complete": true,
}

// UsesItem says whether method uses a tool, prompt or resource (which it must name).
func UsesItem(method string) bool { return itemMethods[method] }

// maxItemEntries bounds the item verdicts cached (by subject, project and resource name).
const maxItemEntries = 32768

// reviewConcurrency bounds the item reviews of one user in flight at once, all its lists and
// uses together.
const reviewConcurrency = 8

type itemKey struct {
	// subject is a hash of who the review asks about (subjectOf): every token of one identity
	// shares its verdicts, so minting tokens multiplies no review.
	subject  [32]byte
	project  types.NamespacedName
	resource string
	name     string
}

type itemVerdict struct {
	allowed bool
	fresh   time.Time
	// expires is when the review's verdict goes, however often it is claimed meanwhile: a
	// verdict no review could renew never outlives MaxStale.
	expires time.Time
}

// errOverBudget ends an item review the user's budget did not allow.
var errOverBudget = errors.New("over the item review budget")

// Permit implements ItemAuthorizer: for each item, whether RBAC grants the token's user the
// verb call on one of its resource names. Verdicts are cached as the `use` ones are (fresh for
// TTL, standing up to MaxStale more when a review fails); the most general names are asked
// first, so an identity granted the whole project costs one review, one granted whole servers
// one per server. Items granted one by one cost a review each: at most ListItemReviews of one
// list are reviewed so (the rest are withheld), and the user's item reviews are bounded by
// ItemReviewRate, on ItemClient, so a long list never delays anyone's authentication.
func (a *KubernetesAuth) Permit(ctx context.Context, who Identity, key types.NamespacedName, items []Item) []bool {
	a.init()
	out := make([]bool, len(items))
	token := who.token
	if token == "" {
		return out
	}
	sum := sha256.Sum256([]byte(token))
	u, status, _ := a.user(ctx, token, sum, sourceOf(who.Addr), a.Clock.Now())
	if status != 0 {
		return out
	}
	subject := subjectOf(u)
	b := a.itemBudget(u.Username)
	names := make([][]string, len(items))
	for i, it := range items {
		names[i] = ResourceNames(key.Name, it)
	}
	beyond, spent := 0, 0
	// One round per level of generality: the project's wildcard, the servers', the items'.
	for level := 0; ; level++ {
		ask := map[[2]string]bool{} // resource, name
		for i, it := range items {
			if out[i] || level >= len(names[i]) {
				continue
			}
			rn := [2]string{it.Resource, names[i][level]}
			if _, asked := ask[rn]; !asked && level >= itemLevel && len(ask) >= a.ListItemReviews {
				beyond++ // withheld: past the names one list may review
				continue
			}
			ask[rn] = false
		}
		if len(ask) == 0 {
			break
		}
		spent += a.review(ctx, u, subject, key, ask, b)
		for i, it := range items {
			if !out[i] && level < len(names[i]) && ask[[2]string{it.Resource, names[i][level]}] {
				out[i] = true
			}
		}
	}
	if beyond > 0 || spent > 0 {
		b.say(a, key, u, len(items), beyond, spent)
	}
	return out
}

// itemLevel is the level of ResourceNames that names an item alone (a template's, for a URI
// read through it); the two before it are the wildcards.
const itemLevel = 2

// review fills in, for each resource and name of ask, whether the user is granted it: from
// the cache, else by a SubjectAccessReview (at most reviewConcurrency of the user's at once).
// It returns how many names went unreviewed for the user's budget (refused).
func (a *KubernetesAuth) review(ctx context.Context, u *authnv1.UserInfo, subject [32]byte, key types.NamespacedName, ask map[[2]string]bool, b *itemBudget) int {
	now := a.Clock.Now()
	var mu sync.Mutex
	got := make(map[[2]string]bool, len(ask))
	spent := 0
	var wg sync.WaitGroup
	for rn := range ask {
		ik := itemKey{subject, key, rn[0], rn[1]}
		if v, ok := a.items.Get(ik); ok && now.Before(v.(itemVerdict).fresh) {
			mu.Lock()
			got[rn] = v.(itemVerdict).allowed
			mu.Unlock()
			continue
		}
		select {
		case b.slots <- struct{}{}:
		case <-ctx.Done(): // the caller left: the rest are refused unasked
			continue
		}
		wg.Go(func() {
			defer func() { <-b.slots }()
			allowed, over := a.verdict(ctx, u, ik, b)
			mu.Lock()
			defer mu.Unlock()
			got[rn] = allowed
			if over {
				spent++
			}
		})
	}
	wg.Wait()
	maps.Copy(ask, got)
	return spent
}

// verdict is whether the user is granted ik, reviewed once however many requests ask at once:
// while a stale verdict is reviewed again, the others take it (as knownUser does for tokens);
// with none, they wait for the one review. A review that fails keeps the stale verdict, or
// refuses. A review the user's budget does not allow refuses (over is true), whatever the last
// verdict was: a stale verdict is reviewed again within the budget's renewal part, which new
// names cannot spend.
func (a *KubernetesAuth) verdict(ctx context.Context, u *authnv1.UserInfo, ik itemKey, b *itemBudget) (allowed, over bool) {
	now := a.Clock.Now()
	a.mu.Lock()
	var stale *itemVerdict
	if v, ok := a.items.Get(ik); ok {
		iv := v.(itemVerdict)
		if now.Before(iv.fresh) {
			a.mu.Unlock()
			return iv.allowed, false
		}
		if !b.renew.AllowN(now, 1) {
			a.mu.Unlock()
			return false, true
		}
		stale = &iv
		if left := iv.expires.Sub(now); left > 0 { // the claim
			a.items.Add(ik, itemVerdict{iv.allowed, now.Add(a.ReviewTimeout), iv.expires}, left)
		}
	}
	a.mu.Unlock()
	flight := fmt.Sprintf("%x/%s/%s/%s", ik.subject, ik.project, ik.resource, ik.name)
	res, err, _ := a.itemFlights.Do(flight, func() (any, error) {
		if stale == nil && !b.fresh.AllowN(a.Clock.Now(), 1) {
			return false, errOverBudget
		}
		// Shared by every request that asked meanwhile: not the first one's to cancel
		// (ReviewTimeout bounds it).
		allowed, err := a.reviewItem(context.WithoutCancel(ctx), u, ik.project.Namespace, ik.resource, ik.name)
		if err == nil {
			now := a.Clock.Now()
			a.items.Add(ik, itemVerdict{allowed, now.Add(a.TTL), now.Add(a.TTL + a.MaxStale)}, a.TTL+a.MaxStale)
		}
		return allowed, err
	})
	switch {
	case errors.Is(err, errOverBudget):
		return false, true
	case err != nil && stale != nil:
		return stale.allowed, false // the API server cannot answer: the last verdict stands
	case err != nil:
		return false, false
	}
	return res.(bool), false
}

// reviewItem asks a SubjectAccessReview of ItemClient whether the user may call the named item.
func (a *KubernetesAuth) reviewItem(ctx context.Context, u *authnv1.UserInfo, namespace, resource, name string) (bool, error) {
	return a.accessReview(ctx, a.ItemClient, u, authzv1.ResourceAttributes{
		Namespace: namespace, Name: name, Verb: ItemVerb,
		Group: v1alpha1.GroupVersion.Group, Resource: resource,
	})
}

// itemBudget is one user's allowance of item reviews: a rate for names with no verdict
// (fresh), one as large for verdicts gone stale (renew), which new names cannot spend, and
// the places for its reviews in flight.
type itemBudget struct {
	fresh, renew *rate.Limiter
	slots        chan struct{}
	// said is when a withheld list was last logged (Unix nanoseconds), so that a user listing
	// over and over logs a line a minute.
	said atomic.Int64
}

// itemBudget is the user's item review budget.
func (a *KubernetesAuth) itemBudget(user string) *itemBudget {
	a.mu.Lock()
	defer a.mu.Unlock()
	if v, ok := a.itemUsers.Get(user); ok {
		return v.(*itemBudget)
	}
	b := &itemBudget{fresh: rate.NewLimiter(a.ItemReviewRate, a.ItemReviewBurst), renew: rate.NewLimiter(a.ItemReviewRate, a.ItemReviewBurst),
		slots: make(chan struct{}, reviewConcurrency)}
	a.itemUsers.Add(user, b, time.Hour)
	return b
}

// say logs, at most once a minute per user, that a list of its was cut short: by the names
// one list may review, or by its budget. The line names the user and the project, never a
// token or a session.
func (b *itemBudget) say(a *KubernetesAuth, key types.NamespacedName, u *authnv1.UserInfo, listed, beyond, spent int) {
	now := a.Clock.Now().UnixNano()
	last := b.said.Load()
	if now-last < int64(time.Minute) || !b.said.CompareAndSwap(last, now) {
		return
	}
	a.Log.Info("RBAC items withheld: grant whole servers (<project>/<server>__*) to identities that use this many items",
		"projectmcp", key.String(), "user", u.Username, "items", listed,
		"pastListBound", beyond, "listBound", a.ListItemReviews, "namesPastBudget", spent, "reviewsPerSecond", float64(a.ItemReviewRate))
}

// subjectOf is a hash of who a SubjectAccessReview asks about: the user's name, uid, groups and
// extra attributes, all a review's answer depends on besides the resource.
func subjectOf(u *authnv1.UserInfo) [32]byte {
	h := sha256.New()
	field := func(s string) { fmt.Fprintf(h, "%d:%s", len(s), s) }
	field(u.Username)
	field(u.UID)
	groups := slices.Clone(u.Groups)
	slices.Sort(groups)
	fmt.Fprintf(h, "%d", len(groups))
	for _, g := range groups {
		field(g)
	}
	keys := slices.Sorted(maps.Keys(u.Extra))
	fmt.Fprintf(h, "%d", len(keys))
	for _, k := range keys {
		field(k)
		fmt.Fprintf(h, "%d", len(u.Extra[k]))
		for _, v := range u.Extra[k] {
			field(v)
		}
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return sum
}

// extraOf is a user's extra attributes as a SubjectAccessReview carries them.
func extraOf(u *authnv1.UserInfo) map[string]authzv1.ExtraValue {
	extra := map[string]authzv1.ExtraValue{}
	for k, v := range u.Extra {
		extra[k] = authzv1.ExtraValue(v)
	}
	return extra
}

// Keep is page without the items the caller may not use. An item of no server (the routes
// changed since the SDK's page was made) is withheld.
func Keep[T any](ctx context.Context, ia ItemAuthorizer, key types.NamespacedName, who Identity, page []*T, itemOf func(*T) Item) []*T {
	items := make([]Item, len(page))
	for i, it := range page {
		items[i] = itemOf(it)
	}
	ok := ia.Permit(ctx, who, key, items)
	out := make([]*T, 0, len(page))
	for i, it := range page {
		if ok[i] && items[i].Server != "" {
			out = append(out, it)
		}
	}
	return out
}
