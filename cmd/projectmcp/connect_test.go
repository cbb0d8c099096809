package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/gateway/access"
	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// runCode runs a command line in this process and fails unless it exits with want.
func runCode(t *testing.T, want int, args ...string) (stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run(args, &out, &errb); code != want {
		t.Fatalf("%q exited %d, want %d\nstdout: %s\nstderr: %s", args, code, want, out.String(), errb.String())
	}
	return out.String(), errb.String()
}

// Mistakes on connect's command line are usage errors naming the flag, before any cluster is
// asked.
func TestConnectUsageErrors(t *testing.T) {
	for args, want := range map[string]string{
		"connect --client json --write":           "--client json has no config file to write",
		"connect --force":                         "--force replaces an entry with --write only",
		"adopt --client json":                     "--client json has no config file to adopt from",
		"adopt --endpoint http://h/x":             "--endpoint must be a project's endpoint",
		"adopt --auth maybe":                      `--auth must be auto, none or bearer, not "maybe"`,
		"adopt a b":                               `unexpected argument "b": adopt takes NAME`,
		"connect --client emacs":                  `--client must be one of claude-code, vscode, cursor, json, not "emacs"`,
		"connect --auth maybe":                    `--auth must be auto, none or bearer, not "maybe"`,
		"connect a b":                             `unexpected argument "b": connect takes NAME`,
		"connect --write=maybe":                   `invalid argument "maybe" for "--write" flag`,
		"dev --kubeconfig x":                      "--kubeconfig does not apply: dev runs its own control plane",
		"dev -n team-a":                           "--namespace does not apply",
		"dev --gateway-bind-address 0":            `--gateway-bind-address cannot be "0"`,
		"dev --leader-elect":                      "unknown flag: --leader-elect",
		"controller -n team-a":                    "--namespace does not apply: the controller watches every namespace",
		"status":                                  "missing argument NAME",
		"reconnect shop --wait soon":              `invalid argument "soon" for "--wait" flag`,
		"mirror":                                  "--project is required",
		"mirror --project a --project b --name x": "--name names one object: give it with one --project, not 2",
		"version extra":                           `unexpected argument "extra": version takes none`,
		"completion":                              "missing argument SHELL",
		"completion tcsh":                         `unknown shell "tcsh": bash, zsh or fish`,
	} {
		_, stderr := runCode(t, exitUsage, strings.Fields(args)...)
		if !strings.Contains(stderr, want) || !strings.Contains(stderr, "--help' for more.") {
			t.Errorf("%s: stderr lacks %q and the pointer to --help:\n%s", args, want, stderr)
		}
	}
}

