package conn

import (
	"context"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/oauth"
	"github.com/dsh-dev/projectmcp/internal/testutil"
	"github.com/dsh-dev/projectmcp/test/fixture"
)

// grantStore keeps a grant in memory: the Store seam of oauth.Keeper, where the controller
// has a Secret.
type grantStore struct {
	mu sync.Mutex
	g  *oauth.Grant
	v  int
}

func (s *grantStore) Load(context.Context) (*oauth.Grant, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.g == nil {
		return nil, "", oauth.ErrNoGrant
	}
	g := *s.g
	return &g, string(rune('a' + s.v)), nil
}

func (s *grantStore) Save(_ context.Context, g *oauth.Grant, v string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if v != string(rune('a'+s.v)) {
		return "", oauth.ErrConflict
	}
	c := *g
	s.g, s.v = &c, s.v+1
	return string(rune('a' + s.v)), nil
}

// guardedFixture is the fixture behind the test authorization server, and a grant of it from
// a real sign-in.
func guardedFixture(t *testing.T) (*testutil.AuthServer, *testutil.ProtectedServer, *oauth.Grant) {
	t.Helper()
	target, _ := url.Parse(fixture.StartHTTP(t))
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.FlushInterval = -1
	as := testutil.NewAuthServer(t)
	ps := as.Protect("/mcp", proxy)
	l := &oauth.Login{HTTP: http.DefaultClient, ServerURL: ps.URL, Out: io.Discard, Browser: func(u string) error {
		resp, err := http.Get(u) //nolint:gosec,noctx // the test's loopback servers
		if err == nil {
			resp.Body.Close()
		}
		return err
	}}
	g, err := l.Run(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return as, ps, g
}

// A remote server with a grant gets its token on every request. A token the server refuses
// mid-session (401) is refreshed once and the refused request sent once more, on the carrier
// (a forwarded call) and through the SDK's client (a typed call) alike: the calls succeed and
// the session goes on without a reconnect.
func TestBearerRefusedTokenRefreshedAndResent(t *testing.T) {
	as, ps, g := guardedFixture(t)
	keeper := oauth.NewKeeper(&grantStore{g: g}, http.DefaultClient, "projectmcp login p h", nil)
	c := start(t, Options{Server: v1alpha1.MCPServer{Name: "h", HTTP: &v1alpha1.HTTPServer{URL: ps.URL,
		Headers: []v1alpha1.NameValue{{Name: "Authorization", Value: "Bearer configured"}}}}, Bearer: keeper})
	waitPhase(t, c, v1alpha1.PhaseReady)
	id := c.ID()
	refused := ps.Refused()
	for round, callOnce := range []func() string{
		func() string {
			res, err := forwardEcho(t, c, "forwarded", AcceptsStateful)
			check(t, err)
			return textOf(res)
		},
		func() string { return call(t, c, "echo", map[string]any{"text": "typed"}) },
	} {
		as.ExpireAll() // the server refuses the token the keeper holds as fresh
		if got := callOnce(); got != "forwarded" && got != "typed" {
			t.Fatalf("round %d: the call answered %q", round, got)
		}
		if n := as.Requests("refresh_token"); n != round+1 {
			t.Errorf("round %d: %d refreshes, want %d", round, n, round+1)
		}
		if ps.Refused() == refused {
			t.Errorf("round %d: the server refused nothing", round)
		}
		refused = ps.Refused()
	}
	if s := c.Snapshot(); c.ID() != id || s.Phase != v1alpha1.PhaseReady || s.ReconnectAttempts != 0 {
		t.Errorf("the session did not go on: %+v", s)
	}
	for tok := range ps.Served() {
		if tok == "configured" {
			t.Error("the configured Authorization header reached the server")
		}
	}
}

// A server without a grant fails at connect, at once and without retries, naming the command
// that signs in; the status carries no token.
func TestBearerMissingGrantFailsNamingLogin(t *testing.T) {
	_, ps, _ := guardedFixture(t)
	keeper := oauth.NewKeeper(&grantStore{}, http.DefaultClient, "projectmcp login p h", nil)
	c := start(t, Options{Server: v1alpha1.MCPServer{Name: "h", HTTP: &v1alpha1.HTTPServer{URL: ps.URL}}, Bearer: keeper})
	s := waitPhase(t, c, v1alpha1.PhaseFailed)
	if !strings.Contains(s.LastError, "no grant: run projectmcp login p h") || s.ReconnectAttempts > 1 {
		t.Errorf("failed with %q after %d attempts", s.LastError, s.ReconnectAttempts)
	}
}

func check(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
