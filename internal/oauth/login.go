package oauth

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"time"

	"golang.org/x/oauth2"
)

// Login obtains a server's grant on the user's machine: discovery, the client (pre-registered
// or registered now), then the authorization code flow with PKCE S256 and a loopback redirect,
// or for client credentials the token request alone.
type Login struct {
	HTTP      *http.Client
	ServerURL string
	Settings  Settings
	// ClientSecret is a pre-registered client's secret (with Settings.ClientID).
	ClientSecret string
	// ClientKey is a pre-registered client's private key (PEM), for private_key_jwt.
	ClientKey string
	// Browser opens the authorization URL; nil (or an error) leaves it to the user, to whom
	// the URL is always printed on Out.
	Browser func(url string) error
	Out     io.Writer
}

// Run signs in and returns the grant.
func (l *Login) Run(ctx context.Context) (*Grant, error) {
	d, err := Discover(ctx, l.HTTP, l.ServerURL, l.Settings)
	if err != nil {
		return nil, err
	}
	if l.Settings.Grant == GrantClientCredentials {
		return l.clientCredentials(ctx, d)
	}
	if !slices.Contains(d.Server.CodeChallengeMethodsSupported, "S256") {
		return nil, errors.New("the authorization server does not list PKCE S256 among its code_challenge_methods_supported; the MCP specification has clients refuse it")
	}
	if d.Server.AuthorizationEndpoint == "" {
		return nil, errors.New("the authorization server's metadata names no authorization_endpoint")
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(l.Settings.CallbackPort)))
	if err != nil {
		return nil, fmt.Errorf("listening for the redirect: %w", err)
	}
	defer ln.Close()
	redirect := fmt.Sprintf("http://localhost:%d/callback", ln.Addr().(*net.TCPAddr).Port)
	g, err := l.client(ctx, d, redirect)
	if err != nil {
		return nil, err
	}
	code, verifier, err := l.authorize(ctx, ln, d, g, redirect)
	if err != nil {
		return nil, err
	}
	tok, err := g.Client(l.HTTP).Exchange(ctx, code, verifier, redirect)
	if err != nil {
		return nil, err
	}
	return g.Renewed(tok), nil
}

// client is the grant's client, in the specification's order: the configured client id
// (with its secret, if any), else one registered now.
func (l *Login) client(ctx context.Context, d *Discovery, redirect string) (*Grant, error) {
	g := &Grant{GrantType: l.Settings.Grant, TokenEndpoint: d.Server.TokenEndpoint, Scopes: d.Scopes,
		Resource: d.Resource, Audience: l.Settings.Audience}
	if g.GrantType == "" {
		g.GrantType = GrantAuthorizationCode
	}
	if l.Settings.ClientID != "" {
		g.ClientID, g.ClientSecret, g.ClientKey = l.Settings.ClientID, l.ClientSecret, l.ClientKey
		g.AuthMethod = AuthMethodFor(l.Settings.TokenAuthMethod, l.ClientSecret, d.Server.TokenEndpointAuthMethodsSupported)
		if g.AuthMethod == AuthPrivateKeyJWT && l.ClientKey == "" {
			return nil, errors.New("private_key_jwt needs the client's private key")
		}
		return g, nil
	}
	reg, err := Register(ctx, l.HTTP, d.Server, g.GrantType, redirect, d.Scopes)
	if err != nil {
		return nil, err
	}
	g.ClientID, g.ClientSecret, g.AuthMethod = reg.ClientID, reg.ClientSecret, reg.AuthMethod
	if l.Settings.TokenAuthMethod != "" {
		g.AuthMethod = l.Settings.TokenAuthMethod
	}
	return g, nil
}

// clientCredentials obtains a machine grant: the client's own token, no person involved.
func (l *Login) clientCredentials(ctx context.Context, d *Discovery) (*Grant, error) {
	g, err := l.client(ctx, d, "")
	if err != nil {
		return nil, err
	}
	if g.ClientSecret == "" && g.AuthMethod != AuthPrivateKeyJWT {
		return nil, errors.New("client credentials need the client's secret (or private key, for private_key_jwt)")
	}
	tok, err := g.Client(l.HTTP).ClientCredentials(ctx, g.Scopes)
	if err != nil {
		return nil, err
	}
	return g.Renewed(tok), nil
}

// authorize sends the user to the authorization endpoint and waits for the redirect on ln;
// it returns the code and the PKCE verifier it goes with.
func (l *Login) authorize(ctx context.Context, ln net.Listener, d *Discovery, g *Grant, redirect string) (string, string, error) {
	verifier, state := oauth2.GenerateVerifier(), randomState()
	cfg := oauth2.Config{ClientID: g.ClientID, RedirectURL: redirect, Scopes: g.Scopes,
		Endpoint: oauth2.Endpoint{AuthURL: d.Server.AuthorizationEndpoint}}
	opts := []oauth2.AuthCodeOption{oauth2.S256ChallengeOption(verifier), oauth2.SetAuthURLParam("resource", g.Resource)}
	if g.Audience != "" {
		opts = append(opts, oauth2.SetAuthURLParam("audience", g.Audience))
	}
	for k, v := range l.Settings.AuthorizeParams {
		opts = append(opts, oauth2.SetAuthURLParam(k, v))
	}
	authURL := cfg.AuthCodeURL(state, opts...)
	got := make(chan callback, 1)
	srv := &http.Server{Handler: callbackHandler(state, got), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan struct{})
	go func() { _ = srv.Serve(ln); close(served) }()
	defer func() { srv.Close(); <-served }()
	fmt.Fprintf(l.Out, "Sign in to the server's authorization server at:\n\n  %s\n\n", authURL)
	if l.Browser != nil {
		if err := l.Browser(authURL); err != nil {
			fmt.Fprintf(l.Out, "(no browser opened: %v; open the URL yourself)\n", err)
		}
	}
	select {
	case cb := <-got:
		return cb.code, verifier, cb.err
	case <-ctx.Done():
		return "", "", fmt.Errorf("waiting for the sign-in: %w", context.Cause(ctx))
	}
}

// callback is what the redirect brought: a code, or the authorization server's refusal.
type callback struct {
	code string
	err  error
}

// callbackHandler serves the redirect: the first one with the flow's state ends the wait; a
// request without it (another page, a stale tab) is refused and the wait goes on.
func callbackHandler(state string, got chan<- callback) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if r.URL.Path != "/callback" || q.Get("state") != state {
			http.Error(w, "not the redirect of this sign-in", http.StatusBadRequest)
			return
		}
		cb := callback{code: q.Get("code")}
		if e := q.Get("error"); e != "" {
			cb.err = fmt.Errorf("the authorization server refused the sign-in: %s %s", printable(e), printable(q.Get("error_description")))
		} else if cb.code == "" {
			cb.err = errors.New("the redirect carries no code")
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if cb.err != nil {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintln(w, "Sign-in failed; the terminal says why.")
		} else {
			fmt.Fprintln(w, "Signed in. You can close this window and go back to the terminal.")
		}
		select {
		case got <- cb:
		default: // a second redirect: the first decided
		}
	})
}

// randomState is an unguessable state parameter.
func randomState() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}
