package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/oauth"
	"github.com/dsh-dev/projectmcp/internal/testenv"
	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// guardedServer is an MCP server with one tool behind the test authorization server.
func guardedServer(t *testing.T) (*testutil.AuthServer, *testutil.ProtectedServer) {
	t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "guarded", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "hello"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "hi"}}}, nil, nil
	})
	as := testutil.NewAuthServer(t)
	return as, as.Protect("/mcp", mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
}

// signInURL matches the authorization URL login prints.
var signInURL = regexp.MustCompile(`(?m)^  (http://\S+/authorize\?\S+)$`)

// projectmcp login runs the code flow on this machine (the browser here an HTTP client that
// follows the printed URL through the authorization server's redirect to the loopback
// callback) and stores the grant as the project's labelled Secret with the user's kubeconfig;
// a second login replaces it; logout deletes it. No token is printed.
func TestLoginStoresGrantSecret(t *testing.T) {
	testenv.Require(t)
	env := apiServer(t)
	ctx := t.Context()
	as, ps := guardedServer(t)
	obj := &v1alpha1.ProjectMCP{ObjectMeta: metav1.ObjectMeta{Name: "login", Namespace: "default"},
		Spec: v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{
			{Name: "guarded", HTTP: &v1alpha1.HTTPServer{URL: ps.URL, OAuth: &v1alpha1.OAuthClient{
				AuthorizeParams: []v1alpha1.NameValue{{Name: "access_type", Value: "offline"}}}}},
			{Name: "local", Stdio: &v1alpha1.StdioServer{Command: "true"}},
			{Name: "bare", HTTP: &v1alpha1.HTTPServer{URL: ps.URL}},
		}}}
	if err := env.Client.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	env.DeleteOnCleanup(t, obj)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: oauth.SecretName("login", "guarded"), Namespace: "default"}}
	env.DeleteOnCleanup(t, secret)

	var tokens []string
	for round := range 2 {
		out := loginAndFollow(t, env, "login", "guarded")
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(secret), secret); err != nil {
			t.Fatal(err)
		}
		g, err := oauth.GrantOf(secret, "login", "guarded")
		if err != nil {
			t.Fatal(err)
		}
		if g.Resource != ps.URL || g.RefreshToken == "" || !as.Valid(g.AccessToken) {
			t.Fatalf("round %d: grant resource %q, refresh %v, valid %v", round, g.Resource, g.RefreshToken != "", as.Valid(g.AccessToken))
		}
		if !strings.Contains(out, "access_type=offline") || !strings.Contains(out, "the grant is in Secret "+secret.Name) || strings.Contains(out, "note:") {
			t.Errorf("round %d: login printed:\n%s", round, out)
		}
		for _, v := range []string{g.AccessToken, g.RefreshToken} {
			if strings.Contains(out, v) {
				t.Errorf("round %d: login printed a token", round)
			}
		}
		tokens = append(tokens, g.AccessToken)
	}
	if tokens[0] == tokens[1] {
		t.Error("the second login did not replace the grant")
	}

	// A server without oauth signs in too, and login says the controller needs the key.
	bare := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: oauth.SecretName("login", "bare"), Namespace: "default"}}
	env.DeleteOnCleanup(t, bare)
	if out := loginAndFollow(t, env, "login", "bare"); !strings.Contains(out, `note: server "bare" has no "oauth"`) {
		t.Errorf("login of a server without oauth printed:\n%s", out)
	}

	for _, args := range [][]string{{"login", "login", "local"}, {"login", "login", "missing"}} {
		var stdout, stderr bytes.Buffer
		if code := run(append(args, "--no-browser", "--namespace", "default", "--kubeconfig", env.Kubeconfig), &stdout, &stderr); code == 0 {
			t.Errorf("%q exited 0", args)
		}
	}

	var stdout, stderr bytes.Buffer
	if code := run([]string{"logout", "login", "guarded", "--namespace", "default", "--kubeconfig", env.Kubeconfig}, &stdout, &stderr); code != 0 {
		t.Fatalf("logout exited %d: %s", code, stderr.String())
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(secret), &corev1.Secret{}); !apierrors.IsNotFound(err) {
		t.Errorf("the grant Secret after logout: %v", err)
	}
}

// loginAndFollow runs projectmcp login NAME SERVER --no-browser and plays the browser: it
// opens the URL login prints and follows the redirects. It returns what login printed.
func loginAndFollow(t *testing.T, env *testenv.Env, name, server string) string {
	t.Helper()
	var stdout, stderr testutil.SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"login", name, server, "--no-browser", "--timeout", "30s", "--namespace", "default", "--kubeconfig", env.Kubeconfig}, &stdout, &stderr)
	}()
	var u string
	testutil.Eventually(t, 30*time.Second, "login to print the sign-in URL", func() bool {
		m := signInURL.FindStringSubmatch(stdout.String())
		if m != nil {
			u = m[1]
		}
		return m != nil
	})
	resp, err := http.Get(u) //nolint:gosec,noctx // the test's loopback authorization server
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if code := <-done; code != 0 {
		t.Fatalf("login exited %d: %s", code, stderr.String())
	}
	return stdout.String()
}

// A machine grant: login with oauth.grant clientCredentials reads the client's secret from
// stdin, asks for a token without a browser, and stores the grant with the secret, so that
// the controller can ask again.
func TestLoginClientCredentials(t *testing.T) {
	testenv.Require(t)
	env := apiServer(t)
	as, ps := guardedServer(t)
	as.AddClient("machine", "m-secret")
	obj := &v1alpha1.ProjectMCP{ObjectMeta: metav1.ObjectMeta{Name: "machine", Namespace: "default"},
		Spec: v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{{Name: "ci", HTTP: &v1alpha1.HTTPServer{URL: ps.URL,
			OAuth: &v1alpha1.OAuthClient{ClientID: "machine", Grant: v1alpha1.OAuthGrantClientCredentials, TokenEndpointAuthMethod: "client_secret_post"}}}}}}
	if err := env.Client.Create(t.Context(), obj); err != nil {
		t.Fatal(err)
	}
	env.DeleteOnCleanup(t, obj)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: oauth.SecretName("machine", "ci"), Namespace: "default"}}
	env.DeleteOnCleanup(t, secret)
	var stdout, stderr bytes.Buffer
	cmd := newRootCmd(&stdout, &stderr)
	cmd.SetIn(strings.NewReader("m-secret\n"))
	cmd.SetArgs([]string{"login", "machine", "ci", "--client-secret-file", "-", "--namespace", "default", "--kubeconfig", env.Kubeconfig})
	if err := cmd.ExecuteContext(t.Context()); err != nil {
		t.Fatalf("login: %v: %s", err, stderr.String())
	}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(secret), secret); err != nil {
		t.Fatal(err)
	}
	g, err := oauth.GrantOf(secret, "machine", "ci")
	if err != nil {
		t.Fatal(err)
	}
	if g.GrantType != oauth.GrantClientCredentials || g.ClientSecret != "m-secret" || g.AuthMethod != "client_secret_post" || !as.Valid(g.AccessToken) {
		t.Errorf("grant: type %q, secret kept %v, method %q, valid %v", g.GrantType, g.ClientSecret == "m-secret", g.AuthMethod, as.Valid(g.AccessToken))
	}
	if strings.Contains(stdout.String(), "m-secret") || strings.Contains(stdout.String(), g.AccessToken) || strings.Contains(stdout.String(), "authorize?") {
		t.Errorf("login printed:\n%s", stdout.String())
	}
}
