package gateway

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/dsh-dev/projectmcp/internal/gateway/access"
	"github.com/dsh-dev/projectmcp/internal/registry"
	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// revocable authorizes every bearer token as the principal it names, until it is revoked; it
// says so without a review (access.Revocable).
type revocable struct {
	tokenIsPrincipal
	mu        sync.Mutex
	revoked   map[string]bool
	rechecked []string // principal@project of each Recheck
}

func (a *revocable) Recheck(_ context.Context, who access.Identity, key types.NamespacedName) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.rechecked = append(a.rechecked, who.Principal+"@"+key.String())
}

func (a *revocable) revoke(principal string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.revoked[principal] = true
}

func (a *revocable) Authorize(ctx context.Context, r *http.Request, key types.NamespacedName) (string, int, string) {
	principal, status, msg := a.tokenIsPrincipal.Authorize(ctx, r, key)
	if status == 0 && a.Revoked(access.Identity{Principal: principal}, key) {
		return "", http.StatusForbidden, "revoked"
	}
	return principal, status, msg
}

func (a *revocable) Revoked(who access.Identity, _ types.NamespacedName) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.revoked[who.Principal]
}

// An identity whose access is revoked loses its long-lived streams at the next sweep, which
// no request of theirs re-authorizes: its listen ends with its result, its stateful session
// (and with it its GET stream) is closed. Another identity's listen goes on, however old: a
// client does not listen again when its listen ends. Each sweep has the Authorizer review
// the holders' access again in the background, once per identity, so that a revocation shows
// though no request comes. (Before, both streams stayed open: a listen until its client went,
// a GET stream until SessionTimeout after the session's last request.)
func TestRevokedIdentityLosesItsStreams(t *testing.T) {
	clock := clocktesting.NewFakeClock(time.Now())
	reg := registry.New(clock, logr.Discard())
	t.Cleanup(reg.Shutdown)
	key := types.NamespacedName{Namespace: "ns", Name: "p"}
	reg.SetDesired(key, registry.Desired{})
	auth := &revocable{revoked: map[string]bool{}}
	g := New(Options{Registry: reg, Auth: auth, Clock: clock})
	srv := httptest.NewServer(g)
	t.Cleanup(func() {
		g.shutdown()
		srv.CloseClientConnections()
		srv.Close()
	})
	url := srv.URL + Path(key)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	alice, _, ok := openListenAs(t, ctx, url, "alice", "a", listenBody("1", `{"toolsListChanged":true}`))
	if !ok {
		t.Fatal("alice's listen was refused")
	}
	_, _, ok = openListenAs(t, ctx, url, "bob", "b", listenBody("2", `{"toolsListChanged":true}`))
	if !ok {
		t.Fatal("bob's listen was refused")
	}
	session, err := connectAs(t, url, "alice", "", "2025-11-25")
	if err != nil {
		t.Fatal(err)
	}
	defer session.Close()
	p := g.project(key)

	g.recheckHolders(ctx, g.all())
	g.rechecks.wait()
	auth.mu.Lock()
	rechecked := slices.Sorted(slices.Values(auth.rechecked))
	auth.mu.Unlock()
	if want := []string{"user:alice@ns/p", "user:bob@ns/p"}; !slices.Equal(rechecked, want) {
		t.Fatalf("rechecked %v, want each holder once: %v", rechecked, want)
	}

	auth.revoke("user:alice")
	p.endRevoked()
	if res := nextEvent(t, alice); !strings.Contains(res, `"id":1,"result":{"resultType":"complete"`) {
		t.Fatalf("alice's listen after her access was revoked: %s", res)
	}
	if n := len(p.sessions.served()); n != 0 {
		t.Fatalf("%d stateful sessions still served after their identity's access was revoked", n)
	}
	testutil.Eventually(t, 10*time.Second, "alice's listen to be forgotten", func() bool { return p.listeners.count() == 1 })

	clock.Step(2 * g.opts.SessionTimeout)
	p.endRevoked()
	if n := p.listeners.count(); n != 1 {
		t.Fatalf("bob's listen ended for its age: %d listens", n)
	}
}
