package oauth

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// Settings are a server's OAuth settings as .dsh/mcp.json and the ProjectMCP carry them:
// Claude Code's keys, and those identity providers need beyond them.
type Settings struct {
	// ClientID is a client registered beforehand; without it the client registers (RFC 7591).
	ClientID string
	// CallbackPort is the loopback port of the redirect; 0 takes a free one.
	CallbackPort int
	// AuthServerMetadataURL is the authorization server's metadata document, in place of
	// discovering it from the server.
	AuthServerMetadataURL string
	// Scopes asked for, in place of the challenge's or the metadata's.
	Scopes []string
	// Resource is the RFC 8707 resource sent on every token request, in place of the
	// server's canonical URL.
	Resource string
	// Audience is sent as the audience parameter on every token request (identity providers
	// that name the API by it).
	Audience string
	// AuthorizeParams are extra parameters of the authorization request (access_type=offline).
	AuthorizeParams map[string]string
	// TokenAuthMethod is how the client authenticates at the token endpoint:
	// client_secret_basic, client_secret_post or none; "" chooses from the server's metadata.
	TokenAuthMethod string
	// Grant is GrantAuthorizationCode (a person signs in) or GrantClientCredentials.
	Grant string
}

// The grants a server's credential comes from.
const (
	GrantAuthorizationCode = "authorization_code"
	GrantClientCredentials = "client_credentials"
	grantRefreshToken      = "refresh_token"
)

// Discovery is what a client learned about a server before asking for a token.
type Discovery struct {
	// Resource is the RFC 8707 resource of every token request.
	Resource string
	// Scopes to ask for.
	Scopes []string
	// Server is the authorization server's metadata.
	Server ServerMetadata
}

// maxDocumentBytes bounds a metadata document or a token endpoint's answer.
const maxDocumentBytes = 1 << 20

// Discover finds a server's authorization server as an MCP client does: it sends the server
// an unauthenticated initialize, reads the 401's challenge, fetches the protected-resource
// metadata it names (or from the well-known locations), then the authorization server's
// metadata. Settings override each step: a metadata URL skips the discovery of the
// authorization server, scopes and resource replace those discovered.
func Discover(ctx context.Context, hc *http.Client, serverURL string, s Settings) (*Discovery, error) {
	server, err := url.Parse(serverURL)
	if err != nil || (server.Scheme != "http" && server.Scheme != "https") || server.Host == "" {
		return nil, fmt.Errorf("server URL %q is not an absolute http(s) URL", serverURL)
	}
	challenge, err := probe(ctx, hc, serverURL)
	if err != nil {
		return nil, err
	}
	prm, err := resourceMetadata(ctx, hc, server, challenge.ResourceMetadata)
	if err != nil {
		return nil, err
	}
	d := &Discovery{Resource: CanonicalResource(server)}
	if prm != nil && prm.Resource != "" {
		if !resourceCovers(prm.Resource, server) {
			return nil, fmt.Errorf("the server's protected-resource metadata names resource %q, which is not %s", prm.Resource, d.Resource)
		}
		d.Resource = prm.Resource
	}
	if s.Resource != "" {
		d.Resource = s.Resource
	}
	var supported []string
	if prm != nil {
		supported = prm.ScopesSupported
	}
	d.Scopes = chooseScopes(s.Scopes, challenge.Scope, supported)
	meta, err := serverMetadata(ctx, hc, server, prm, s.AuthServerMetadataURL)
	if err != nil {
		return nil, err
	}
	d.Server = *meta
	return d, nil
}

