package testutil

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// AuthServer is an OAuth authorization server on the loopback for the tests: RFC 8414
// metadata, dynamic client registration (RFC 7591), an authorization endpoint that approves
// at once (PKCE S256 required), and a token endpoint for the authorization code, refresh
// token and client credentials grants. Refresh tokens rotate: a refresh token works once,
// and one used again revokes its whole family, as servers that rotate do. Every token request
// must name the resource the server was made for (RFC 8707). Protect puts an HTTP handler
// behind its tokens, as an MCP server behind it would be.
type AuthServer struct {
	URL string // the issuer
	srv *httptest.Server
	t   testing.TB

	mu        sync.Mutex
	resource  string
	accessTTL time.Duration
	down      bool
	clients   map[string]authClient
	codes     map[string]authCode
	access    map[string]accessGrant
	refresh   map[string]string // refresh token → family
	current   map[string]string // family → its refresh token now
	revoked   map[string]bool   // family → revoked
	requests  map[string]int    // grant_type → token requests answered
	issued    []string          // access tokens, in order
	lastForm  url.Values        // the last token request's form (secrets included: tests only)
	lastBasic bool              // whether it authenticated by a Basic header
	jtis      map[string]bool   // the client assertions' ids seen
}

type authClient struct {
	secret   string
	key      crypto.PublicKey // private_key_jwt's (nil: a secret, or none)
	redirect []string
}

type authCode struct {
	client, redirect, challenge, resource, scope string
}

type accessGrant struct {
	expiry time.Time
	scope  string
	family string // "" for client credentials
}

// NewAuthServer starts an authorization server whose tokens are for resource (set it later
// with SetResource when the resource's URL is known only after), closed with the test.
func NewAuthServer(t testing.TB) *AuthServer {
	a := &AuthServer{accessTTL: time.Hour, clients: map[string]authClient{}, codes: map[string]authCode{},
		access: map[string]accessGrant{}, refresh: map[string]string{}, current: map[string]string{},
		revoked: map[string]bool{}, requests: map[string]int{}, t: t}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/oauth-authorization-server", a.metadata)
	mux.HandleFunc("POST /register", a.register)
	mux.HandleFunc("GET /authorize", a.authorize)
	mux.HandleFunc("POST /token", a.token)
	a.srv = httptest.NewServer(mux)
	a.URL = a.srv.URL
	t.Cleanup(a.srv.Close)
	return a
}

// SetResource sets the resource every token request must name.
func (a *AuthServer) SetResource(resource string) { a.mu.Lock(); a.resource = resource; a.mu.Unlock() }

// SetAccessTTL sets how long the access tokens issued from now on live.
func (a *AuthServer) SetAccessTTL(d time.Duration) { a.mu.Lock(); a.accessTTL = d; a.mu.Unlock() }

// SetDown makes the token endpoint answer 503 (down) or serve again.
func (a *AuthServer) SetDown(down bool) { a.mu.Lock(); a.down = down; a.mu.Unlock() }

// AddClient registers a client beforehand (secret "" for a public one).
func (a *AuthServer) AddClient(id, secret string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.clients[id] = authClient{secret: secret}
}

// AddKeyClient registers beforehand a client that authenticates with JWTs signed by the
// private key of pub (private_key_jwt: ES256 or RS256).
func (a *AuthServer) AddKeyClient(id string, pub crypto.PublicKey) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.clients[id] = authClient{key: pub}
}

// Requests is how many token requests of grantType the server has answered with a token.
func (a *AuthServer) Requests(grantType string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.requests[grantType]
}

// LastTokenForm is the last token request's form, and whether its client authenticated with
// a Basic header.
func (a *AuthServer) LastTokenForm() (url.Values, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.lastForm, a.lastBasic
}

// Issued is every access token issued, in order.
func (a *AuthServer) Issued() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.issued...)
}

// ExpireAll makes every access token issued so far expired.
func (a *AuthServer) ExpireAll() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for tok, g := range a.access {
		g.expiry = time.Time{}
		a.access[tok] = g
	}
}

// RevokeAll revokes every grant: its access tokens stop working and its refresh tokens are
// refused with invalid_grant.
func (a *AuthServer) RevokeAll() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for f := range a.current {
		a.revoked[f] = true
	}
	clear(a.access)
}

// Valid reports whether token is a live access token of the server.
func (a *AuthServer) Valid(token string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	g, ok := a.access[token]
	return ok && time.Now().Before(g.expiry) && !a.revoked[g.family]
}

func (a *AuthServer) metadata(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"issuer": a.URL, "authorization_endpoint": a.URL + "/authorize", "token_endpoint": a.URL + "/token",
		"registration_endpoint": a.URL + "/register", "code_challenge_methods_supported": []string{"S256"},
		"grant_types_supported":                 []string{"authorization_code", "refresh_token", "client_credentials"},
		"token_endpoint_auth_methods_supported": []string{"client_secret_basic", "client_secret_post", "private_key_jwt", "none"},
		"response_types_supported":              []string{"code"},
	})
}

