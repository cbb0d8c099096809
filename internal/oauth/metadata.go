package oauth

import (
	"net/url"
	"strings"
)

// ResourceMetadata is the part of a protected resource's metadata (RFC 9728 §2) a client uses.
type ResourceMetadata struct {
	Resource             string   `json:"resource"`
	AuthorizationServers []string `json:"authorization_servers"`
	ScopesSupported      []string `json:"scopes_supported"`
}

// ServerMetadata is the part of an authorization server's metadata (RFC 8414 §2, or an
// OpenID provider's configuration) a client uses.
type ServerMetadata struct {
	Issuer                            string   `json:"issuer"`
	AuthorizationEndpoint             string   `json:"authorization_endpoint"`
	TokenEndpoint                     string   `json:"token_endpoint"`
	RegistrationEndpoint              string   `json:"registration_endpoint"`
	ScopesSupported                   []string `json:"scopes_supported"`
	CodeChallengeMethodsSupported     []string `json:"code_challenge_methods_supported"`
	TokenEndpointAuthMethodsSupported []string `json:"token_endpoint_auth_methods_supported"`
	GrantTypesSupported               []string `json:"grant_types_supported"`
}

const (
	wellKnownResource = "/.well-known/oauth-protected-resource"
	wellKnownServer   = "/.well-known/oauth-authorization-server"
	wellKnownOpenID   = "/.well-known/openid-configuration"
)

// resourceMetadataURLs are where a server's protected-resource metadata may be, when its 401
// names none, in the order the MCP specification tries them: the path-suffixed well-known
// location of the server's URL, then the root one (the same when the URL has no path).
func resourceMetadataURLs(server *url.URL) []string {
	origin := server.Scheme + "://" + server.Host
	path := strings.TrimSuffix(server.EscapedPath(), "/")
	if path == "" {
		return []string{origin + wellKnownResource}
	}
	return []string{origin + wellKnownResource + path, origin + wellKnownResource}
}

// serverMetadataURLs are where an issuer's metadata may be, in the MCP specification's
// order: for an issuer with a path, RFC 8414's path-inserted location, then OpenID's
// path-inserted and path-appended ones; for one without, RFC 8414's and OpenID's root ones.
func serverMetadataURLs(issuer *url.URL) []string {
	origin := issuer.Scheme + "://" + issuer.Host
	path := strings.TrimSuffix(issuer.EscapedPath(), "/")
	if path == "" {
		return []string{origin + wellKnownServer, origin + wellKnownOpenID}
	}
	return []string{origin + wellKnownServer + path, origin + wellKnownOpenID + path, origin + path + wellKnownOpenID}
}

// CanonicalResource is a server URL as RFC 8707 and the MCP specification name the resource:
// scheme and host in lower case, no fragment, no query, no trailing slash.
func CanonicalResource(server *url.URL) string {
	u := url.URL{Scheme: strings.ToLower(server.Scheme), Host: strings.ToLower(server.Host), Path: server.Path, RawPath: server.RawPath}
	return strings.TrimSuffix(u.String(), "/")
}

// resourceCovers reports whether the resource a server's metadata names covers the server's
// URL: the same origin, and a path that is the URL's or a parent of it. A document naming
// another resource is refused, so a token is never asked for on another server's behalf.
func resourceCovers(resource string, server *url.URL) bool {
	r, err := url.Parse(resource)
	if err != nil || !strings.EqualFold(r.Scheme, server.Scheme) || !strings.EqualFold(r.Host, server.Host) {
		return false
	}
	rp, sp := strings.TrimSuffix(r.Path, "/"), strings.TrimSuffix(server.Path, "/")
	return rp == sp || strings.HasPrefix(sp, rp+"/")
}

// chooseScopes is the scope a client asks for, in the MCP specification's order: what the
// configuration says, else the challenge's scope, else what the resource's metadata lists.
func chooseScopes(configured []string, challenge string, supported []string) []string {
	switch {
	case len(configured) > 0:
		return configured
	case strings.TrimSpace(challenge) != "":
		return strings.Fields(challenge)
	}
	return supported
}
