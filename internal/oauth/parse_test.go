package oauth

import (
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
)

func TestParseChallenge(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values []string
		want   Challenge
	}{
		{"none", nil, Challenge{}},
		{"bare bearer", []string{"Bearer"}, Challenge{}},
		{"quoted", []string{`Bearer resource_metadata="https://h/.well-known/oauth-protected-resource/mcp", scope="a b"`},
			Challenge{ResourceMetadata: "https://h/.well-known/oauth-protected-resource/mcp", Scope: "a b"}},
		{"unquoted url", []string{`Bearer resource_metadata=https://h/prm, error=invalid_token`},
			Challenge{ResourceMetadata: "https://h/prm", Error: "invalid_token"}},
		{"case and spaces", []string{`bearer  Scope = "x" ,RESOURCE_METADATA="u"`}, Challenge{ResourceMetadata: "u", Scope: "x"}},
		{"escaped quote", []string{`Bearer scope="a\"b"`}, Challenge{Scope: `a"b`}},
		{"after another scheme", []string{`Basic realm="x", Bearer scope="s"`}, Challenge{Scope: "s"}},
		{"in a second value", []string{`Basic realm="x"`, `Bearer error="insufficient_scope", scope="s2"`}, Challenge{Scope: "s2", Error: "insufficient_scope"}},
		{"only another scheme", []string{`Basic realm="x"`}, Challenge{}},
		{"unterminated", []string{`Bearer scope="open`}, Challenge{Scope: "open"}},
		{"garbage", []string{`=,,"`}, Challenge{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ParseChallenge(tc.values); got != tc.want {
				t.Errorf("ParseChallenge(%q) = %+v, want %+v", tc.values, got, tc.want)
			}
		})
	}
}

func TestWellKnownLocations(t *testing.T) {
	u := func(s string) *url.URL { p, _ := url.Parse(s); return p }
	for _, tc := range []struct {
		in             string
		prm, authority []string
	}{
		{"https://h.example/mcp",
			[]string{"https://h.example/.well-known/oauth-protected-resource/mcp", "https://h.example/.well-known/oauth-protected-resource"},
			[]string{"https://h.example/.well-known/oauth-authorization-server/mcp", "https://h.example/.well-known/openid-configuration/mcp", "https://h.example/mcp/.well-known/openid-configuration"}},
		{"https://h.example",
			[]string{"https://h.example/.well-known/oauth-protected-resource"},
			[]string{"https://h.example/.well-known/oauth-authorization-server", "https://h.example/.well-known/openid-configuration"}},
		{"https://h.example:8443/tenant/1/",
			[]string{"https://h.example:8443/.well-known/oauth-protected-resource/tenant/1", "https://h.example:8443/.well-known/oauth-protected-resource"},
			[]string{"https://h.example:8443/.well-known/oauth-authorization-server/tenant/1", "https://h.example:8443/.well-known/openid-configuration/tenant/1", "https://h.example:8443/tenant/1/.well-known/openid-configuration"}},
	} {
		if got := resourceMetadataURLs(u(tc.in)); !reflect.DeepEqual(got, tc.prm) {
			t.Errorf("resourceMetadataURLs(%s) = %q, want %q", tc.in, got, tc.prm)
		}
		if got := serverMetadataURLs(u(tc.in)); !reflect.DeepEqual(got, tc.authority) {
			t.Errorf("serverMetadataURLs(%s) = %q, want %q", tc.in, got, tc.authority)
		}
	}
}

func TestResourceChoice(t *testing.T) {
	server, _ := url.Parse("https://API.example.com/v1/mcp?x=1#f")
	if got := CanonicalResource(server); got != "https://api.example.com/v1/mcp" {
		t.Errorf("CanonicalResource = %q", got)
	}
	for resource, want := range map[string]bool{
		"https://api.example.com/v1/mcp":  true,
		"https://api.example.com/v1/mcp/": true,
		"https://api.example.com/v1":      true,
		"https://api.example.com":         true,
		"https://api.example.com/v1/m":    false,
		"https://api.example.com/v2":      false,
		"http://api.example.com/v1/mcp":   false,
		"https://evil.example/v1/mcp":     false,
		"::":                              false,
	} {
		if got := resourceCovers(resource, server); got != want {
			t.Errorf("resourceCovers(%q) = %v, want %v", resource, got, want)
		}
	}
}

func TestChooseScopes(t *testing.T) {
	for _, tc := range []struct {
		configured []string
		challenge  string
		supported  []string
		want       []string
	}{
		{[]string{"c"}, "x y", []string{"s"}, []string{"c"}},
		{nil, "x y", []string{"s"}, []string{"x", "y"}},
		{nil, " ", []string{"s"}, []string{"s"}},
		{nil, "", nil, nil},
	} {
		if got := chooseScopes(tc.configured, tc.challenge, tc.supported); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("chooseScopes(%q, %q, %q) = %q, want %q", tc.configured, tc.challenge, tc.supported, got, tc.want)
		}
	}
}

