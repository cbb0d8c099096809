package oauth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Client makes a grant's token requests. Every request carries the RFC 8707 resource (and the
// audience, when set), the refresh included: golang.org/x/oauth2 sends none on refresh, and
// an authorization server that binds tokens to a resource then refuses the refresh or mints a
// token for no resource.
type Client struct {
	HTTP          *http.Client
	TokenEndpoint string
	ClientID      string
	ClientSecret  string
	// ClientKey is the client's private key (PEM), for private_key_jwt.
	ClientKey string
	// AuthMethod is client_secret_basic, client_secret_post, private_key_jwt or none.
	AuthMethod string
	Resource   string
	Audience   string
}

// The token endpoint's client authentication methods (RFC 7591 §2).
const (
	AuthSecretBasic = "client_secret_basic"
	AuthSecretPost  = "client_secret_post"
	AuthNone        = "none"
)

// Token is a token endpoint's answer (RFC 6749 §5.1), with the expiry it means.
type Token struct {
	AccessToken  string
	TokenType    string
	RefreshToken string
	Expiry       time.Time // zero: the server said nothing
	Scopes       []string  // nil: the server said nothing (the scopes asked for)
}

// TokenError is a token endpoint's refusal (RFC 6749 §5.2). Its description is the server's
// and holds no credential of the request.
type TokenError struct {
	Code        string
	Description string
	Status      int
}

func (e *TokenError) Error() string {
	msg := fmt.Sprintf("the authorization server refused the token request: %s", e.Code)
	if e.Description != "" {
		msg += " (" + e.Description + ")"
	}
	return msg
}

// InvalidGrant reports whether err is the authorization server saying the grant itself is no
// longer good (revoked, expired, or its refresh token used twice): only a new sign-in helps.
func InvalidGrant(err error) bool {
	var te *TokenError
	return errors.As(err, &te) && te.Code == "invalid_grant"
}

// Exchange trades an authorization code and its PKCE verifier for a token.
func (c *Client) Exchange(ctx context.Context, code, verifier, redirectURI string) (*Token, error) {
	return c.request(ctx, url.Values{
		"grant_type": {GrantAuthorizationCode}, "code": {code},
		"code_verifier": {verifier}, "redirect_uri": {redirectURI},
	}, nil)
}

// Refresh trades a refresh token for a new token; the answer's refresh token, when the server
// rotates them, replaces the old one (which the server may now refuse).
func (c *Client) Refresh(ctx context.Context, refreshToken string, scopes []string) (*Token, error) {
	tok, err := c.request(ctx, url.Values{"grant_type": {grantRefreshToken}, "refresh_token": {refreshToken}}, scopes)
	if err == nil && tok.RefreshToken == "" {
		tok.RefreshToken = refreshToken // not rotated: the old one stays good
	}
	return tok, err
}

// ClientCredentials asks for a token as the client itself (RFC 6749 §4.4).
func (c *Client) ClientCredentials(ctx context.Context, scopes []string) (*Token, error) {
	return c.request(ctx, url.Values{"grant_type": {GrantClientCredentials}}, scopes)
}

// request POSTs one token request with the client's authentication, the resource and the
// audience, and reads the answer.
func (c *Client) request(ctx context.Context, form url.Values, scopes []string) (*Token, error) {
	if len(scopes) > 0 {
		form.Set("scope", joinScopes(scopes))
	}
	if c.Resource != "" {
		form.Set("resource", c.Resource)
	}
	if c.Audience != "" {
		form.Set("audience", c.Audience)
	}
	basic, err := c.authenticate(form)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.TokenEndpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	if basic {
		// RFC 6749 §2.3.1: the id and secret are form-encoded before they are joined.
		req.SetBasicAuth(url.QueryEscape(c.ClientID), url.QueryEscape(c.ClientSecret))
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, fmt.Errorf("reaching the token endpoint: %w", err)
	}
	defer drain(resp)
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxDocumentBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading the token endpoint's answer: %w", err)
	}
	return parseTokenResponse(resp.StatusCode, data, time.Now())
}

