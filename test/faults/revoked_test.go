//go:build faults

package faults

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
)

// reviewTTL is the suite controller's --gateway-review-ttl.
const reviewTTL = 2 * time.Second

// revokedSpender: a user whose RoleBinding is removed while it spends its own review budget on
// made-up project paths (which once kept its last verdict standing for 10 minutes) is refused
// on its session once the verdict's TTL is past, and stays refused.
func (s *suite) revokedSpender(t *testing.T) {
	s.fault(t, row{fault: "a revoked user spending its budget: its RoleBinding removed while it sprays made-up project paths",
		sees:       "its session's requests get 403 once `--gateway-review-ttl` (2 s here) has passed since the removal, each of them, however it spends its budget; its spray gets 403, and 429 past its review budget",
		guaranteed: "a verdict stands past its TTL only when its review fails, never for want of budget (past it: 429); a stale verdict is reviewed again from an allowance of its own, which a spray of new paths cannot spend",
	}, func(t *testing.T, r *row) {
		key := s.project(t, "revoked", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{s.stdio("s")}}, true)
		token, binding := s.revocableToken(t, "revoked")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		c := mcp.NewClient(&mcp.Implementation{Name: "revoked", Version: "1"}, nil)
		cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: s.endpoint(key),
			HTTPClient: &http.Client{Transport: bearer{token, http.DefaultTransport}}}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
		cancel()
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
		s.undo = append(s.undo, func() { _ = cs.Close() })
		id := 0
		call := func() int { // one call of the session, by hand: its status
			id++
			code, _ := s.handPost(t, key, token, cs.ID(),
				fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"s__echo","arguments":{"text":"still here"}}}`, id))
			return code
		}
		if code := call(); code != http.StatusOK {
			t.Fatalf("a call of the session before the removal: %d", code)
		}

		// The spray: made-up project names in the namespace, each a new access review, from 16
		// workers all along.
		sp := &sprayer{s: s, token: token, codes: map[int]int{}, hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 80}, Timeout: 10 * time.Second}}
		stop := make(chan struct{})
		var workers sync.WaitGroup
		for range 16 {
			workers.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
						sp.one()
					}
				}
			})
		}
		stopped := false
		halt := func() {
			if !stopped {
				stopped = true
				close(stop)
				workers.Wait()
				sp.hc.CloseIdleConnections()
			}
		}
		defer halt()
		deadline := time.Now().Add(20 * time.Second)
		for sp.count(http.StatusTooManyRequests) == 0 {
			if time.Now().After(deadline) {
				t.Fatal("the spray never spent its review budget")
			}
			time.Sleep(50 * time.Millisecond)
		}

		if err := s.env.Client.Delete(context.Background(), binding); err != nil {
			t.Fatal(err)
		}
		removed := time.Now()
		// The session's verdict is fresh for the TTL after its last review, and the API server's
		// authorizer follows RoleBindings by watch, within a moment. The session asks nothing
		// meanwhile; from then on every call of its comes right after a burst of the spray, which
		// spends whatever the budget took in since: the attacker's own timing.
		time.Sleep(time.Until(removed.Add(reviewTTL + time.Second)))
		var first time.Duration
		calls, allowed := 0, 0
		for end := time.Now().Add(3 * reviewTTL); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			sp.burst(64)
			if calls == 0 {
				first = time.Since(removed)
			}
			calls++
			if code := call(); code != http.StatusForbidden {
				allowed++
				t.Errorf("a call of the session %s after its RoleBinding was removed, its budget spent, the API server up: %d, want 403",
					time.Since(removed).Round(time.Millisecond), code)
			}
		}
		halt()
		total := 0
		for _, n := range sp.codes {
			total += n
		}
		r.figure("RoleBinding removed during a spray of %d made-up paths (%d × 404, %d × 403, %d × 429, %d × 503); the session's %d calls from %s after (review TTL %s), each right after a burst of 64: %d let through",
			total, sp.codes[http.StatusNotFound], sp.codes[http.StatusForbidden], sp.codes[http.StatusTooManyRequests], sp.codes[http.StatusServiceUnavailable],
			calls, first.Round(time.Millisecond), reviewTTL, allowed)
	})
}

// sprayer sends one user's requests for made-up projects of ns and counts the answers.
type sprayer struct {
	s     *suite
	token string
	hc    *http.Client
	mu    sync.Mutex
	codes map[int]int // 0: no answer
}

// one sends one request for a project no one made.
func (sp *sprayer) one() {
	path := fmt.Sprintf("http://%s/projects/%s/p-%x/mcp", sp.s.addrs.gateway, ns, rand.Uint64())
	req, _ := http.NewRequest(http.MethodPost, path, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	req.Header.Set("Authorization", "Bearer "+sp.token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	code := 0
	if resp, err := sp.hc.Do(req); err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		code = resp.StatusCode
	}
	sp.mu.Lock()
	sp.codes[code]++
	sp.mu.Unlock()
}

// burst sends n at once and waits for their answers.
func (sp *sprayer) burst(n int) {
	var wg sync.WaitGroup
	for range n {
		wg.Go(sp.one)
	}
	wg.Wait()
}

func (sp *sprayer) count(code int) int {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return sp.codes[code]
}

// revocableToken creates a ServiceAccount of ns allowed to use every ProjectMCP there (the
// suite's agent Role) through a RoleBinding of its own, and returns a token for it and the
// binding, whose removal revokes it.
func (s *suite) revocableToken(t *testing.T, name string) (string, *rbacv1.RoleBinding) {
	t.Helper()
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "agent"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}}}
	for _, o := range []client.Object{sa, rb} {
		if err := s.env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	s.undo = append(s.undo, func() { _ = s.env.Client.Delete(ctx, rb); _ = s.env.Client.Delete(ctx, sa) })
	cs, err := kubernetes.NewForConfig(s.env.Config)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token, rb
}
