package gateway

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/types"
)

// Protected-resource metadata (RFC 9728) tells a client that speaks only OAuth where to sign
// in: every endpoint names the issuers the operator configured (OAuthIssuers), which are the
// issuers the API server itself trusts, so that a token from one passes the TokenReview the
// gateway does and lands on the RBAC subjects `use` and `call` check. A request without a
// valid token is answered 401 with a challenge that points at the endpoint's document.
//
// The documents are public, as discovery must be, and say nothing of whether a project
// exists: any well-formed endpoint path has one. Local mode checks no token and serves none.

// wellKnownResource is the well-known prefix RFC 9728 puts before a resource's path.
const wellKnownResource = "/.well-known/oauth-protected-resource"

// resourceMetadata is the document of one endpoint, or of the gateway (the root document).
type resourceMetadata struct {
	Resource               string   `json:"resource"`
	AuthorizationServers   []string `json:"authorization_servers,omitempty"`
	ScopesSupported        []string `json:"scopes_supported,omitempty"`
	BearerMethodsSupported []string `json:"bearer_methods_supported"`
	ResourceName           string   `json:"resource_name,omitempty"`
}

// routeResourceMetadata adds the documents' routes: the path-suffixed location of each
// endpoint, and the root one.
func (g *Gateway) routeResourceMetadata() {
	g.mux.HandleFunc("GET "+wellKnownResource, g.serveResourceMetadata)
	g.mux.HandleFunc("GET "+wellKnownResource+"/projects/{namespace}/{name}/mcp", g.serveResourceMetadata)
	g.mux.HandleFunc("GET "+wellKnownResource+"/projects/{namespace}/{name}/servers/{server}/mcp", g.serveResourceMetadata)
}

func (g *Gateway) serveResourceMetadata(w http.ResponseWriter, r *http.Request) {
	if g.opts.Auth == nil {
		http.NotFound(w, r)
		return
	}
	key := types.NamespacedName{Namespace: r.PathValue("namespace"), Name: r.PathValue("name")}
	if key.Name != "" && !g.validKey(key) {
		http.Error(w, "no such ProjectMCP: the path must name an endpoint with valid object names", http.StatusNotFound)
		return
	}
	resource, name := g.baseURL(), "projectmcp gateway"
	if key.Name != "" {
		resource += strings.TrimPrefix(r.URL.EscapedPath(), wellKnownResource)
		name = "ProjectMCP " + key.String()
		if server := r.PathValue("server"); server != "" {
			name += " server " + server
		}
	}
	doc := resourceMetadata{Resource: resource, AuthorizationServers: g.opts.OAuthIssuers,
		ScopesSupported: g.opts.OAuthScopes, BearerMethodsSupported: []string{"header"}, ResourceName: name}
	body, err := json.Marshal(doc)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "max-age=300")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	_, _ = w.Write(body)
}

// challenge sets the 401's WWW-Authenticate header (RFC 6750, RFC 9728): where the endpoint's
// metadata is, whether the token sent was refused, and the scopes a token needs when the
// operator named some. The path is the escaped one, so no quote of the client's ends the
// parameter.
func (g *Gateway) challenge(w http.ResponseWriter, r *http.Request) {
	if g.opts.Auth == nil {
		return
	}
	c := `Bearer resource_metadata="` + g.baseURL() + wellKnownResource + r.URL.EscapedPath() + `"`
	if r.Header.Get("Authorization") != "" {
		c += `, error="invalid_token"`
	}
	if len(g.opts.OAuthScopes) > 0 {
		c += `, scope="` + strings.Join(g.opts.OAuthScopes, " ") + `"`
	}
	w.Header().Set("WWW-Authenticate", c)
}

// baseURL is BaseURL without a trailing slash.
func (g *Gateway) baseURL() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return strings.TrimSuffix(g.opts.BaseURL, "/")
}
