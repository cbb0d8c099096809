package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/dsh-dev/projectmcp/internal/testenv"
	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// writeKubeconfig writes a kubeconfig for env's API server whose user is user.
func writeKubeconfig(t *testing.T, env *testenv.Env, user *clientcmdapi.AuthInfo) string {
	t.Helper()
	host, ca := env.Config.Host, env.Config.CAData
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["envtest"] = &clientcmdapi.Cluster{Server: host, CertificateAuthorityData: ca}
	cfg.AuthInfos["user"] = user
	cfg.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "user", Namespace: authNamespace}
	cfg.CurrentContext = "envtest"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// tokenRun runs `projectmcp token` in a process of its own, as a client runs its
// headersHelper (client-go keeps an exec plugin's credential for the life of a process), and
// returns the Authorization header it prints.
func tokenRun(t *testing.T, args ...string) string {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(os.Args[0], append([]string{"token"}, args...)...)
	cmd.Env = append(os.Environ(), mainEnvVar+"=1")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("projectmcp token %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	var h map[string]string
	if err := json.Unmarshal(stdout.Bytes(), &h); err != nil || len(h) != 1 {
		t.Fatalf("projectmcp token printed %q, want one header as a JSON object (%v)", stdout.String(), err)
	}
	return h["Authorization"]
}

// expireCachedTokens makes every cached token one a minute from the end of its hour.
func expireCachedTokens(t *testing.T, cache string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(cache, "projectmcp", "tokens", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no cached token under %s (%v)", cache, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var c cachedToken
		if err := json.Unmarshal(b, &c); err != nil {
			t.Fatal(err)
		}
		c.Issued, c.Expires = time.Now().Add(-59*time.Minute), time.Now().Add(time.Minute)
		if b, err = json.Marshal(c); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// pingWith sends a ping with the Authorization header given and returns the status.
func pingWith(t *testing.T, url, authorization string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", authorization)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// `projectmcp token` prints headers the gateway accepts, from each kind of kubeconfig
// credential: a static token, an exec plugin's, and a token it mints for a ServiceAccount with
// the gateway's audience. A token that expires is cached: a second run neither calls the
// plugin nor mints again, and once the cached token is near its expiry a new one replaces it.
func TestTokenHeadersForTheGateway(t *testing.T) {
	env := apiServer(t)
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	t.Setenv(serverURLEnv, "")
	f := parseControllerFlags(t, "--gateway-auth", "kubernetes", "--gateway-audience", "projectmcp", "--gateway-review-ttl", "1s")
	var reqs requestCounter
	gw := startGateway(t, env, &reqs, f)
	url := gw.Endpoint(types.NamespacedName{Namespace: authNamespace, Name: "nowhere"}) // 404 once allowed
	testutil.Eventually(t, 30*time.Second, "the gateway serving", func() bool {
		return pingWith(t, url, "") == http.StatusUnauthorized
	})
	accepted := func(what, authorization string) {
		t.Helper()
		if status := pingWith(t, url, authorization); status != http.StatusNotFound {
			t.Errorf("%s: the gateway answers %d, want the token accepted (404 for the missing project)", what, status)
		}
	}
	agent := agentToken(t, env, "projectmcp")

	static := writeKubeconfig(t, env, &clientcmdapi.AuthInfo{Token: agent})
	accepted("a static token", tokenRun(t, "--kubeconfig", static, "--audience", "projectmcp"))

	dir := t.TempDir()
	plugin, calls := filepath.Join(dir, "plugin"), filepath.Join(dir, "calls")
	script := fmt.Sprintf("#!/bin/sh\necho call >> %s\n"+
		`echo '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"%s"}}'`+"\n", calls, agent)
	if err := os.WriteFile(plugin, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	withPlugin := writeKubeconfig(t, env, &clientcmdapi.AuthInfo{Exec: &clientcmdapi.ExecConfig{
		APIVersion: "client.authentication.k8s.io/v1", Command: plugin, InteractiveMode: clientcmdapi.NeverExecInteractiveMode}})
	first := tokenRun(t, "--kubeconfig", withPlugin)
	accepted("an exec plugin's token", first)
	if again := tokenRun(t, "--kubeconfig", withPlugin); again != first {
		t.Error("a second run within the token's life printed another token")
	}
	pluginCalls := func() int {
		b, _ := os.ReadFile(calls)
		return strings.Count(string(b), "call")
	}
	if n := pluginCalls(); n != 1 {
		t.Errorf("the exec plugin ran %d times for two runs, want once (the token is cached)", n)
	}
	expireCachedTokens(t, cache)
	accepted("an exec plugin's token near the end of the cached one", tokenRun(t, "--kubeconfig", withPlugin))
	if n := pluginCalls(); n != 2 {
		t.Errorf("near the token's expiry the plugin ran %d times in all, want a second run", n)
	}

	sa := []string{"--kubeconfig", env.Kubeconfig, "--service-account", authNamespace + "/agent", "--audience", "projectmcp"}
	minted := tokenRun(t, sa...)
	accepted("a minted token", minted)
	if again := tokenRun(t, sa...); again != minted {
		t.Error("a second run within the minted token's life minted another")
	}
	expireCachedTokens(t, cache)
	again := tokenRun(t, sa...)
	if again == minted {
		t.Error("near its expiry the cached token was printed again, want a new one")
	}
	accepted("a token minted again", again)

	// The ServiceAccount made anew: the gateway refuses its cached token before its time.
	// Run as Claude Code runs it after that 401 (the entry's URL in its environment), the
	// helper asks the gateway, drops the token and mints one the gateway accepts.
	if err := env.Client.Delete(context.Background(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: authNamespace}}); err != nil {
		t.Fatal(err)
	}
	agentToken(t, env, "projectmcp")
	testutil.Eventually(t, 30*time.Second, "the gateway refusing the old ServiceAccount's token", func() bool {
		return pingWith(t, url, again) == http.StatusUnauthorized
	})
	if stale := tokenRun(t, sa...); stale != again {
		t.Error("without the entry's URL the cached token was replaced; the test no longer shows what the URL changes")
	}
	t.Setenv(serverURLEnv, url)
	fresh := tokenRun(t, sa...)
	if fresh == again {
		t.Error("after the gateway refused it, the cached token was printed again")
	}
	accepted("a token minted after a 401", fresh)
}

// A kubeconfig token for another audience than the gateway's is refused before any agent
// sends it, naming both and the way out; a user with no bearer token is told to mint one.
func TestTokenRefusesWhatTheGatewayWould(t *testing.T) {
	env := apiServer(t)
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	forAPIServer := writeKubeconfig(t, env, &clientcmdapi.AuthInfo{Token: agentToken(t, env)})
	for _, tc := range []struct {
		name       string
		args       []string
		wantInErrs []string
	}{
		{"another audience", []string{"--kubeconfig", forAPIServer, "--audience", "projectmcp"}, []string{`"projectmcp"`, "--service-account"}},
		{"a client certificate", []string{"--kubeconfig", env.Kubeconfig}, []string{"no bearer token", "--service-account"}},
		{"a short duration", []string{"--kubeconfig", env.Kubeconfig, "--service-account", "agent", "--duration", "1m"}, []string{"--duration", "10m"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(append([]string{"token"}, tc.args...), &stdout, &stderr); code == 0 {
				t.Fatalf("exit 0, printed %q", stdout.String())
			}
			for _, want := range tc.wantInErrs {
				if !strings.Contains(stderr.String(), want) {
					t.Errorf("error %q does not say %s", stderr.String(), want)
				}
			}
		})
	}
}