// authenticate puts the client's id (and secret, for client_secret_post, or a signed
// assertion, for private_key_jwt) in the form, and reports whether the request carries the
// id and secret in a Basic header instead.
func (c *Client) authenticate(form url.Values) (bool, error) {
	switch {
	case c.AuthMethod == AuthPrivateKeyJWT:
		assertion, err := clientAssertion(c.ClientID, c.TokenEndpoint, c.ClientKey, time.Now())
		if err != nil {
			return false, err
		}
		form.Set("client_assertion_type", clientAssertionType)
		form.Set("client_assertion", assertion)
	case c.ClientSecret != "" && c.AuthMethod != AuthSecretPost && c.AuthMethod != AuthNone:
		return true, nil
	case c.ClientSecret != "" && c.AuthMethod == AuthSecretPost:
		form.Set("client_secret", c.ClientSecret)
	}
	form.Set("client_id", c.ClientID)
	return false, nil
}

// tokenResponse is the JSON of a token endpoint's answer, success or error.
type tokenResponse struct {
	AccessToken      string          `json:"access_token"`
	TokenType        string          `json:"token_type"`
	RefreshToken     string          `json:"refresh_token"`
	ExpiresIn        json.RawMessage `json:"expires_in"`
	Scope            string          `json:"scope"`
	Error            string          `json:"error"`
	ErrorDescription string          `json:"error_description"`
}

// parseTokenResponse reads a token endpoint's answer received at now.
func parseTokenResponse(status int, data []byte, now time.Time) (*Token, error) {
	if len(data) > maxDocumentBytes {
		return nil, fmt.Errorf("the token endpoint's answer is over %d bytes", maxDocumentBytes)
	}
	var r tokenResponse
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("the token endpoint answered HTTP %d without a JSON body", status)
	}
	if r.Error != "" || status != http.StatusOK {
		code := r.Error
		if code == "" {
			code = fmt.Sprintf("HTTP %d", status)
		}
		return nil, &TokenError{Code: code, Description: printable(r.ErrorDescription), Status: status}
	}
	if r.AccessToken == "" {
		return nil, errors.New("the token endpoint's answer has no access_token")
	}
	if r.TokenType != "" && !strings.EqualFold(r.TokenType, "Bearer") {
		return nil, fmt.Errorf("the token endpoint issued a %q token; only Bearer tokens are sent", printable(r.TokenType))
	}
	t := &Token{AccessToken: r.AccessToken, TokenType: "Bearer", RefreshToken: r.RefreshToken}
	if secs, ok := expiresIn(r.ExpiresIn); ok {
		t.Expiry = now.Add(time.Duration(secs) * time.Second)
	}
	if r.Scope != "" {
		t.Scopes = strings.Fields(r.Scope)
	}
	return t, nil
}

// expiresIn reads expires_in, a number of seconds (some servers send it as a string).
func expiresIn(raw json.RawMessage) (int64, bool) {
	var n json.Number
	if len(raw) == 0 || json.Unmarshal(raw, &n) != nil {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return 0, false
		}
		n = json.Number(s)
	}
	secs, err := n.Int64()
	if err != nil || secs <= 0 {
		return 0, false
	}
	return min(secs, int64(10*365*24*3600)), true
}

// printable is an authorization server's text bounded and without control characters: it
// reaches status and terminals.
func printable(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return -1
		}
		return r
	}, s)
	if len(s) > 256 {
		s = strings.ToValidUTF8(s[:256], "") + "..."
	}
	return s
}

// AuthMethodFor is the client authentication to use at a token endpoint: the configured one,
// else none for a client without a secret, else client_secret_basic when the server lists it
// (or lists nothing: RFC 8414's default), else client_secret_post.
func AuthMethodFor(configured, secret string, supported []string) string {
	switch {
	case configured != "":
		return configured
	case secret == "":
		return AuthNone
	case len(supported) == 0 || slices.Contains(supported, AuthSecretBasic):
		return AuthSecretBasic
	case slices.Contains(supported, AuthSecretPost):
		return AuthSecretPost
	}
	return AuthSecretBasic
}
