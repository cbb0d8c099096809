package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/config"
)

// servedAt creates a ProjectMCP with the spec .dsh/mcp.json text gives, and writes into its
// status the project's endpoint and the servers' own, as whoever may write status can.
func servedAt(t *testing.T, name, dsh, endpoint string, serverEndpoints map[string]string) {
	t.Helper()
	env := apiServer(t)
	spec, err := config.Parse(config.DefaultPath, []byte(dsh))
	if err != nil {
		t.Fatal(err)
	}
	obj := &v1alpha1.ProjectMCP{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: *spec}
	env.DeleteOnCleanup(t, obj)
	ctx := context.Background()
	if err := env.Client.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	obj.Status.Endpoint = endpoint
	for server, e := range serverEndpoints {
		obj.Status.Servers = append(obj.Status.Servers, v1alpha1.ServerStatus{Name: server, Endpoint: e})
	}
	if err := env.Client.Status().Update(ctx, obj); err != nil {
		t.Fatal(err)
	}
}

// The rule on endpoints, alone.
func TestCheckEndpoint(t *testing.T) {
	for _, c := range []struct {
		endpoint string
		insecure bool
		want     string // "" when accepted
	}{
		{endpoint: "https://mcp.example.com/projects/default/shop/mcp"},
		{endpoint: "https://10.1.2.3:8484/projects/default/shop/mcp"},
		{endpoint: "http://127.0.0.1:8484/projects/default/shop/mcp"},
		{endpoint: "http://127.3.4.5:8484/projects/default/shop/mcp"},
		{endpoint: "http://[::1]:8484/projects/default/shop/mcp"},
		{endpoint: "http://localhost:8484/projects/default/shop/mcp"},
		{endpoint: "http://10.1.2.3:8484/projects/default/shop/mcp", insecure: true},
		{endpoint: "http://10.1.2.3:8484/projects/default/shop/mcp", want: "the endpoint http://10.1.2.3:8484/projects/default/shop/mcp is plain http to another machine"},
		{endpoint: "http://projectmcp.projectmcp-system.svc:8484/projects/default/shop/mcp", want: "gateway.tls values"},
		{endpoint: "http://localhost.evil.example/projects/default/shop/mcp", want: "--allow-insecure-http"},
		{endpoint: "http://127.0.0.1.nip.io/projects/default/shop/mcp", want: "plain http to another machine"},
		{endpoint: "ftp://10.1.2.3/projects/default/shop/mcp", want: "is not http:// or https://"},
		{endpoint: "ftp://10.1.2.3/projects/default/shop/mcp", insecure: true, want: "is not http:// or https://"},
		{endpoint: "/projects/default/shop/mcp", want: "is not an http(s) URL with a host"},
		{endpoint: "http://%zz", want: "is not an http(s) URL with a host"},
	} {
		err := checkEndpoint(c.endpoint, c.insecure)
		if (c.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), c.want) {
			t.Errorf("checkEndpoint(%q, %v) = %v, want %q", c.endpoint, c.insecure, err, c.want)
		}
	}
}

