package oauth

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

// A 401 without resource_metadata sends discovery to the well-known locations: the resource's
// path-suffixed document, then the issuer's OpenID configuration when RFC 8414's is missing.
// The scopes come from the challenge before the document.
func TestDiscoverFallsBackToWellKnown(t *testing.T) {
	var tried []string
	mux := http.NewServeMux()
	var srv *httptest.Server
	doc := func(v func() any) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) { _ = json.NewEncoder(w).Encode(v()) }
	}
	mux.HandleFunc("POST /tenant/mcp", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("WWW-Authenticate", `Bearer scope="read write"`)
		w.WriteHeader(http.StatusUnauthorized)
	})
	mux.HandleFunc("GET /.well-known/oauth-protected-resource/tenant/mcp", doc(func() any {
		return map[string]any{"resource": srv.URL + "/tenant/mcp", "authorization_servers": []string{srv.URL + "/idp"}, "scopes_supported": []string{"all"}}
	}))
	mux.HandleFunc("GET /idp/.well-known/openid-configuration", doc(func() any {
		return map[string]any{"issuer": srv.URL + "/idp", "token_endpoint": srv.URL + "/idp/token", "authorization_endpoint": srv.URL + "/idp/auth"}
	}))
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tried = append(tried, r.URL.Path)
		mux.ServeHTTP(w, r)
	}))
	defer srv.Close()
	d, err := Discover(t.Context(), srv.Client(), srv.URL+"/tenant/mcp", Settings{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Resource != srv.URL+"/tenant/mcp" || !slices.Equal(d.Scopes, []string{"read", "write"}) || d.Server.TokenEndpoint != srv.URL+"/idp/token" {
		t.Errorf("discovery: %+v", d)
	}
	want := []string{"/tenant/mcp", "/.well-known/oauth-protected-resource/tenant/mcp", "/.well-known/oauth-authorization-server/idp",
		"/.well-known/openid-configuration/idp", "/idp/.well-known/openid-configuration"}
	if !slices.Equal(tried, want) {
		t.Errorf("fetched %q, want %q", tried, want)
	}
}

// Metadata that names another server's resource is refused; a server that answers without
// credentials needs no sign-in.
func TestDiscoverRefusals(t *testing.T) {
	open := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	defer open.Close()
	if _, err := Discover(t.Context(), open.Client(), open.URL+"/mcp", Settings{}); !errors.Is(err, ErrNoSignIn) {
		t.Errorf("an open server: %v", err)
	}
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			w.Header().Set("WWW-Authenticate", `Bearer resource_metadata="http://`+r.Host+`/prm"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		_, _ = w.Write([]byte(`{"resource":"https://elsewhere.example/mcp","authorization_servers":["https://as.example"]}`))
	}))
	defer other.Close()
	if _, err := Discover(t.Context(), other.Client(), other.URL+"/mcp", Settings{}); err == nil || !strings.Contains(err.Error(), "elsewhere.example") {
		t.Errorf("metadata of another resource: %v", err)
	}
}