// connect against a cluster whose gateway checks bearer tokens: the entry reads the token from
// the environment, for each client in its own form, and a real ServiceAccount token in that
// header reaches the project's tools. Before the controller runs, a missing endpoint and an
// unreachable one are handled.
func TestConnectBearerToken(t *testing.T) {
	env := apiServer(t)
	ctx := context.Background()
	obj := &v1alpha1.ProjectMCP{ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: "default"},
		Spec: v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{fixtureServer("a")}}}
	env.DeleteOnCleanup(t, obj)
	if err := env.Client.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	kc := "--kubeconfig=" + env.Kubeconfig

	// No controller yet: no endpoint in status, after a bounded wait that connect announces.
	_, stderr := runCode(t, exitFailure, "connect", "guarded", kc, "--wait", "300ms")
	if !strings.Contains(stderr, "Waiting up to 300ms for projectmcp default/guarded's endpoint") ||
		!strings.Contains(stderr, "projectmcp default/guarded has no endpoint in its status after 300ms") {
		t.Fatalf("stderr: %s", stderr)
	}
	// The endpoint written during the wait (as the first reconcile writes it a moment after
	// the ProjectMCP appears): connect takes it, with no retry of the caller's own.
	updated := make(chan error, 1)
	go func() {
		time.Sleep(time.Second)
		obj := obj.DeepCopy()
		obj.Status.Endpoint = "http://127.0.0.1:1/projects/default/guarded/mcp"
		updated <- env.Client.Status().Update(ctx, obj)
	}()
	stdout, stderr := runCode(t, exitOK, "connect", "guarded", kc, "--client", "json", "--auth", "none")
	if err := <-updated; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stdout, `"a": {`) || !strings.Contains(stdout, "http://127.0.0.1:1/projects/default/guarded/servers/a/mcp") || !strings.Contains(stderr, "Waiting up to 10s") {
		t.Fatalf("connect during the wait:\nstdout: %s\nstderr: %s", stdout, stderr)
	}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
		t.Fatal(err)
	}
	_, stderr = runCode(t, exitFailure, "connect", "missing", kc)
	if !strings.Contains(stderr, `projectmcp default/missing: projectmcps.mcp.dsh.dev "missing" not found`) {
		t.Fatalf("stderr: %s", stderr)
	}
	// An endpoint that cannot be asked: loopback means a local gateway, anything else one that
	// checks tokens; connect says what it assumed.
	for endpoint, bearer := range map[string]bool{
		"http://127.0.0.1:1/projects/default/guarded/mcp":          false,
		"https://mcp.example.invalid/projects/default/guarded/mcp": true,
	} {
		obj.Status.Endpoint = endpoint
		if err := env.Client.Status().Update(ctx, obj); err != nil {
			t.Fatal(err)
		}
		stdout, stderr := runCode(t, exitOK, "connect", "guarded", kc, "--client", "json")
		if got := strings.Contains(stdout, "Authorization"); got != bearer || !strings.Contains(stderr, "Could not ask "+endpoint) {
			t.Fatalf("%s: header %v, want %v\nstdout: %s\nstderr: %s", endpoint, got, bearer, stdout, stderr)
		}
	}

	// The gateway has the chart's audience, which connect's helper and hint ask for by default.
	ctl := startMain(t, t.TempDir(), nil, os.Args[0], "controller", kc, "--gateway-auth", "kubernetes", "--gateway-audience", "projectmcp",
		"--gateway-bind-address", "127.0.0.1:0", "--leader-elect=false", "--metrics-bind-address", "0", "--health-probe-bind-address", "0")
	testutil.EventuallyOK(t, 60*time.Second, "the controller's endpoint in status", func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		if strings.HasPrefix(obj.Status.Endpoint, "http://127.0.0.1:") && obj.Status.ReadyServers == "1/1" {
			return nil
		}
		return fmt.Errorf("status %+v", obj.Status)
	})
	endpoint := obj.Status.Endpoint

	// Each client's form, printed: the gateway answered 401 to connect's question.
	for client, header := range map[string]string{
		"json":        `"Authorization": "Bearer ${PROJECTMCP_TOKEN}"`,
		"claude-code": `"headersHelper": "projectmcp token --audience projectmcp"`,
		"cursor":      `"Authorization": "Bearer ${env:PROJECTMCP_TOKEN}"`,
		"vscode":      `"Authorization": "Bearer ${input:projectmcp-token}"`,
	} {
		stdout, stderr := runCode(t, exitOK, "connect", "guarded", "--client", client, kc)
		if !strings.Contains(stdout, header) || !strings.Contains(stdout, v1alpha1.ServerEndpoint(endpoint, "a")) {
			t.Errorf("%s: printed\n%s", client, stdout)
		}
		hint := "export PROJECTMCP_TOKEN=$(kubectl create token SERVICEACCOUNT -n default --audience projectmcp)"
		if client == "claude-code" {
			hint = `the agent runs "projectmcp token --audience projectmcp" for it at connect and after a 401`
		}
		if !strings.Contains(stderr, hint) {
			t.Errorf("%s: no hint about the token:\n%s", client, stderr)
		}
	}
	// A gateway that accepts the API server's own audiences: --token-audience "".
	if stdout, stderr := runCode(t, exitOK, "connect", "guarded", "--client", "claude-code", "--token-audience", "", kc); !strings.Contains(stdout, `"headersHelper": "projectmcp token"`) ||
		strings.Contains(stderr, "--audience") {
		t.Errorf("--token-audience \"\":\n%s\n%s", stdout, stderr)
	}
	if stdout, _ := runCode(t, exitOK, "connect", "guarded", "--client", "json", "--auth", "none", kc); strings.Contains(stdout, "Authorization") {
		t.Errorf("--auth none must leave the header out:\n%s", stdout)
	}
	// --aggregate: the project's endpoint, printed for json as the entry alone.
	if stdout, _ := runCode(t, exitOK, "connect", "guarded", "--client", "json", "--aggregate", kc); !strings.HasPrefix(stdout, "{\n  \"type\": \"http\",\n  \"url\": \""+endpoint+"\"") {
		t.Errorf("--aggregate printed:\n%s", stdout)
	}

	// --write in a project folder named like the object: NAME comes from the folder.
	project := filepath.Join(t.TempDir(), "guarded")
	stdout, _ = runCode(t, exitOK, "connect", "--project", project, "--write", "--token-service-account", "default/agent", kc)
	if !strings.Contains(stdout, `created "a" (`+v1alpha1.ServerEndpoint(endpoint, "a")+`)`) {
		t.Fatalf("stdout: %s", stdout)
	}
	var written struct {
		MCPServers map[string]serverEntry `json:"mcpServers"`
	}
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(project, ".mcp.json"))), &written); err != nil {
		t.Fatal(err)
	}
	entry := written.MCPServers["a"]

	// The entry works: its headersHelper, run as the agent runs it, mints a token of a
	// ServiceAccount that may use the project, and a session lists the project's tools;
	// without the grant, 403.
	serviceAccountToken(t, "default", "agent", "guarded") // the ServiceAccount and its grant
	helper, ok := strings.CutPrefix(entry.HeadersHelper, tokenCommand+" ")
	if !ok || len(entry.Headers) != 0 {
		t.Fatalf("the written entry has headers %v and headersHelper %q, want only the helper", entry.Headers, entry.HeadersHelper)
	}
	header := tokenRun(t, append(strings.Fields(helper), kc)...)
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	session, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil).Connect(cctx,
		&mcp.StreamableClientTransport{Endpoint: entry.URL, HTTPClient: &http.Client{Transport: headerTransport{header}}}, nil)
	if err != nil {
		t.Fatalf("connecting with the written entry: %v", err)
	}
	tools, err := session.ListTools(cctx, nil)
	if err != nil || len(tools.Tools) == 0 {
		t.Fatalf("tools: %v %v", tools, err)
	}
	_ = session.Close()

	if code := ctl.stop(t, syscall.SIGTERM, 30*time.Second); code != exitOK {
		t.Fatalf("the controller exited %d after SIGTERM", code)
	}
}

