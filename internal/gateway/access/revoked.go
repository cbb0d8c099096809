package access

import (
	"context"
	"crypto/sha256"
	"net/http"

	"k8s.io/apimachinery/pkg/types"
)

// Revocable is an Authorizer that can tell, from what it holds and without a review, that an
// identity's access to a project was taken away since its stream opened: the last verdict on
// its token refused it, or the API server refused the token itself. The gateway's sweep ends
// the long-lived streams (GET streams, listens) of such identities, which no request
// re-authorizes, and has their verdicts reviewed again in the background (Recheck) so that
// what it holds stays current though no request comes.
type Revocable interface {
	Revoked(who Identity, key types.NamespacedName) bool
	// Recheck decides who's access to the project as its next request would: from a fresh
	// verdict, or by a review within its user's budgets when the verdict is stale or gone.
	Recheck(ctx context.Context, who Identity, key types.NamespacedName)
}

// Recheck implements Revocable: Authorize, for a request carrying who's token from who's
// address. Local mode's identities carry no token and have nothing to recheck.
func (a *KubernetesAuth) Recheck(ctx context.Context, who Identity, key types.NamespacedName) {
	if who.token == "" {
		return
	}
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, "/", http.NoBody)
	if err != nil {
		return
	}
	r.Header.Set("Authorization", "Bearer "+who.token)
	r.RemoteAddr = who.Addr
	a.Authorize(ctx, r, key)
}

// Revoked implements Revocable. A verdict it no longer holds is not a refusal: the next
// Recheck, or the client's next request, decides again.
func (a *KubernetesAuth) Revoked(who Identity, key types.NamespacedName) bool {
	if who.token == "" {
		return false
	}
	a.init()
	sum := sha256.Sum256([]byte(who.token))
	if a.isInvalid(sum) {
		return true
	}
	v, ok := a.decisions.Get(decisionKey{sum, key})
	if !ok {
		return false
	}
	d := v.(decision)
	return d.status == http.StatusUnauthorized || d.status == http.StatusForbidden
}
