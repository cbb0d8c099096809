package gateway

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/dsh-dev/projectmcp/internal/gateway/access"
	"github.com/dsh-dev/projectmcp/internal/gateway/paths"
	"github.com/dsh-dev/projectmcp/internal/registry"
)

// A stateless session's name is a hash that includes its principal: two identities sending
// the same SessionHeader (or the same client name from one address) are two sessions, and no
// part of what the client sent shows in the name.
func TestStatelessIDIncludesPrincipal(t *testing.T) {
	type named struct {
		who     access.Identity
		session string
	}
	header := func(principal, session, addr string) named {
		return named{access.Identity{Principal: principal, Addr: addr}, session}
	}
	for _, tc := range []struct {
		name string
		a, b named
		same bool
	}{
		{"one header, two identities", header("user:alice/1", "s", "10.0.0.1:1"), header("user:bob/2", "s", "10.0.0.1:1"), false},
		{"one header, one identity, two addresses", header("user:alice/1", "s", "10.0.0.1:1"), header("user:alice/1", "s", "10.0.0.2:2"), true},
		{"no header, one client, two identities", header("user:alice/1", "", "10.0.0.1:1"), header("user:bob/2", "", "10.0.0.1:1"), false},
		{"no header, one identity, one address", header("user:alice/1", "", "10.0.0.1:1"), header("user:alice/1", "", "10.0.0.1:2"), true},
		{"header or none", header("user:alice/1", "s", "10.0.0.1:1"), header("user:alice/1", "", "10.0.0.1:1"), false},
	} {
		a, b := paths.StatelessID(tc.a.who, tc.a.session, "agent"), paths.StatelessID(tc.b.who, tc.b.session, "agent")
		if (a == b) != tc.same {
			t.Errorf("%s: %s and %s, want same=%v", tc.name, a, b, tc.same)
		}
		if !regexp.MustCompile(`^s-[0-9a-f]{16}$`).MatchString(a) || strings.Contains(a, "alice") {
			t.Errorf("%s: %q is not a session hash", tc.name, a)
		}
	}
}

// tokenIsPrincipal authorizes every bearer token as the principal it names.
type tokenIsPrincipal struct{}

func (tokenIsPrincipal) Authorize(_ context.Context, r *http.Request, _ types.NamespacedName) (string, int, string) {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return "", http.StatusUnauthorized, "no token"
	}
	return "user:" + token, 0, ""
}

// One identity holds at most MaxSessionsPerPrincipal sessions of a project; past it its new
// sessions are refused, naming the flag, while another identity is still served, and a
// session it ends frees its share.
func TestSessionsPerPrincipalBound(t *testing.T) {
	reg := registry.New(clocktesting.NewFakeClock(time.Now()), logr.Discard())
	defer reg.Shutdown()
	key := types.NamespacedName{Namespace: "ns", Name: "p"}
	reg.SetDesired(key, registry.Desired{})
	g := New(Options{Registry: reg, Auth: tokenIsPrincipal{}, MaxSessionsPerPrincipal: 2})
	srv := httptest.NewServer(g)
	defer func() {
		g.shutdown()
		srv.CloseClientConnections()
		srv.Close()
	}()
	connect := func(token, version string) (*mcp.ClientSession, error) {
		return connectAs(t, srv.URL+Path(key), token, "", version)
	}
	var held []*mcp.ClientSession
	for range 2 {
		cs, err := connect("alice", "2025-11-25")
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, cs)
	}
	if _, err := connect("alice", "2025-11-25"); err == nil || !strings.Contains(err.Error(), "--max-sessions-per-principal") {
		t.Fatalf("a third session of one identity must be refused naming the bound: %v", err)
	}
	bob, err := connect("bob", "2025-11-25")
	if err != nil {
		t.Fatalf("another identity must still be served: %v", err)
	}
	defer bob.Close()
	_ = held[0].Close()
	again, err := connect("alice", "2025-11-25")
	if err != nil {
		t.Fatalf("a session ended frees its share: %v", err)
	}
	_ = again.Close()
	_ = held[1].Close()
}

// One identity's sessions on every endpoint of a project count toward one bound: with a bound
// of 2 per principal, two sessions on the project endpoint leave none for the per-server ones,
// and the project's bound (6, as many as 2 on each of its 3 endpoints) still admits another
// identity. Before the endpoints shared the count, the first identity held 6 sessions and the
// second was refused with "too many sessions".
func TestSessionsPerPrincipalBoundIsPerProject(t *testing.T) {
	reg := registry.New(clocktesting.NewFakeClock(time.Now()), logr.Discard())
	defer reg.Shutdown()
	key := types.NamespacedName{Namespace: "ns", Name: "shop"}
	reg.SetDesired(key, registry.Desired{Servers: []string{"a", "b"}})
	reg.LimitSessions(6)
	g := New(Options{Registry: reg, Auth: tokenIsPrincipal{}, MaxSessionsPerPrincipal: 2})
	srv := httptest.NewServer(g)
	defer func() {
		g.shutdown()
		srv.CloseClientConnections()
		srv.Close()
	}()
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(version, func(t *testing.T) {
			var held []*mcp.ClientSession
			defer func() {
				for _, cs := range held {
					_ = cs.Close()
				}
			}()
			refused := 0
			for e, path := range []string{Path(key), ServerPath(key, "a"), ServerPath(key, "b")} {
				for i := range 2 {
					// A stateless session's name is the project's: one name on two endpoints is one session.
					cs, err := connectAs(t, srv.URL+path, "mallory", fmt.Sprintf("s%d-%d", e, i), version)
					if err != nil {
						if !strings.Contains(err.Error(), "--max-sessions-per-principal") {
							t.Fatalf("a session past the bound on %s: %v, want a refusal naming the bound", path, err)
						}
						refused++
						continue
					}
					held = append(held, cs)
				}
			}
			if len(held) != 2 || refused != 4 {
				t.Fatalf("one identity holds %d sessions over the project's 3 endpoints (%d refused), want 2 (--max-sessions-per-principal=2)", len(held), refused)
			}
			victim, err := connectAs(t, srv.URL+ServerPath(key, "b"), "alice", "s0", version)
			if err != nil {
				t.Fatalf("another identity must still get in: %v", err)
			}
			_ = victim.Close()
		})
	}
}

// connectAs opens a session of endpoint as the principal token names (a stateless one named
// session, mounted by a first request). Each session has connections of its own: a gateway
// served by httptest (not by Serve) closes a taken stream's connection when the stream ends,
// and a new session reusing it from a shared pool could find it reset.
func connectAs(t *testing.T, endpoint, token, session, version string) (*mcp.ClientSession, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	var next http.RoundTripper = tr
	if session != "" {
		next = sessionOn{session: session, next: tr}
	}
	hc := &http.Client{Transport: bearerOn{token: token, next: next}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		return nil, err
	}
	if _, err := cs.ListTools(ctx, nil); err != nil {
		_ = cs.Close()
		return nil, err
	}
	return cs, nil
}

// sessionOn names each request's stateless session, on next.
type sessionOn struct {
	session string
	next    http.RoundTripper
}

func (s sessionOn) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set(SessionHeader, s.session)
	return s.next.RoundTrip(req)
}

// bearerOn sends each request with the token, on next.
type bearerOn struct {
	token string
	next  http.RoundTripper
}

func (b bearerOn) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(req)
}