// headerTransport sets the Authorization header, as an agent does from its config entry.
type headerTransport struct{ value string }

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", h.value)
	return http.DefaultTransport.RoundTrip(r)
}

// serviceAccountToken creates a ServiceAccount allowed to use one ProjectMCP and returns a
// token for it, as `kubectl create token` does.
func serviceAccountToken(t *testing.T, ns, sa, project string) string {
	t.Helper()
	env := apiServer(t)
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	account := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns}}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{"mcp.dsh.dev"}, Resources: []string{"projectmcps"}, ResourceNames: []string{project}, Verbs: []string{access.UseVerb},
	}}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: sa},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}}}
	for _, o := range []client.Object{account, role, binding} {
		env.DeleteOnCleanup(t, o)
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// The entries connect writes: one per enabled server at its own endpoint, and one for the
// rest at the project's endpoint leaving those servers out; with aggregate the one entry.
func TestConnectEntries(t *testing.T) {
	key := types.NamespacedName{Namespace: "default", Name: "shop"}
	const endpoint = "http://127.0.0.1:8484/projects/default/shop/mcp"
	project := func(names ...string) *v1alpha1.ProjectMCP {
		obj := &v1alpha1.ProjectMCP{Status: v1alpha1.ProjectMCPStatus{Endpoint: endpoint}}
		for _, n := range names {
			obj.Spec.Servers = append(obj.Spec.Servers, v1alpha1.MCPServer{Name: n, Disabled: n == "off"})
		}
		return obj
	}
	own := func(n string) string { return n + "=" + v1alpha1.ServerEndpoint(endpoint, n) }
	for _, tc := range []struct {
		name      string
		obj       *v1alpha1.ProjectMCP
		aggregate bool
		entry     string
		want      []string
		err       string
	}{
		{"per server and the rest", project("memory", "off", "docs"), false, "projectmcp",
			[]string{own("memory"), own("docs"), "projectmcp=" + endpoint + "?except=docs,memory"}, ""},
		{"the rest named by --entry", project("a"), false, "more", []string{own("a"), "more=" + endpoint + "?except=a"}, ""},
		{"aggregate", project("a", "b"), true, "projectmcp", []string{"projectmcp=" + endpoint}, ""},
		{"a server of the entry's name", project("projectmcp"), false, "projectmcp", nil, `a server named "projectmcp"`},
		{"no enabled server", project("off"), false, "projectmcp", nil, "no enabled server"},
	} {
		got, err := connectEntries(key, tc.obj, tc.aggregate, tc.entry)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error %v, want %q", tc.name, err, tc.err)
			}
			continue
		}
		var names []string
		for _, e := range got {
			names = append(names, e.name+"="+e.url)
		}
		if err != nil || !slices.Equal(names, tc.want) {
			t.Errorf("%s: %v %v, want %v", tc.name, names, err, tc.want)
		}
	}
}