// probe sends an initialize without credentials and returns the 401's challenge; a server
// that serves it needs no sign-in, and any other answer than 401 is an error.
func probe(ctx context.Context, hc *http.Client, serverURL string) (Challenge, error) {
	body := []byte(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"projectmcp","version":"login"}}}`)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, serverURL, bytes.NewReader(body))
	if err != nil {
		return Challenge{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := hc.Do(req)
	if err != nil {
		return Challenge{}, fmt.Errorf("reaching the server: %w", err)
	}
	defer drain(resp)
	switch {
	case resp.StatusCode == http.StatusUnauthorized:
		return ParseChallenge(resp.Header.Values("WWW-Authenticate")), nil
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return Challenge{}, ErrNoSignIn
	}
	return Challenge{}, fmt.Errorf("the server answered HTTP %d, not 401, to a request without credentials", resp.StatusCode)
}

// ErrNoSignIn: the server serves requests without credentials.
var ErrNoSignIn = errors.New("the server answers without credentials: it needs no sign-in")

// resourceMetadata fetches the server's protected-resource metadata from the challenge's URL,
// else from the well-known locations; none found is nil (a server of the 2025-03-26 revision,
// whose origin is its authorization server).
func resourceMetadata(ctx context.Context, hc *http.Client, server *url.URL, named string) (*ResourceMetadata, error) {
	if named != "" {
		var prm ResourceMetadata
		if _, err := getJSON(ctx, hc, named, &prm); err != nil {
			return nil, fmt.Errorf("the protected-resource metadata the server names: %w", err)
		}
		return &prm, nil
	}
	for _, u := range resourceMetadataURLs(server) {
		var prm ResourceMetadata
		found, err := getJSON(ctx, hc, u, &prm)
		if err != nil {
			return nil, err
		}
		if found {
			return &prm, nil
		}
	}
	return nil, nil
}

// serverMetadata fetches the authorization server's metadata: from the configured URL, else
// from the well-known locations of the first authorization server the resource names (or of
// the server's origin, when it has no protected-resource metadata).
func serverMetadata(ctx context.Context, hc *http.Client, server *url.URL, prm *ResourceMetadata, configured string) (*ServerMetadata, error) {
	var meta ServerMetadata
	if configured != "" {
		if _, err := getJSON(ctx, hc, configured, &meta); err != nil {
			return nil, fmt.Errorf("authServerMetadataUrl: %w", err)
		}
		return checked(&meta)
	}
	issuer := &url.URL{Scheme: server.Scheme, Host: server.Host}
	if prm != nil && len(prm.AuthorizationServers) > 0 {
		u, err := url.Parse(prm.AuthorizationServers[0])
		if err != nil || u.Host == "" {
			return nil, fmt.Errorf("the protected-resource metadata names authorization server %q, not a URL", prm.AuthorizationServers[0])
		}
		issuer = u
	}
	for _, u := range serverMetadataURLs(issuer) {
		found, err := getJSON(ctx, hc, u, &meta)
		if err != nil {
			return nil, err
		}
		if found {
			return checked(&meta)
		}
	}
	return nil, fmt.Errorf("no authorization server metadata at %s (RFC 8414 or OpenID discovery)", issuer)
}

// checked refuses metadata without a token endpoint, or whose endpoints are not http(s).
func checked(meta *ServerMetadata) (*ServerMetadata, error) {
	if meta.TokenEndpoint == "" {
		return nil, errors.New("the authorization server's metadata names no token_endpoint")
	}
	for _, e := range []string{meta.TokenEndpoint, meta.AuthorizationEndpoint, meta.RegistrationEndpoint} {
		if e == "" {
			continue
		}
		if u, err := url.Parse(e); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return nil, fmt.Errorf("the authorization server's metadata names endpoint %q, not an http(s) URL", e)
		}
	}
	return meta, nil
}

// getJSON fetches a JSON document into v; a 404 is not found (false, no error).
func getJSON(ctx context.Context, hc *http.Client, u string, v any) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return false, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return false, fmt.Errorf("fetching %s: %w", u, err)
	}
	defer drain(resp)
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return false, nil
	case resp.StatusCode != http.StatusOK:
		return false, fmt.Errorf("fetching %s: HTTP %d", u, resp.StatusCode)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxDocumentBytes+1))
	if err != nil {
		return false, fmt.Errorf("fetching %s: %w", u, err)
	}
	if len(data) > maxDocumentBytes {
		return false, fmt.Errorf("fetching %s: over %d bytes", u, maxDocumentBytes)
	}
	if err := json.Unmarshal(data, v); err != nil {
		return false, fmt.Errorf("fetching %s: not a JSON document: %v", u, err)
	}
	return true, nil
}

// drain reads a little of what is left of a response, to let its connection be reused, and
// closes it.
func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
}

// joinScopes is scopes as a scope parameter.
func joinScopes(scopes []string) string { return strings.Join(scopes, " ") }
