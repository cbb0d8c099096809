package controllers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/oauth"
	"github.com/dsh-dev/projectmcp/internal/testenv/harness"
	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// guardedFixture is a fixture process behind the test authorization server (a process: the
// session a revoked grant cannot end at the server is not left in the test's).
func guardedFixture(t *testing.T) (*testutil.AuthServer, *testutil.ProtectedServer) {
	t.Helper()
	target, _ := url.Parse(strings.TrimSuffix(harness.HTTPFixture(t, "guarded").HTTP.URL, "/mcp"))
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.FlushInterval = -1
	as := testutil.NewAuthServer(t)
	return as, as.Protect("/mcp", proxy)
}

// signIn is projectmcp login's work on the user's machine: a sign-in whose browser follows the
// redirects, and the grant's Secret written with the user's client.
func signIn(t *testing.T, ps *testutil.ProtectedServer, key types.NamespacedName, server string) *oauth.Grant {
	t.Helper()
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
	s := oauth.GrantSecret(key.Namespace, key.Name, server, g)
	old := &corev1.Secret{}
	if err := harness.Env.Client.Get(t.Context(), client.ObjectKeyFromObject(s), old); err == nil {
		old.Data = s.Data
		err = harness.Env.Client.Update(t.Context(), old)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	if err := harness.Env.Client.Create(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	return g
}

// credentialIs is a WaitStatus condition: the server's credential is in state.
func credentialIs(server, state string) func(*v1alpha1.ProjectMCP) bool {
	return func(o *v1alpha1.ProjectMCP) bool {
		s, ok := harness.ServerStatusOf(o, server)
		return ok && s.Credential != nil && s.Credential.State == state
	}
}

func grantOf(t *testing.T, key types.NamespacedName, server string) *oauth.Grant {
	t.Helper()
	s := &corev1.Secret{}
	if err := harness.Env.Client.Get(t.Context(), types.NamespacedName{Namespace: key.Namespace, Name: oauth.SecretName(key.Name, server)}, s); err != nil {
		t.Fatal(err)
	}
	g, err := oauth.GrantOf(s, key.Name, server)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// The controller is the custodian of a server's grant, through its whole life:
//   - without a grant the server fails naming projectmcp login, and status says Missing;
//   - a grant Secret written by a login brings it up, the token on its requests;
//   - with the token refused by the server (it expired early) while 10 sessions make 100
//     calls, there is one refresh, no call fails, and the rotated refresh token is written back;
//   - a revoked grant (invalid_grant) withdraws the server's tools (list_changed) and status
//     says to run projectmcp login; a new login brings them back (list_changed) without the
//     sessions reconnecting.
//
// No token is in status, events or logs.
func TestControllerKeepsTheGrant(t *testing.T) {
	ns := harness.NewNamespace(t)
	as, ps := guardedFixture(t)
	key := harness.Create(t, ns, "oauthed", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{
		{Name: "api", HTTP: &v1alpha1.HTTPServer{URL: ps.URL, OAuth: &v1alpha1.OAuthClient{}}},
		harness.FixtureServer(t, "local"),
	}})
	missing := harness.WaitStatus(t, key, 30*time.Second, "api Failed for want of a grant",
		func(o *v1alpha1.ProjectMCP) bool {
			return harness.PhaseIs("api", v1alpha1.PhaseFailed)(o) && credentialIs("api", oauth.StateMissing)(o)
		})
	if s, _ := harness.ServerStatusOf(missing, "api"); !strings.Contains(s.LastError, "run projectmcp login oauthed api -n "+ns) ||
		!meta.IsStatusConditionFalse(s.Credential.Conditions, v1alpha1.ConditionCredentialReady) {
		t.Errorf("api without a grant: %q, %+v", s.LastError, s.Credential)
	}

	first := signIn(t, ps, key, "api")
	harness.WaitStatus(t, key, 30*time.Second, "api Ready with the grant", func(o *v1alpha1.ProjectMCP) bool {
		return harness.PhaseIs("api", v1alpha1.PhaseReady)(o) && credentialIs("api", oauth.StateReady)(o)
	})
	agents := make([]*harness.Agent, 10)
	for i := range agents {
		agents[i] = harness.ConnectAgent(t, key, "", nil)
	}
	if tools := toolNames(t, agents[0]); !slices.Contains(tools, "api__echo") {
		t.Fatalf("tools with the grant: %q", tools)
	}

	as.ExpireAll()
	refreshes := as.Requests("refresh_token")
	var wg sync.WaitGroup
	var failed sync.Map
	for i := range 100 {
		wg.Go(func() {
			text := fmt.Sprintf("call-%d", i)
			if got, err := callAPI(agents[i%len(agents)], text); err != nil || got != text {
				failed.Store(i, fmt.Sprintf("%q, %v", got, err))
			}
		})
	}
	wg.Wait()
	failed.Range(func(k, v any) bool { t.Errorf("call %v: %v", k, v); return true })
	if n := as.Requests("refresh_token") - refreshes; n != 1 {
		t.Errorf("%d refreshes for 100 calls, want 1", n)
	}
	if g := grantOf(t, key, "api"); g.RefreshToken == first.RefreshToken || g.AccessToken == first.AccessToken || !as.Valid(g.AccessToken) {
		t.Error("the rotated grant was not written back")
	}
	harness.WaitStatus(t, key, 10*time.Second, "the refresh in status", func(o *v1alpha1.ProjectMCP) bool {
		s, _ := harness.ServerStatusOf(o, "api")
		return s.Credential != nil && s.Credential.RefreshedAt != nil && s.Credential.ExpiresAt != nil
	})
	assertEventNote(t, ns, v1alpha1.EventCredentialRefreshed, `server "api": token refreshed`)

	as.RevokeAll()
	for _, a := range agents {
		drainChanged(a.Changed)
	}
	_, _ = callAPI(agents[0], "refused") // the 401 brings invalid_grant
	harness.WaitStatus(t, key, 30*time.Second, "api Failed, needing a login", func(o *v1alpha1.ProjectMCP) bool {
		return harness.PhaseIs("api", v1alpha1.PhaseFailed)(o) && credentialIs("api", oauth.StateInvalid)(o)
	})
	waitTools(t, agents[1], "api's tools withdrawn", func(tools []string) bool {
		return !slices.Contains(tools, "api__echo") && slices.Contains(tools, "local__echo")
	})
	invalid := harness.Get(t, key)
	if s, _ := harness.ServerStatusOf(invalid, "api"); !meta.IsStatusConditionTrue(s.Credential.Conditions, v1alpha1.ConditionCredentialRefreshFailed) ||
		!strings.Contains(meta.FindStatusCondition(s.Credential.Conditions, v1alpha1.ConditionCredentialRefreshFailed).Message, "invalid_grant): run projectmcp login oauthed api") {
		t.Errorf("status of a revoked grant: %+v", s.Credential)
	}

	signIn(t, ps, key, "api")
	harness.WaitStatus(t, key, 30*time.Second, "api Ready after a new login", func(o *v1alpha1.ProjectMCP) bool {
		return harness.PhaseIs("api", v1alpha1.PhaseReady)(o) && credentialIs("api", oauth.StateReady)(o)
	})
	waitTools(t, agents[1], "api's tools back", func(tools []string) bool { return slices.Contains(tools, "api__echo") })
	if got, err := callAPI(agents[2], "again"); err != nil || got != "again" {
		t.Errorf("a call after the new login: %q, %v", got, err)
	}

	status, _ := json.Marshal(harness.Get(t, key).Status)
	evs := &eventsv1.EventList{}
	_ = harness.Env.Client.List(context.Background(), evs, client.InNamespace(ns))
	events, _ := json.Marshal(evs.Items)
	for _, tok := range as.Issued() {
		for what, text := range map[string]string{"status": string(status), "events": string(events), "logs": harness.Logs.String()} {
			if strings.Contains(text, tok) {
				t.Fatalf("a token is in the %s", what)
			}
		}
	}
}

func callAPI(a *harness.Agent, text string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := a.Session.CallTool(ctx, &mcp.CallToolParams{Name: "api__echo", Arguments: map[string]any{"text": text}})
	if err != nil {
		return "", err
	}
	if res.IsError || len(res.Content) == 0 {
		b, _ := json.Marshal(res)
		return "", fmt.Errorf("error result %s", b)
	}
	tc, _ := res.Content[0].(*mcp.TextContent)
	if tc == nil {
		return "", fmt.Errorf("not text")
	}
	return tc.Text, nil
}

func toolNames(t *testing.T, a *harness.Agent) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := a.Session.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	return names
}

// waitTools waits for a list_changed after which the session's tools satisfy cond.
func waitTools(t *testing.T, a *harness.Agent, what string, cond func([]string) bool) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case <-a.Changed:
			if cond(toolNames(t, a)) {
				return
			}
		case <-deadline:
			t.Fatalf("timed out waiting for %s; tools %q", what, toolNames(t, a))
		}
	}
}

