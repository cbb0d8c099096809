package oauth

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Grant is one (project, server) credential: the token, how to refresh it, and the client it
// was issued to. It lives in a Secret of the project's namespace (GrantSecret), written by
// `projectmcp login` with its user's own RBAC and then by the controller alone, which is its
// custodian: it refreshes the token and writes rotated refresh tokens back.
type Grant struct {
	GrantType     string // GrantAuthorizationCode or GrantClientCredentials
	AccessToken   string
	RefreshToken  string
	Expiry        time.Time // zero: unknown
	Scopes        []string
	TokenEndpoint string
	ClientID      string
	ClientSecret  string
	ClientKey     string // PEM, for private_key_jwt
	AuthMethod    string
	Resource      string
	Audience      string
}

// Labels and annotations of a grant's Secret.
const (
	// LabelGrant marks a Secret as a grant (value "true"); the controller watches these.
	LabelGrant = "mcp.dsh.dev/oauth-grant"
	// AnnotationGrantProject and AnnotationGrantServer name the project and the server the
	// grant serves; the controller uses a grant only for them.
	AnnotationGrantProject = "mcp.dsh.dev/oauth-project"
	AnnotationGrantServer  = "mcp.dsh.dev/oauth-server"
)

// The keys of a grant Secret's data.
const (
	keyGrantType     = "grant_type"
	keyAccessToken   = "access_token"
	keyRefreshToken  = "refresh_token"
	keyExpiry        = "expiry"
	keyScope         = "scope"
	keyTokenEndpoint = "token_endpoint"
	keyClientID      = "client_id"
	keyClientSecret  = "client_secret"
	keyClientKey     = "client_private_key"
	keyAuthMethod    = "token_endpoint_auth_method"
	keyResource      = "resource"
	keyAudience      = "audience"
)

// SecretName is the name of the grant Secret of a project's server: readable when project and
// server make a valid name, else a hash of them.
func SecretName(project, server string) string {
	name := "oauth-" + project + "-" + server
	if len(validation.IsDNS1123Subdomain(name)) == 0 {
		return name
	}
	sum := sha256.Sum256([]byte(project + "\x00" + server))
	return "oauth-" + hex.EncodeToString(sum[:10])
}

// GrantSecret is the Secret holding g for a project's server in namespace.
func GrantSecret(namespace, project, server string, g *Grant) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: SecretName(project, server), Namespace: namespace,
			Labels:      map[string]string{LabelGrant: "true"},
			Annotations: map[string]string{AnnotationGrantProject: project, AnnotationGrantServer: server},
		},
		Type: corev1.SecretTypeOpaque,
		Data: g.Data(),
	}
}

// Data is g as a Secret's data.
func (g *Grant) Data() map[string][]byte {
	d := map[string][]byte{}
	put := func(k, v string) {
		if v != "" {
			d[k] = []byte(v)
		}
	}
	put(keyGrantType, g.GrantType)
	put(keyAccessToken, g.AccessToken)
	put(keyRefreshToken, g.RefreshToken)
	if !g.Expiry.IsZero() {
		put(keyExpiry, g.Expiry.UTC().Format(time.RFC3339))
	}
	put(keyScope, joinScopes(g.Scopes))
	put(keyTokenEndpoint, g.TokenEndpoint)
	put(keyClientID, g.ClientID)
	put(keyClientSecret, g.ClientSecret)
	put(keyClientKey, g.ClientKey)
	put(keyAuthMethod, g.AuthMethod)
	put(keyResource, g.Resource)
	put(keyAudience, g.Audience)
	return d
}

// GrantOf reads a grant from a Secret of project's server; a Secret that is not one (no
// label, another project or server, no token endpoint or client) is an error naming why,
// never a value.
func GrantOf(s *corev1.Secret, project, server string) (*Grant, error) {
	switch {
	case s.Labels[LabelGrant] != "true":
		return nil, fmt.Errorf("Secret %q is not labelled %s=true", s.Name, LabelGrant)
	case s.Annotations[AnnotationGrantProject] != project || s.Annotations[AnnotationGrantServer] != server:
		return nil, fmt.Errorf("Secret %q is the grant of another project or server", s.Name)
	}
	get := func(k string) string { return string(s.Data[k]) }
	g := &Grant{
		GrantType: get(keyGrantType), AccessToken: get(keyAccessToken), RefreshToken: get(keyRefreshToken),
		Scopes: strings.Fields(get(keyScope)), TokenEndpoint: get(keyTokenEndpoint), ClientID: get(keyClientID),
		ClientSecret: get(keyClientSecret), ClientKey: get(keyClientKey), AuthMethod: get(keyAuthMethod), Resource: get(keyResource), Audience: get(keyAudience),
	}
	if e := get(keyExpiry); e != "" {
		t, err := time.Parse(time.RFC3339, e)
		if err != nil {
			return nil, fmt.Errorf("Secret %q: %s is not an RFC 3339 time", s.Name, keyExpiry)
		}
		g.Expiry = t
	}
	if err := g.check(); err != nil {
		return nil, fmt.Errorf("Secret %q: %w", s.Name, err)
	}
	return g, nil
}

// check refuses a grant the controller could not keep: without a token endpoint or client,
// or an authorization-code grant with neither an access nor a refresh token.
func (g *Grant) check() error {
	switch {
	case g.GrantType != GrantAuthorizationCode && g.GrantType != GrantClientCredentials:
		return fmt.Errorf("%s is %q, not %s or %s", keyGrantType, g.GrantType, GrantAuthorizationCode, GrantClientCredentials)
	case g.TokenEndpoint == "" || g.ClientID == "":
		return errors.New("it names no token endpoint or client")
	case g.GrantType == GrantAuthorizationCode && g.AccessToken == "" && g.RefreshToken == "":
		return errors.New("it holds no token")
	}
	return nil
}

// Client is the token client of g's requests, over hc.
func (g *Grant) Client(hc *http.Client) *Client {
	return &Client{HTTP: hc, TokenEndpoint: g.TokenEndpoint, ClientID: g.ClientID, ClientSecret: g.ClientSecret, ClientKey: g.ClientKey,
		AuthMethod: g.AuthMethod, Resource: g.Resource, Audience: g.Audience}
}

// Renewed is g with a new token from its token endpoint.
func (g *Grant) Renewed(t *Token) *Grant {
	n := *g
	n.AccessToken, n.Expiry = t.AccessToken, t.Expiry
	if t.RefreshToken != "" {
		n.RefreshToken = t.RefreshToken
	}
	if t.Scopes != nil {
		n.Scopes = t.Scopes
	}
	return &n
}