// connect refuses an endpoint in status that is plain http to another machine, whether it is
// the project's (status.endpoint) or a server's own (status.servers[].endpoint), printing or
// writing nothing and naming the endpoint, the TLS settings and the flag;
// --allow-insecure-http writes it; https and loopback http are written as they are.
func TestConnectRefusesCleartextEndpoints(t *testing.T) {
	kc := "--kubeconfig=" + apiServer(t).Kubeconfig
	t.Setenv("XDG_CONFIG_HOME", t.TempDir()) // the --write below trusts its gateway there
	dsh := `{"mcpServers": {"memory": {"command": "npx"}, "docs": {"url": "https://mcp.example.com/mcp"}}}`
	cleartext := "http://10.1.2.3:8484/projects/default/clear/mcp"
	servedAt(t, "clear", dsh, cleartext, nil)
	project := filepath.Join(t.TempDir(), "clear")
	for _, args := range [][]string{{}, {"--write"}, {"--aggregate", "--write"}} {
		stdout, stderr := runCode(t, exitFailure, append([]string{"connect", "--project", project, "--auth", "none", kc}, args...)...)
		refused := v1alpha1.ServerEndpoint(cleartext, "memory")
		if len(args) > 1 {
			refused = cleartext
		}
		for _, want := range []string{
			"the endpoint " + refused + " is plain http to another machine",
			"gateway.tls", "--gateway-tls-cert", "--allow-insecure-http",
		} {
			if !strings.Contains(stderr, want) {
				t.Errorf("%v: stderr lacks %q:\n%s", args, want, stderr)
			}
		}
		if _, err := os.Lstat(filepath.Join(project, ".mcp.json")); stdout != "" || !os.IsNotExist(err) {
			t.Errorf("%v: a refused endpoint was printed or written (%v): %s", args, err, stdout)
		}
	}
	stdout, _ := runCode(t, exitOK, "connect", "--project", project, "--auth", "none", "--allow-insecure-http", "--write", kc)
	if !strings.Contains(stdout, `created "memory" (`+v1alpha1.ServerEndpoint(cleartext, "memory")+")") ||
		!strings.Contains(readFile(t, filepath.Join(project, ".mcp.json")), cleartext[:len(cleartext)-len("/mcp")]) {
		t.Errorf("--allow-insecure-http: %s", stdout)
	}

	// The project's endpoint on TLS, one server's own endpoint in cleartext: refused for it.
	// (Another gateway than the one trusted above: a config folder that trusts none yet.)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	secure := "https://mcp.example.com/projects/default/mixed/mcp"
	servedAt(t, "mixed", dsh, secure, map[string]string{"docs": "http://192.0.2.7/projects/default/mixed/servers/docs/mcp"})
	mixed := filepath.Join(t.TempDir(), "mixed")
	_, stderr := runCode(t, exitFailure, "connect", "--project", mixed, "--auth", "none", kc)
	if !strings.Contains(stderr, `entry "docs": the endpoint http://192.0.2.7/projects/default/mixed/servers/docs/mcp is plain http`) ||
		strings.Contains(stderr, `entry "memory"`) {
		t.Errorf("a server's cleartext endpoint: %s", stderr)
	}
	// The aggregate entry points at the project's endpoint only, which is https.
	if stdout, _ := runCode(t, exitOK, "connect", "--project", mixed, "--auth", "none", "--aggregate", kc); !strings.Contains(stdout, secure) {
		t.Errorf("https: %s", stdout)
	}
	loopback := "http://127.0.0.1:8484/projects/default/local/mcp"
	servedAt(t, "local", dsh, loopback, nil)
	if stdout, _ := runCode(t, exitOK, "connect", "--project", filepath.Join(t.TempDir(), "local"), "--auth", "none", kc); !strings.Contains(stdout, v1alpha1.ServerEndpoint(loopback, "docs")) {
		t.Errorf("loopback http: %s", stdout)
	}

	// adopt points entries at the same endpoints, by the same rule.
	adoptee := filepath.Join(t.TempDir(), "clear")
	before := `{"mcpServers": {"memory": {"command": "npx"}}}`
	writeFile(t, filepath.Join(adoptee, ".mcp.json"), before)
	_, stderr = runCode(t, exitFailure, "adopt", "--project", adoptee, "--auth", "none", kc)
	if !strings.Contains(stderr, "the endpoint "+cleartext+" is plain http to another machine") || readFile(t, filepath.Join(adoptee, ".mcp.json")) != before {
		t.Errorf("adopt: %s", stderr)
	}
	_, stderr = runCode(t, exitUsage, "adopt", "--project", adoptee, "--endpoint", cleartext, kc)
	if !strings.Contains(stderr, "--endpoint: the endpoint "+cleartext+" is plain http") {
		t.Errorf("adopt --endpoint: %s", stderr)
	}
}

// outsideFile is a file of the user's outside the project (their editor's own settings), and
// the directory holding it.
func outsideFile(t *testing.T) (dir, file, content string) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "home", ".config", "Code", "User")
	file = filepath.Join(dir, "mcp.json")
	content = `{"servers": {"personal": {"command": "./mine"}}, "mcpServers": {"personal": {"command": "./mine"}}}`
	writeFile(t, file, content)
	return dir, file, content
}

// unchanged fails unless dir holds file alone, with content: nothing written there, not even
// a temporary file left behind.
func unchanged(t *testing.T, dir, file, content string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || readFile(t, file) != content {
		t.Fatalf("the file outside the project changed: %v entries, %q", len(entries), readFile(t, file))
	}
}

