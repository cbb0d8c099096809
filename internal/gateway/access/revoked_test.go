package access

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"
)

// Revoked tells from the verdicts held, with no review: a token allowed is not revoked, one
// whose last verdict refused the project is, and one the auth no longer holds a verdict on
// tells nothing (false).
func TestKubernetesAuthRevoked(t *testing.T) {
	r := allowedMallory(t)
	a, clk, accesses, revoked, ctx, shop, principal, who := r.a, r.clk, r.accesses, r.revoked, r.ctx, r.shop, r.principal, r.who
	if a.Revoked(who, shop) || a.Revoked(Identity{Principal: principal}, shop) {
		t.Fatal("an allowed identity, or one without a token, is revoked")
	}
	revoked.Store(true)
	clk.Step(31 * time.Second) // past the verdict's TTL: the next request reviews it again
	if _, status, _ := a.Authorize(ctx, bearerRequest("mallory"), shop); status != http.StatusForbidden {
		t.Fatalf("after the revocation: %d, want 403", status)
	}
	before := accesses.Load()
	if !a.Revoked(who, shop) {
		t.Fatal("an identity whose last verdict refused the project is not revoked")
	}
	if accesses.Load() != before {
		t.Fatal("Revoked made a review")
	}
	clk.Step(time.Hour) // the verdict has gone from the cache
	if a.Revoked(who, shop) {
		t.Fatal("a verdict no longer held counts as a refusal")
	}
}

// Recheck decides as a request would: a fresh verdict from the cache with no review, a stale
// one by a review, so that Revoked tells of a revocation made since though no request came.
func TestKubernetesAuthRecheck(t *testing.T) {
	r := allowedMallory(t)
	a, clk, accesses, revoked, ctx, shop, principal, who := r.a, r.clk, r.accesses, r.revoked, r.ctx, r.shop, r.principal, r.who
	before := accesses.Load()
	a.Recheck(ctx, who, shop)
	if accesses.Load() != before {
		t.Fatal("Recheck reviewed a fresh verdict")
	}
	revoked.Store(true)
	a.Recheck(ctx, who, shop)
	if a.Revoked(who, shop) {
		t.Fatal("a fresh verdict was overturned before its TTL")
	}
	clk.Step(31 * time.Second) // past the verdict's TTL
	a.Recheck(ctx, who, shop)
	if !a.Revoked(who, shop) {
		t.Fatal("after a Recheck past the TTL, the revocation does not show")
	}
	a.Recheck(ctx, Identity{Principal: principal}, shop) // local mode's: nothing to do
}

// mallory is an identity allowed on shop by a KubernetesAuth whose reviews can be turned to
// refusals (revoked), on a fake clock.
type mallory struct {
	a         *KubernetesAuth
	clk       *clocktesting.FakeClock
	accesses  *atomic.Int32
	revoked   *atomic.Bool
	ctx       context.Context
	shop      types.NamespacedName
	principal string
	who       Identity
}

func allowedMallory(t *testing.T) mallory {
	t.Helper()
	m := mallory{revoked: &atomic.Bool{}, clk: clocktesting.NewFakeClock(time.Now()), ctx: context.Background(),
		shop: types.NamespacedName{Namespace: "ns", Name: "shop"}}
	var cs *fake.Clientset
	cs, m.accesses = revocableClient(m.revoked)
	m.a = &KubernetesAuth{Client: cs, Clock: m.clk}
	principal, status, _ := m.a.Authorize(m.ctx, bearerRequest("mallory"), m.shop)
	if status != 0 {
		t.Fatalf("before the revocation: %d", status)
	}
	m.principal, m.who = principal, NewIdentity(principal, bearerRequest("mallory"))
	return m
}
