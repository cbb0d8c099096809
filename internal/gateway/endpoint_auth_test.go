package gateway_test

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/gateway"
	"github.com/dsh-dev/projectmcp/internal/gateway/access"
	"github.com/dsh-dev/projectmcp/internal/testenv/harness"
)

// In-cluster mode: a bearer token is checked with a TokenReview and the user's right to "use"
// the ProjectMCP with a SubjectAccessReview, against the real API server's RBAC.
func TestGatewayKubernetesAuth(t *testing.T) {
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "guarded", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "a")}})
	harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)

	cs, err := kubernetes.NewForConfig(harness.Env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	token := func(sa string) string {
		t.Helper()
		if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authnv1.TokenRequest{
			Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	allowed, denied := token("allowed"), token("denied")
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "use-guarded", Namespace: ns}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{"mcp.dsh.dev"}, Resources: []string{"projectmcps"}, ResourceNames: []string{"guarded"}, Verbs: []string{access.UseVerb},
	}}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "use-guarded", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "use-guarded"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "allowed", Namespace: ns}}}
	if err := harness.Env.Client.Create(ctx, role); err != nil {
		t.Fatal(err)
	}
	if err := harness.Env.Client.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}

	gw := gateway.New(gateway.Options{Registry: harness.Ctl.Registry, Auth: &access.KubernetesAuth{Client: cs}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- gw.Serve(gctx, ln) }()
	defer func() { cancel(); <-done }()
	url := "http://" + ln.Addr().String() + gateway.Path(key)

	initialize := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}`
	post := func(token string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(initialize))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if id := resp.Header.Get("Mcp-Session-Id"); id != "" { // end the session we opened
			del, _ := http.NewRequest(http.MethodDelete, url, nil)
			del.Header.Set("Mcp-Session-Id", id)
			del.Header.Set("Authorization", "Bearer "+token)
			if r, err := http.DefaultClient.Do(del); err == nil {
				r.Body.Close()
			}
		}
		return resp.StatusCode
	}
	for name, tc := range map[string]struct {
		token string
		want  int
	}{
		"anonymous":        {"", http.StatusUnauthorized},
		"not a token":      {"garbage", http.StatusUnauthorized},
		"no RBAC grant":    {denied, http.StatusForbidden},
		"granted use verb": {allowed, http.StatusOK},
	} {
		if got := post(tc.token); got != tc.want {
			t.Errorf("%s: status %d, want %d", name, got, tc.want)
		}
	}
}

// Local mode: non-loopback Host headers are refused (DNS rebinding) and bodies are bounded.
func TestGatewayLocalGuards(t *testing.T) {
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "local", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "a")}})
	obj := harness.WaitStatus(t, key, 30*time.Second, "an endpoint", func(o *v1alpha1.ProjectMCP) bool { return o.Status.Endpoint != "" })
	req, _ := http.NewRequest(http.MethodPost, obj.Status.Endpoint, strings.NewReader("{}"))
	req.Host = "attacker.example:80"
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a foreign Host header got %d", resp.StatusCode)
	}
	big := `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"` + strings.Repeat("x", 5<<20) + `"}}`
	req, _ = http.NewRequest(http.MethodPost, obj.Status.Endpoint, strings.NewReader(big))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode < 400 {
		t.Fatalf("a 5 MiB request got %d", resp.StatusCode)
	}
	missing, _ := http.NewRequest(http.MethodPost, strings.Replace(obj.Status.Endpoint, "/local/", "/nope/", 1), strings.NewReader("{}"))
	resp, err = http.DefaultClient.Do(missing)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("an unknown project got %d", resp.StatusCode)
	}
}

// A stateful session that sends no request for the session timeout is released: its slots
// leave status, as if it had sent DELETE.
func TestGatewaySessionTimeoutReleases(t *testing.T) {
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "timeout", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "a")}})
	harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	_, base := serveGateway(t, gateway.Options{Registry: harness.Ctl.Registry, SessionTimeout: 1500 * time.Millisecond})

	ctx, cancelConnect := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelConnect()
	s, err := mcp.NewClient(&mcp.Implementation{Name: "idle", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: base + gateway.Path(key)},
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	harness.WaitStatus(t, key, 10*time.Second, "the session bound", func(o *v1alpha1.ProjectMCP) bool { return o.Status.SessionCount == 1 })
	harness.WaitStatus(t, key, 15*time.Second, "the idle session released", func(o *v1alpha1.ProjectMCP) bool { return o.Status.SessionCount == 0 })
}

// serveGateway runs a second gateway with opts on loopback until the test ends, and returns
// it and its base URL.
func serveGateway(t *testing.T, opts gateway.Options) (*gateway.Gateway, string) {
	t.Helper()
	gw := gateway.New(opts)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gw.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done })
	return gw, "http://" + ln.Addr().String()
}