func drainChanged(ch chan struct{}) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// With the authorization server down when the token is due, calls go on with the token until
// it expires: the credential is Expiring (CredentialExpiring and CredentialRefreshFailed True,
// a Warning event), and once the server is back a refresh after the backoff makes it Ready.
func TestControllerGrantWhileAuthServerDown(t *testing.T) {
	ns := harness.NewNamespace(t)
	as, ps := guardedFixture(t)
	as.SetAccessTTL(100 * time.Second) // within the refresh lead: due at once
	key := types.NamespacedName{Namespace: ns, Name: "outage"}
	signIn(t, ps, key, "api")
	as.SetDown(true)
	harness.Create(t, ns, key.Name, v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{
		{Name: "api", HTTP: &v1alpha1.HTTPServer{URL: ps.URL, OAuth: &v1alpha1.OAuthClient{}}},
	}})
	expiring := harness.WaitStatus(t, key, 30*time.Second, "api Ready with its credential Expiring", func(o *v1alpha1.ProjectMCP) bool {
		return harness.PhaseIs("api", v1alpha1.PhaseReady)(o) && credentialIs("api", oauth.StateExpiring)(o)
	})
	s, _ := harness.ServerStatusOf(expiring, "api")
	if !meta.IsStatusConditionTrue(s.Credential.Conditions, v1alpha1.ConditionCredentialExpiring) ||
		!meta.IsStatusConditionTrue(s.Credential.Conditions, v1alpha1.ConditionCredentialReady) ||
		!strings.Contains(meta.FindStatusCondition(s.Credential.Conditions, v1alpha1.ConditionCredentialRefreshFailed).Message, "temporarily_unavailable") {
		t.Errorf("credential while the server is down: %+v", s.Credential)
	}
	assertEventNote(t, ns, v1alpha1.EventCredentialRefreshFailed, "temporarily_unavailable")
	agent := harness.ConnectAgent(t, key, "", nil)
	if got, err := callAPI(agent, "still"); err != nil || got != "still" {
		t.Fatalf("a call while the authorization server is down: %q, %v", got, err)
	}
	as.SetDown(false)
	testutil.EventuallyOK(t, 30*time.Second, "a refresh once the server is back", func() error {
		if _, err := callAPI(agent, "back"); err != nil {
			return err
		}
		if o := harness.Get(t, key); !credentialIs("api", oauth.StateReady)(o) {
			s, _ := harness.ServerStatusOf(o, "api")
			return fmt.Errorf("credential %+v", s.Credential)
		}
		return nil
	})
}