// symlink makes link point at target.
func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// connect --write never writes out of the project folder: a cloned repository whose .vscode
// links to the user's VS Code settings, or whose .mcp.json links to a file of theirs, is
// refused naming the link and where it points, the file there untouched. A link that stays
// in the project is written through: the link stays a link, its target gets the entry and
// keeps its mode.
func TestConnectWriteStaysInTheProject(t *testing.T) {
	kc := "--kubeconfig=" + apiServer(t).Kubeconfig
	endpoint := servedProject(t, "cloned", `{"mcpServers": {"memory": {"command": "npx"}}}`)
	outDir, outFile, outContent := outsideFile(t)

	project := filepath.Join(t.TempDir(), "cloned")
	symlink(t, outDir, filepath.Join(project, ".vscode"))
	_, stderr := runCode(t, exitFailure, "connect", "--project", project, "--client", "vscode", "--auth", "none", "--write", kc)
	if want := filepath.Join(project, ".vscode", "mcp.json") + ": refusing to read or write it: .vscode is a symlink to " + outDir + ", outside the project folder"; !strings.Contains(stderr, want) {
		t.Errorf("stderr lacks %q:\n%s", want, stderr)
	}
	unchanged(t, outDir, outFile, outContent)

	// The file itself, by a relative link that climbs out.
	rel, err := filepath.Rel(project, outFile)
	if err != nil {
		t.Fatal(err)
	}
	symlink(t, rel, filepath.Join(project, ".mcp.json"))
	_, stderr = runCode(t, exitFailure, "connect", "--project", project, "--auth", "none", "--write", kc)
	if want := ".mcp.json is a symlink to " + rel + " (" + outFile + "), outside the project folder"; !strings.Contains(stderr, want) {
		t.Errorf("stderr lacks %q:\n%s", want, stderr)
	}
	unchanged(t, outDir, outFile, outContent)

	// Cursor's file linked to a file of the project: written where the link leads.
	shared := filepath.Join(project, "config", "mcp.json")
	writeFile(t, shared, `{"mcpServers": {}}`)
	if err := os.Chmod(shared, 0o640); err != nil {
		t.Fatal(err)
	}
	cursor := filepath.Join(project, ".cursor", "mcp.json")
	symlink(t, filepath.Join("..", "config", "mcp.json"), cursor)
	stdout, _ := runCode(t, exitOK, "connect", "--project", project, "--client", "cursor", "--auth", "none", "--write", kc)
	if want := cursor + `: added "memory" (` + v1alpha1.ServerEndpoint(endpoint, "memory") + ")\n" +
		cursor + `: added "projectmcp" (` + endpoint + "?except=memory)\n"; stdout != want {
		t.Errorf("stdout %q, want %q", stdout, want)
	}
	info, err := os.Lstat(cursor)
	if err != nil || info.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("%s is no longer a symlink: %v %v", cursor, info.Mode(), err)
	}
	if info, err := os.Stat(shared); err != nil || info.Mode().Perm() != 0o640 || !strings.Contains(readFile(t, shared), v1alpha1.ServerEndpoint(endpoint, "memory")) {
		t.Fatalf("the link's target: %v %v %s", info.Mode(), err, readFile(t, shared))
	}
	unchanged(t, outDir, outFile, outContent)
}

// adopt --write reads and writes only inside the project: a client file linked out of it is
// not read (its servers would move into .dsh/mcp.json, and so into the cluster), and a .dsh
// linked out of it is not written; nothing is written anywhere.
func TestAdoptWriteStaysInTheProject(t *testing.T) {
	kc := "--kubeconfig=" + apiServer(t).Kubeconfig
	outDir, outFile, outContent := outsideFile(t)

	project := filepath.Join(t.TempDir(), "adopted")
	symlink(t, outFile, filepath.Join(project, ".mcp.json"))
	_, stderr := runCode(t, exitFailure, "adopt", "--project", project, "--write", kc)
	if want := ".mcp.json is a symlink to " + outFile + ", outside the project folder"; !strings.Contains(stderr, want) {
		t.Errorf("stderr lacks %q:\n%s", want, stderr)
	}
	if _, err := os.Lstat(filepath.Join(project, ".dsh")); !os.IsNotExist(err) {
		t.Errorf(".dsh was written: %v", err)
	}
	unchanged(t, outDir, outFile, outContent)

	other := filepath.Join(t.TempDir(), "adopted")
	before := `{"mcpServers": {"memory": {"command": "npx"}}}`
	writeFile(t, filepath.Join(other, ".mcp.json"), before)
	dshDir := filepath.Join(t.TempDir(), "elsewhere")
	if err := os.MkdirAll(dshDir, 0o755); err != nil {
		t.Fatal(err)
	}
	symlink(t, dshDir, filepath.Join(other, ".dsh"))
	_, stderr = runCode(t, exitFailure, "adopt", "--project", other, "--write", kc)
	if want := filepath.Join(other, ".dsh", "mcp.json") + ": refusing to read or write it: .dsh is a symlink to " + dshDir; !strings.Contains(stderr, want) {
		t.Errorf("stderr lacks %q:\n%s", want, stderr)
	}
	if entries, err := os.ReadDir(dshDir); err != nil || len(entries) != 0 || readFile(t, filepath.Join(other, ".mcp.json")) != before {
		t.Errorf("adopt wrote through the link: %v %v", entries, err)
	}
}