func (a *AuthServer) register(w http.ResponseWriter, r *http.Request) {
	var doc struct {
		RedirectURIs []string `json:"redirect_uris"`
		AuthMethod   string   `json:"token_endpoint_auth_method"`
	}
	if json.NewDecoder(r.Body).Decode(&doc) != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_client_metadata"})
		return
	}
	id, secret := "dcr-"+randomToken(), ""
	if doc.AuthMethod != "" && doc.AuthMethod != "none" {
		secret = randomToken()
	}
	a.mu.Lock()
	a.clients[id] = authClient{secret: secret, redirect: doc.RedirectURIs}
	a.mu.Unlock()
	out := map[string]any{"client_id": id, "redirect_uris": doc.RedirectURIs, "token_endpoint_auth_method": doc.AuthMethod}
	if secret != "" {
		out["client_secret"] = secret
	}
	writeJSON(w, http.StatusCreated, out)
}

// authorize approves at once: it redirects to the client's redirect URI with a code, once the
// request names a known client, a redirect it registered (any loopback one for a client
// registered without), an S256 challenge and the resource.
func (a *AuthServer) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	a.mu.Lock()
	defer a.mu.Unlock()
	c, ok := a.clients[q.Get("client_id")]
	redirect := q.Get("redirect_uri")
	switch {
	case !ok:
		http.Error(w, "unknown client", http.StatusBadRequest)
		return
	case !redirectAllowed(c.redirect, redirect):
		http.Error(w, "redirect_uri not registered", http.StatusBadRequest)
		return
	case q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") == "":
		http.Error(w, "PKCE S256 required", http.StatusBadRequest)
		return
	case q.Get("resource") != a.resource:
		http.Error(w, "wrong resource", http.StatusBadRequest)
		return
	}
	code := randomToken()
	a.codes[code] = authCode{client: q.Get("client_id"), redirect: redirect, challenge: q.Get("code_challenge"),
		resource: q.Get("resource"), scope: q.Get("scope")}
	to, _ := url.Parse(redirect)
	back := to.Query()
	back.Set("code", code)
	back.Set("state", q.Get("state"))
	to.RawQuery = back.Encode()
	http.Redirect(w, r, to.String(), http.StatusFound)
}

// redirectAllowed: the registered redirect, or any loopback one when none was registered.
func redirectAllowed(registered []string, redirect string) bool {
	if len(registered) == 0 {
		u, err := url.Parse(redirect)
		return err == nil && (u.Hostname() == "localhost" || u.Hostname() == "127.0.0.1")
	}
	for _, r := range registered {
		if r == redirect {
			return true
		}
	}
	return false
}

func (a *AuthServer) token(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_request"})
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	_, _, basic := r.BasicAuth()
	a.lastForm, a.lastBasic = r.PostForm, basic
	if a.down {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "temporarily_unavailable"})
		return
	}
	client, ok := a.authenticate(r)
	switch {
	case !ok:
		writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "invalid_client"})
		return
	case r.PostForm.Get("resource") != a.resource:
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_target", "error_description": "the resource is missing or not this server's"})
		return
	}
	var family, scope, errCode string
	switch gt := r.PostForm.Get("grant_type"); gt {
	case "authorization_code":
		family, scope, errCode = a.redeem(client, r.PostForm)
	case "refresh_token":
		family, scope, errCode = a.rotate(r.PostForm.Get("refresh_token"))
	case "client_credentials":
		scope = r.PostForm.Get("scope")
	default:
		errCode = "unsupported_grant_type"
	}
	if errCode != "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": errCode})
		return
	}
	a.requests[r.PostForm.Get("grant_type")]++
	writeJSON(w, http.StatusOK, a.issue(family, scope))
}

