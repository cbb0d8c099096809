package access

import (
	"crypto/sha256"
	"net/http"

	"k8s.io/apimachinery/pkg/types"
)

// Revocable is an Authorizer that can tell, from what it holds and without a review, that an
// identity's access to a project was taken away since its stream opened: the last verdict on
// its token refused it, or the API server refused the token itself. The gateway's sweep ends
// the long-lived streams (GET streams, listens) of such identities, which no request
// re-authorizes.
type Revocable interface {
	Revoked(who Identity, key types.NamespacedName) bool
}

// Revoked implements Revocable. A verdict it no longer holds is not a refusal: such a stream
// ends at its life's bound instead, and its client's next request is reviewed.
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