func TestParseTokenResponse(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		status  int
		body    string
		want    *Token
		wantErr string
		grant   bool // invalid_grant
	}{
		{"full", 200, `{"access_token":"a","token_type":"bearer","expires_in":60,"refresh_token":"r","scope":"x y"}`,
			&Token{AccessToken: "a", TokenType: "Bearer", RefreshToken: "r", Expiry: now.Add(time.Minute), Scopes: []string{"x", "y"}}, "", false},
		{"expires as string", 200, `{"access_token":"a","expires_in":"30"}`,
			&Token{AccessToken: "a", TokenType: "Bearer", Expiry: now.Add(30 * time.Second)}, "", false},
		{"no expiry", 200, `{"access_token":"a","token_type":"Bearer"}`, &Token{AccessToken: "a", TokenType: "Bearer"}, "", false},
		{"invalid grant", 400, `{"error":"invalid_grant","error_description":"revoked\u001b[2J"}`, nil,
			"the authorization server refused the token request: invalid_grant (revoked[2J)", true},
		{"error with 200", 200, `{"error":"invalid_scope"}`, nil, "invalid_scope", false},
		{"not json", 502, `<html>`, nil, "the token endpoint answered HTTP 502 without a JSON body", false},
		{"status without error", 500, `{}`, nil, "HTTP 500", false},
		{"no token", 200, `{"token_type":"Bearer"}`, nil, "has no access_token", false},
		{"mac token", 200, `{"access_token":"a","token_type":"mac"}`, nil, `a "mac" token`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseTokenResponse(tc.status, []byte(tc.body), now)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one with %q", err, tc.wantErr)
				}
				if InvalidGrant(err) != tc.grant {
					t.Errorf("InvalidGrant = %v", !tc.grant)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestAuthMethodFor(t *testing.T) {
	for _, tc := range []struct {
		configured, secret string
		supported          []string
		want               string
	}{
		{"client_secret_post", "s", nil, AuthSecretPost},
		{"", "", []string{AuthSecretBasic}, AuthNone},
		{"", "s", nil, AuthSecretBasic},
		{"", "s", []string{AuthSecretPost}, AuthSecretPost},
		{"", "s", []string{AuthSecretPost, AuthSecretBasic}, AuthSecretBasic},
		{"", "s", []string{"private_key_jwt"}, AuthSecretBasic},
	} {
		if got := AuthMethodFor(tc.configured, tc.secret, tc.supported); got != tc.want {
			t.Errorf("AuthMethodFor(%q, %q, %q) = %q, want %q", tc.configured, tc.secret, tc.supported, got, tc.want)
		}
	}
}

func TestGrantSecret(t *testing.T) {
	if got := SecretName("shop", "linear"); got != "oauth-shop-linear" {
		t.Errorf("SecretName = %q", got)
	}
	if got := SecretName("shop", "Bad_Name"); len(got) != len("oauth-")+20 {
		t.Errorf("SecretName of an invalid name = %q, want a hash", got)
	}
	g := &Grant{GrantType: GrantAuthorizationCode, AccessToken: "secret-access", RefreshToken: "secret-refresh", Expiry: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		Scopes: []string{"x", "y"}, TokenEndpoint: "https://as/token", ClientID: "c", ClientSecret: "s", ClientKey: "k", AuthMethod: AuthSecretPost,
		Resource: "https://h/mcp", Audience: "aud"}
	s := GrantSecret("ns", "shop", "linear", g)
	back, err := GrantOf(s, "shop", "linear")
	if err != nil || !reflect.DeepEqual(back, g) {
		t.Fatalf("GrantOf = %+v, %v; want %+v", back, err, g)
	}
	for name, mutate := range map[string]func(){
		"another server": func() { s.Annotations[AnnotationGrantServer] = "other" },
		"no label":       func() { delete(s.Labels, LabelGrant) },
		"bad expiry":     func() { s.Data[keyExpiry] = []byte("soon") },
		"no endpoint":    func() { delete(s.Data, keyTokenEndpoint) },
		"no token":       func() { delete(s.Data, keyAccessToken); delete(s.Data, keyRefreshToken) },
		"unknown grant":  func() { s.Data[keyGrantType] = []byte("password") },
	} {
		s = GrantSecret("ns", "shop", "linear", g)
		mutate()
		if _, err := GrantOf(s, "shop", "linear"); err == nil {
			t.Errorf("%s: GrantOf took it", name)
		} else if strings.Contains(err.Error(), "secret-") {
			t.Errorf("%s: the error repeats a value: %v", name, err)
		}
	}
}

func TestSettingsOf(t *testing.T) {
	if got := SettingsOf(nil); got.Grant != GrantAuthorizationCode {
		t.Errorf("SettingsOf(nil) = %+v", got)
	}
	got := SettingsOf(&v1alpha1.OAuthClient{ClientID: "c", CallbackPort: 8123, Scopes: []string{"a"}, Resource: "api://x",
		AuthorizeParams: []v1alpha1.NameValue{{Name: "access_type", Value: "offline"}}, Grant: v1alpha1.OAuthGrantClientCredentials,
		TokenEndpointAuthMethod: AuthSecretPost, Audience: "aud", AuthServerMetadataURL: "https://as/m"})
	want := Settings{ClientID: "c", CallbackPort: 8123, Scopes: []string{"a"}, Resource: "api://x", Audience: "aud",
		AuthorizeParams: map[string]string{"access_type": "offline"}, Grant: GrantClientCredentials, TokenAuthMethod: AuthSecretPost,
		AuthServerMetadataURL: "https://as/m"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("SettingsOf = %+v, want %+v", got, want)
	}
}
