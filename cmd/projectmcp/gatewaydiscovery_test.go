package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/gateway"
	"github.com/dsh-dev/projectmcp/internal/testenv"
	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// resourceDoc is the part of a protected-resource metadata document (RFC 9728) checked here.
type resourceDoc struct {
	Resource             string   `json:"resource"`
	AuthorizationServers []string `json:"authorization_servers"`
	ScopesSupported      []string `json:"scopes_supported"`
	BearerMethods        []string `json:"bearer_methods_supported"`
}

// An OAuth client finds where to sign in from the endpoint alone: the npm SDK's own discovery
// follows the 401's challenge to the endpoint's protected-resource metadata, finds the same
// document at the well-known location, and there the issuer the operator named — here the API
// server's own service-account issuer, whose OpenID configuration and keys it then reads. A
// token of that issuer passes the gateway's TokenReview. Local mode serves no metadata.
func TestGatewayProtectedResourceMetadata(t *testing.T) {
	env := apiServer(t)
	ctx := context.Background()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	// Public OIDC discovery, as clusters that publish their issuer allow it.
	discovery := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "test-oidc-discovery"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:service-account-issuer-discovery"},
		Subjects: []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "Group", Name: "system:unauthenticated"}}}
	env.DeleteOnCleanup(t, discovery)
	if err := env.Client.Create(ctx, discovery); err != nil {
		t.Fatal(err)
	}
	raw, err := cs.RESTClient().Get().AbsPath("/.well-known/openid-configuration").DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var oidc struct {
		Issuer string `json:"issuer"`
	}
	if err := json.Unmarshal(raw, &oidc); err != nil || oidc.Issuer == "" {
		t.Fatalf("the API server's OpenID configuration %s: %v", raw, err)
	}

	f := parseControllerFlags(t, "--gateway-auth", "kubernetes", "--gateway-oauth-issuer", oidc.Issuer, "--gateway-oauth-scope", "openid")
	var reqs requestCounter
	gw := startGateway(t, env, &reqs, f)
	key := types.NamespacedName{Namespace: authNamespace, Name: "nowhere"}
	endpoint := gw.Endpoint(key)
	testutil.Eventually(t, 30*time.Second, "the gateway serving", func() bool {
		return pingWith(t, endpoint, "") == http.StatusUnauthorized
	})

	node, dir := testenv.NodeScripts(t)
	ca := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(ca, env.Config.CAData, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, filepath.Join(dir, "discover.mjs"), endpoint)
	cmd.Env = append(os.Environ(), "NODE_EXTRA_CA_CERTS="+ca)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("discover.mjs: %v\n%s", err, out)
	}
	var got struct {
		Status              int         `json:"status"`
		ResourceMetadataURL string      `json:"resourceMetadataUrl"`
		FromChallenge       resourceDoc `json:"fromChallenge"`
		WellKnown           resourceDoc `json:"wellKnown"`
		OpenID              struct {
			Issuer  string `json:"issuer"`
			JWKSURI string `json:"jwks_uri"`
		} `json:"openid"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("discover.mjs printed %s: %v", out, err)
	}
	base := strings.TrimSuffix(endpoint, gateway.Path(key))
	want := resourceDoc{Resource: endpoint, AuthorizationServers: []string{oidc.Issuer}, ScopesSupported: []string{"openid"}, BearerMethods: []string{"header"}}
	switch {
	case got.Status != http.StatusUnauthorized || got.ResourceMetadataURL != base+"/.well-known/oauth-protected-resource"+gateway.Path(key):
		t.Errorf("the challenge: %d, resource_metadata %q", got.Status, got.ResourceMetadataURL)
	case !sameDoc(got.FromChallenge, want) || !sameDoc(got.WellKnown, want):
		t.Errorf("the metadata: from the challenge %+v, at the well-known location %+v, want %+v", got.FromChallenge, got.WellKnown, want)
	case got.OpenID.Issuer != oidc.Issuer || got.OpenID.JWKSURI == "":
		t.Errorf("the issuer's OpenID configuration as the client read it: %+v", got.OpenID)
	}

	if status := pingWith(t, endpoint, "Bearer "+agentToken(t, env)); status != http.StatusNotFound {
		t.Errorf("a token of the issuer: %d, want it accepted (404 for the missing project)", status)
	}

	server := v1alpha1.ServerEndpoint(endpoint, "db")
	var doc resourceDoc
	getJSON(t, base+"/.well-known/oauth-protected-resource"+strings.TrimPrefix(server, base), http.StatusOK, &doc)
	if doc.Resource != server {
		t.Errorf("a server endpoint's metadata names %q, want %q", doc.Resource, server)
	}
	getJSON(t, base+"/.well-known/oauth-protected-resource", http.StatusOK, &doc)
	if doc.Resource != base || !slices.Equal(doc.AuthorizationServers, want.AuthorizationServers) {
		t.Errorf("the root metadata: %+v", doc)
	}

	local := startGateway(t, env, &reqs, parseControllerFlags(t))
	localBase := strings.TrimSuffix(local.Endpoint(key), gateway.Path(key))
	getJSON(t, localBase+"/.well-known/oauth-protected-resource"+gateway.Path(key), http.StatusNotFound, nil)
}

func sameDoc(a, b resourceDoc) bool {
	return a.Resource == b.Resource && slices.Equal(a.AuthorizationServers, b.AuthorizationServers) &&
		slices.Equal(a.ScopesSupported, b.ScopesSupported) && slices.Equal(a.BearerMethods, b.BearerMethods)
}

// getJSON GETs url, wants the status, and decodes the body into v (unless nil).
func getJSON(t *testing.T, url string, status int, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != status {
		t.Fatalf("GET %s: %d, want %d", url, resp.StatusCode, status)
	}
	if v != nil {
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
	}
}
