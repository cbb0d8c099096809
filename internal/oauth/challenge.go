// Package oauth is projectmcp's OAuth client toward remote MCP servers: discovery as the MCP
// specification's authorization chapter describes it (a 401's challenge, RFC 9728 protected-
// resource metadata, RFC 8414 or OpenID discovery of the authorization server), client
// registration (pre-registered, then RFC 7591), the token requests (authorization code with
// PKCE, refresh, client credentials; each with the RFC 8707 resource), and the grant as it is
// kept in a Secret. It holds no state of its own: the login command and the controller drive it.
package oauth

import (
	"strings"
)

// Challenge is what a server's 401 says in its WWW-Authenticate Bearer challenge.
type Challenge struct {
	// ResourceMetadata is the URL of the server's protected-resource metadata (RFC 9728 §5.1).
	ResourceMetadata string
	// Scope is the scope the server asks for, space-separated.
	Scope string
	// Error is the challenge's error code (RFC 6750 §3), e.g. invalid_token.
	Error string
}

// ParseChallenge reads the Bearer challenge among a response's WWW-Authenticate values; a
// header without one is the zero Challenge. Other schemes' challenges in the same value are
// skipped, as are parameters it does not know.
func ParseChallenge(values []string) Challenge {
	var c Challenge
	for _, v := range values {
		params, ok := bearerParams(v)
		if !ok {
			continue
		}
		c.ResourceMetadata = params["resource_metadata"]
		c.Scope = params["scope"]
		c.Error = params["error"]
		return c
	}
	return c
}

// bearerParams finds the Bearer challenge in one header value and reads its auth-params.
func bearerParams(v string) (map[string]string, bool) {
	s := v
	for s != "" {
		scheme, rest := token(strings.TrimLeft(s, " \t,"))
		if scheme == "" {
			return nil, false
		}
		params, next := authParams(rest)
		if strings.EqualFold(scheme, "Bearer") {
			return params, true
		}
		s = next
	}
	return nil, false
}

// authParams reads name=value pairs (a value a token or a quoted string) until the next
// challenge's scheme, and returns them with what follows.
func authParams(s string) (map[string]string, string) {
	params := map[string]string{}
	for {
		s = strings.TrimLeft(s, " \t,")
		name, rest := token(s)
		if name == "" {
			return params, s
		}
		rest = strings.TrimLeft(rest, " \t")
		if !strings.HasPrefix(rest, "=") {
			return params, s // a new scheme, not a parameter
		}
		rest = strings.TrimLeft(rest[1:], " \t")
		var value string
		if strings.HasPrefix(rest, `"`) {
			value, rest = quoted(rest[1:])
		} else {
			value, rest = token(rest)
		}
		params[strings.ToLower(name)] = value
		s = rest
	}
}

// token reads an RFC 9110 token (and the token68 characters "/" and "=" are not in it) from
// the start of s.
func token(s string) (string, string) {
	i := 0
	for i < len(s) && isTokenChar(s[i]) {
		i++
	}
	return s[:i], s[i:]
}

func isTokenChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~:/", c) >= 0
}

// quoted reads a quoted string's inside (s starts after the opening quote), undoing
// backslash escapes; an unterminated string runs to the end.
func quoted(s string) (string, string) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '"':
			return b.String(), s[i+1:]
		case '\\':
			if i+1 < len(s) {
				i++
			}
		}
		b.WriteByte(s[i])
	}
	return b.String(), ""
}
