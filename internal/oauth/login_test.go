package oauth_test

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/internal/oauth"
	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// protectedServer is an MCP server with one tool behind the test authorization server.
func protectedServer(t *testing.T) (*testutil.AuthServer, *testutil.ProtectedServer) {
	t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "guarded", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "hello"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "hi"}}}, nil, nil
	})
	as := testutil.NewAuthServer(t)
	return as, as.Protect("/mcp", mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
}

// follow is the user's browser: it opens the authorization URL and follows the redirects to
// the loopback callback, as a browser on an authorization server that approves at once does.
func follow(t *testing.T) func(string) error {
	return func(u string) error {
		resp, err := http.Get(u) //nolint:gosec,noctx // the test's own loopback servers
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("the callback answered HTTP %d", resp.StatusCode)
		}
		return nil
	}
}

// toolsWith lists the protected server's tools with a bearer token.
func toolsWith(t *testing.T, url, token string) ([]string, error) {
	t.Helper()
	hc := &http.Client{Transport: bearer{token}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	s, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc}, nil)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	res, err := s.ListTools(ctx, nil)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
	}
	return names, nil
}

type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// An entry with only a URL signs in: the 401's challenge leads to the resource's metadata and
// the authorization server's, the client registers itself, the code flow with PKCE runs over
// the loopback redirect, and the token it brings serves the server's tools.
func TestLoginDiscoversRegistersAndSignsIn(t *testing.T) {
	as, ps := protectedServer(t)
	if _, err := toolsWith(t, ps.URL, "nothing"); err == nil {
		t.Fatal("the protected server served without a token")
	}
	l := &oauth.Login{HTTP: http.DefaultClient, ServerURL: ps.URL, Browser: follow(t), Out: io.Discard,
		Settings: oauth.Settings{AuthorizeParams: map[string]string{"access_type": "offline"}}}
	g, err := l.Run(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if g.Resource != ps.URL || !slices.Equal(g.Scopes, []string{"mcp"}) || g.RefreshToken == "" || g.AuthMethod != oauth.AuthNone {
		t.Errorf("grant: resource %q scopes %q refresh %v auth %q", g.Resource, g.Scopes, g.RefreshToken != "", g.AuthMethod)
	}
	if g.Expiry.Before(time.Now().Add(50 * time.Minute)) {
		t.Errorf("expiry %s, want about an hour from now", g.Expiry)
	}
	names, err := toolsWith(t, ps.URL, g.AccessToken)
	if err != nil || !slices.Equal(names, []string{"hello"}) {
		t.Fatalf("tools with the grant's token: %q, %v", names, err)
	}
	if as.Requests(oauth.GrantAuthorizationCode) != 1 {
		t.Errorf("code exchanges: %d", as.Requests(oauth.GrantAuthorizationCode))
	}
}

// A refresh sends the resource (golang.org/x/oauth2 would not), takes the rotated refresh
// token, and the old one is then refused as invalid_grant.
func TestRefreshSendsResourceAndRotates(t *testing.T) {
	as, ps := protectedServer(t)
	l := &oauth.Login{HTTP: http.DefaultClient, ServerURL: ps.URL, Browser: follow(t), Out: io.Discard}
	g, err := l.Run(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	c := g.Client(http.DefaultClient)
	tok, err := c.Refresh(t.Context(), g.RefreshToken, nil)
	if err != nil {
		t.Fatal(err)
	}
	if form, _ := as.LastTokenForm(); form.Get("resource") != ps.URL {
		t.Errorf("the refresh named resource %q, want %q", form.Get("resource"), ps.URL)
	}
	if tok.RefreshToken == g.RefreshToken || tok.RefreshToken == "" {
		t.Error("the refresh token did not rotate")
	}
	if names, err := toolsWith(t, ps.URL, tok.AccessToken); err != nil || len(names) != 1 {
		t.Fatalf("tools with the refreshed token: %q, %v", names, err)
	}
	if _, err := c.Refresh(t.Context(), g.RefreshToken, nil); !oauth.InvalidGrant(err) {
		t.Errorf("the old refresh token again: %v, want invalid_grant", err)
	}
}

// A pre-registered client is used as configured, before any registration; its secret goes in
// a Basic header, or in the form for client_secret_post.
func TestLoginWithPreRegisteredClient(t *testing.T) {
	for _, method := range []string{"", oauth.AuthSecretPost} {
		as, ps := protectedServer(t)
		as.AddClient("pre", "pre-secret")
		l := &oauth.Login{HTTP: http.DefaultClient, ServerURL: ps.URL, Browser: follow(t), Out: io.Discard, ClientSecret: "pre-secret",
			Settings: oauth.Settings{ClientID: "pre", TokenAuthMethod: method, Scopes: []string{"mcp", "extra"}}}
		g, err := l.Run(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		form, basic := as.LastTokenForm()
		if g.ClientID != "pre" || basic != (method == "") || (form.Get("client_secret") != "") == (method == "") {
			t.Errorf("method %q: client %q, basic %v, secret in form %v", method, g.ClientID, basic, form.Get("client_secret") != "")
		}
		if form.Get("resource") != ps.URL || !slices.Equal(g.Scopes, []string{"mcp", "extra"}) {
			t.Errorf("method %q: resource %q, scopes %q", method, form.Get("resource"), g.Scopes)
		}
	}
}

// A machine grant: client credentials, with the client's secret and no person; the token
// serves the server.
func TestClientCredentials(t *testing.T) {
	for _, method := range []string{oauth.AuthSecretBasic, oauth.AuthSecretPost} {
		as, ps := protectedServer(t)
		as.AddClient("machine", "m-secret")
		l := &oauth.Login{HTTP: http.DefaultClient, ServerURL: ps.URL, Out: io.Discard, ClientSecret: "m-secret",
			Settings: oauth.Settings{ClientID: "machine", TokenAuthMethod: method, Grant: oauth.GrantClientCredentials}}
		g, err := l.Run(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if _, basic := as.LastTokenForm(); basic != (method == oauth.AuthSecretBasic) {
			t.Errorf("method %s: basic %v", method, basic)
		}
		if names, err := toolsWith(t, ps.URL, g.AccessToken); err != nil || len(names) != 1 {
			t.Fatalf("method %s: tools: %q, %v", method, names, err)
		}
		if g.RefreshToken != "" || as.Requests(oauth.GrantClientCredentials) != 1 {
			t.Errorf("method %s: refresh token %v, requests %d", method, g.RefreshToken != "", as.Requests(oauth.GrantClientCredentials))
		}
	}
}

// The authorization server's refusal at the redirect ends the login with its error.
func TestLoginWrongResourceRefused(t *testing.T) {
	_, ps := protectedServer(t)
	l := &oauth.Login{HTTP: http.DefaultClient, ServerURL: ps.URL, Out: io.Discard,
		Settings: oauth.Settings{Resource: "https://elsewhere.example/mcp"},
		Browser: func(u string) error {
			resp, err := http.Get(u) //nolint:gosec,noctx // the test's own loopback server
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode != http.StatusBadRequest {
					t.Errorf("authorize with a wrong resource: HTTP %d", resp.StatusCode)
				}
			}
			return err
		}}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if _, err := l.Run(ctx); err == nil {
		t.Fatal("the login succeeded for another resource")
	}
}

// A machine grant without a client id registers a confidential client (RFC 7591) and uses
// its secret.
func TestClientCredentialsRegisters(t *testing.T) {
	as, ps := protectedServer(t)
	l := &oauth.Login{HTTP: http.DefaultClient, ServerURL: ps.URL, Out: io.Discard, Settings: oauth.Settings{Grant: oauth.GrantClientCredentials}}
	g, err := l.Run(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(g.ClientID, "dcr-") || g.ClientSecret == "" || g.AuthMethod != oauth.AuthSecretBasic || as.Requests(oauth.GrantClientCredentials) != 1 {
		t.Errorf("grant: client %q, secret %v, method %q", g.ClientID, g.ClientSecret != "", g.AuthMethod)
	}
}

// private_key_jwt: the client authenticates with an assertion signed by its key (EC and RSA),
// no secret sent; a key the server does not know is refused.
func TestClientCredentialsPrivateKeyJWT(t *testing.T) {
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	for name, tc := range map[string]struct {
		signer crypto.Signer
		known  crypto.PublicKey
		ok     bool
	}{
		"ES256":     {ecKey, &ecKey.PublicKey, true},
		"RS256":     {rsaKey, &rsaKey.PublicKey, true},
		"wrong key": {other, &ecKey.PublicKey, false},
	} {
		as, ps := protectedServer(t)
		as.AddKeyClient("keyed", tc.known)
		der, _ := x509.MarshalPKCS8PrivateKey(tc.signer)
		l := &oauth.Login{HTTP: http.DefaultClient, ServerURL: ps.URL, Out: io.Discard,
			ClientKey: string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
			Settings:  oauth.Settings{ClientID: "keyed", TokenAuthMethod: oauth.AuthPrivateKeyJWT, Grant: oauth.GrantClientCredentials}}
		g, err := l.Run(t.Context())
		if (err == nil) != tc.ok {
			t.Fatalf("%s: %v", name, err)
		}
		if !tc.ok {
			continue
		}
		form, basic := as.LastTokenForm()
		if basic || form.Get("client_secret") != "" || form.Get("client_assertion") == "" || !as.Valid(g.AccessToken) {
			t.Errorf("%s: basic %v, assertion %v", name, basic, form.Get("client_assertion") != "")
		}
		// The controller's renewal signs a new assertion from the key the grant keeps.
		if _, err := g.Client(http.DefaultClient).ClientCredentials(t.Context(), nil); err != nil {
			t.Errorf("%s: renewal: %v", name, err)
		}
	}
}