// authenticate finds the request's client: by a Basic header or client_secret in the form for
// one with a secret, by client_id alone for a public one.
func (a *AuthServer) authenticate(r *http.Request) (string, bool) {
	if r.PostForm.Get("client_assertion_type") == "urn:ietf:params:oauth:client-assertion-type:jwt-bearer" {
		return a.assertedClient(r.PostForm.Get("client_assertion"))
	}
	id, secret, basic := r.BasicAuth()
	if basic {
		id, _ = url.QueryUnescape(id)
		secret, _ = url.QueryUnescape(secret)
	} else {
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	c, ok := a.clients[id]
	if !ok || c.key != nil {
		return "", false
	}
	return id, subtle.ConstantTimeCompare([]byte(c.secret), []byte(secret)) == 1
}

// assertedClient checks a client assertion (RFC 7523): signed by the key of the client it
// names as issuer and subject, for this token endpoint, not expired, its jti not seen before.
func (a *AuthServer) assertedClient(jwt string) (string, bool) {
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 {
		return "", false
	}
	var claims struct {
		Iss, Sub, Aud, Jti string
		Exp                int64
	}
	body, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil || json.Unmarshal(body, &claims) != nil {
		return "", false
	}
	c, ok := a.clients[claims.Iss]
	sig, serr := base64.RawURLEncoding.DecodeString(parts[2])
	switch {
	case !ok || c.key == nil || serr != nil || claims.Sub != claims.Iss || claims.Aud != a.URL+"/token":
		return "", false
	case time.Now().Unix() > claims.Exp || a.jtis[claims.Jti]:
		return "", false
	case !verifyJWS(c.key, parts[0]+"."+parts[1], sig):
		return "", false
	}
	if a.jtis == nil {
		a.jtis = map[string]bool{}
	}
	a.jtis[claims.Jti] = true
	return claims.Iss, true
}

// verifyJWS checks an ES256 or RS256 signature of input.
func verifyJWS(key crypto.PublicKey, input string, sig []byte) bool {
	digest := sha256.Sum256([]byte(input))
	switch k := key.(type) {
	case *ecdsa.PublicKey:
		return len(sig) == 64 && ecdsa.Verify(k, digest[:], new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:]))
	case *rsa.PublicKey:
		return rsa.VerifyPKCS1v15(k, crypto.SHA256, digest[:], sig) == nil
	}
	return false
}

// redeem checks an authorization code against its request (client, redirect, verifier,
// resource) and starts a refresh family; a code works once.
func (a *AuthServer) redeem(client string, form url.Values) (string, string, string) {
	c, ok := a.codes[form.Get("code")]
	delete(a.codes, form.Get("code"))
	sum := sha256.Sum256([]byte(form.Get("code_verifier")))
	switch {
	case !ok || c.client != client || c.redirect != form.Get("redirect_uri") || c.resource != form.Get("resource"):
		return "", "", "invalid_grant"
	case base64.RawURLEncoding.EncodeToString(sum[:]) != c.challenge:
		return "", "", "invalid_grant"
	}
	return "family-" + randomToken(), c.scope, ""
}

// rotate takes a refresh token once: its family's current one. An older one revokes the
// family (a replay, or two holders racing one token).
func (a *AuthServer) rotate(token string) (string, string, string) {
	family, ok := a.refresh[token]
	switch {
	case !ok || a.revoked[family]:
		return "", "", "invalid_grant"
	case a.current[family] != token:
		a.revoked[family] = true
		return "", "", "invalid_grant"
	}
	return family, "", ""
}

// issue makes an access token (and, in a family, the family's next refresh token).
func (a *AuthServer) issue(family, scope string) map[string]any {
	tok := "at-" + randomToken()
	a.access[tok] = accessGrant{expiry: time.Now().Add(a.accessTTL), scope: scope, family: family}
	a.issued = append(a.issued, tok)
	out := map[string]any{"access_token": tok, "token_type": "Bearer", "expires_in": int(a.accessTTL.Seconds())}
	if scope != "" {
		out["scope"] = scope
	}
	if family != "" {
		rt := "rt-" + randomToken()
		a.refresh[rt], a.current[family] = family, rt
		out["refresh_token"] = rt
	}
	return out
}

// Protect serves next behind the server's tokens at path (e.g. "/mcp"): a request without a
// live one is answered 401 with a challenge naming the resource's metadata, served at the
// path-suffixed well-known location (RFC 9728) with scope "mcp". Seen records the token of
// each request let through.
func (a *AuthServer) Protect(path string, next http.Handler) *ProtectedServer {
	p := &ProtectedServer{as: a, path: path}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/oauth-protected-resource"+path, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"resource": "http://" + r.Host + path,
			"authorization_servers": []string{a.URL}, "scopes_supported": []string{"mcp"}})
	})
	mux.Handle(path, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || !a.Valid(tok) {
			p.note(false, "")
			w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer resource_metadata="http://%s/.well-known/oauth-protected-resource%s", scope="mcp"`, r.Host, path))
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		p.note(true, tok)
		next.ServeHTTP(w, r)
	}))
	p.srv = httptest.NewServer(mux)
	a.t.Cleanup(p.srv.Close)
	p.URL = p.srv.URL + path
	a.SetResource(p.URL)
	return p
}

// ProtectedServer is a handler behind an AuthServer's tokens.
type ProtectedServer struct {
	URL  string // the resource: the protected path's URL
	srv  *httptest.Server
	as   *AuthServer
	path string

	mu      sync.Mutex
	refused int
	tokens  map[string]int
}

func (p *ProtectedServer) note(ok bool, tok string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !ok {
		p.refused++
		return
	}
	if p.tokens == nil {
		p.tokens = map[string]int{}
	}
	p.tokens[tok]++
}

// Refused is how many requests were answered 401.
func (p *ProtectedServer) Refused() int { p.mu.Lock(); defer p.mu.Unlock(); return p.refused }

// Served is how many requests each token was let through with.
func (p *ProtectedServer) Served() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]int{}
	for k, v := range p.tokens {
		out[k] = v
	}
	return out
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func randomToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}
