package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
)

// One gateway has one origin however its URL is spelled.
func TestOriginOf(t *testing.T) {
	for in, want := range map[string]string{
		"https://MCP.example.com/projects/default/shop/mcp": "https://mcp.example.com",
		"https://mcp.example.com:443/x":                     "https://mcp.example.com",
		"https://mcp.example.com:8443/x":                    "https://mcp.example.com:8443",
		"http://10.1.2.3:80/x":                              "http://10.1.2.3",
		"http://[::1]:8484/x":                               "http://[::1]:8484",
		"mcp.example.com":                                   "",
		"ftp://mcp.example.com":                             "",
		"https:///x":                                        "",
	} {
		got, err := originOf(in)
		if got != want || (err == nil) != (want != "") {
			t.Errorf("originOf(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// Which origin the targets are held to: the flag's, else the pin, else the one status names on
// first use (none for endpoints on this machine; two are refused).
func TestTrustedOrigin(t *testing.T) {
	at := func(urls ...string) []endpointEntry {
		var out []endpointEntry
		for _, u := range urls {
			out = append(out, endpointEntry{name: "e", url: u})
		}
		return out
	}
	gw, other := "https://gw.example.com/projects/d/p/mcp", "https://evil.example.com/projects/d/p/servers/s/mcp"
	for name, c := range map[string]struct {
		flag, pinned string
		targets      []endpointEntry
		want         string
		firstUse     bool
		err          string
	}{
		"the flag wins":            {flag: "https://mine.example.com", pinned: "https://gw.example.com", targets: at(gw), want: "https://mine.example.com"},
		"the pin":                  {pinned: "https://gw.example.com", targets: at(other), want: "https://gw.example.com"},
		"first use":                {targets: at(gw, "https://GW.example.com:443/x"), want: "https://gw.example.com", firstUse: true},
		"first use, loopback only": {targets: at("http://127.0.0.1:8484/x", "http://localhost:1/y")},
		"first use, loopback left": {targets: at("http://127.0.0.1:8484/x", gw), want: "https://gw.example.com", firstUse: true},
		"first use, two gateways":  {targets: at(gw, other), err: "names two gateways, https://gw.example.com and https://evil.example.com"},
	} {
		got, first, err := trustedOrigin(c.flag, c.pinned, c.targets)
		if got != c.want || first != c.firstUse || (err == nil) != (c.err == "") || err != nil && !strings.Contains(err.Error(), c.err) {
			t.Errorf("%s: trustedOrigin = %q, %v, %v; want %q, %v, %q", name, got, first, err, c.want, c.firstUse, c.err)
		}
	}
}

// A target off the trusted origin is refused, naming the entry, the field, the host and the
// flag; one on this machine is not pinned.
func TestCheckPinned(t *testing.T) {
	key := types.NamespacedName{Namespace: "default", Name: "shop"}
	targets := []endpointEntry{
		{name: "memory", url: "https://gw.example.com/projects/default/shop/servers/memory/mcp", field: projectEndpointField},
		{name: "docs", url: "https://evil.example.com/x", field: "status.servers[docs].endpoint"},
		{name: "local", url: "http://127.0.0.1:9/x", field: projectEndpointField},
	}
	err := checkPinned(key, targets, "https://gw.example.com", "PINS")
	if err == nil {
		t.Fatal("a target on another host passed")
	}
	for _, want := range []string{`projectmcp default/shop, entry "docs": status.servers[docs].endpoint names https://evil.example.com`,
		"not the gateway trusted for this cluster (https://gw.example.com, kept in PINS)", "--gateway-url https://evil.example.com"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal lacks %q: %v", want, err)
		}
	}
	if strings.Contains(err.Error(), `"memory"`) || strings.Contains(err.Error(), `"local"`) {
		t.Errorf("a trusted or local target was refused: %v", err)
	}
	if err := checkPinned(key, targets[:1], "https://gw.example.com", "PINS"); err != nil {
		t.Errorf("the trusted gateway was refused: %v", err)
	}
}

// connect trusts the gateway its first --write meets and keeps it per cluster; a status that
// later names another host, as the project's or a server's endpoint, is refused by connect and
// adopt, writing nothing, until --gateway-url names that host. Printing alone trusts nothing.
func TestConnectPinsTheGateway(t *testing.T) {
	env := apiServer(t)
	kc := "--kubeconfig=" + env.Kubeconfig
	config := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", config)
	pinFile := filepath.Join(config, "projectmcp", "gateways.json")
	dsh := `{"mcpServers": {"memory": {"command": "npx"}, "docs": {"url": "https://docs.example.com/mcp"}}}`
	gw := "https://gw.example.com/projects/default/pinned/mcp"
	servedAt(t, "pinned", dsh, gw, nil)
	project := filepath.Join(t.TempDir(), "pinned")
	connect := func(code int, args ...string) (string, string) {
		return runCode(t, code, append([]string{"connect", "--project", project, "--auth", "none", kc}, args...)...)
	}

	connect(exitOK)
	if _, err := os.Stat(pinFile); !os.IsNotExist(err) {
		t.Fatalf("printing trusted a gateway: %v", err)
	}
	_, stderr := connect(exitOK, "--write")
	if !strings.Contains(stderr, "Trusting the gateway https://gw.example.com for the cluster at ") {
		t.Errorf("the first write does not say it trusts the gateway: %s", stderr)
	}
	cluster := strings.TrimSuffix(env.Config.Host, "/") // as the kubeconfig names the API server
	if pins := readPins(t, pinFile); len(pins) != 1 || pins[cluster] != "https://gw.example.com" {
		t.Fatalf("pins: %v, want the gateway for %s", pins, cluster)
	}
	if info, err := os.Stat(pinFile); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("the pin file: %v %v", info.Mode(), err)
	}
	written := readFile(t, filepath.Join(project, ".mcp.json"))

	evil := "https://evil.example.com/projects/default/pinned/mcp"
	setEndpoints(t, "pinned", evil, nil)
	for _, args := range [][]string{{}, {"--write"}, {"--aggregate", "--write", "--force"}} {
		stdout, stderr := connect(exitFailure, args...)
		for _, want := range []string{"status.endpoint names https://evil.example.com", "(https://gw.example.com, kept in " + pinFile + ")",
			"pass --gateway-url https://evil.example.com to trust it"} {
			if !strings.Contains(stderr, want) {
				t.Errorf("%v: stderr lacks %q: %s", args, want, stderr)
			}
		}
		if stdout != "" || readFile(t, filepath.Join(project, ".mcp.json")) != written {
			t.Errorf("%v: a refused endpoint was printed or written: %s", args, stdout)
		}
	}
	// A server's own endpoint on another host, the project's on the trusted one.
	setEndpoints(t, "pinned", gw, map[string]string{"docs": "https://evil.example.com/projects/default/pinned/servers/docs/mcp"})
	if _, stderr := connect(exitFailure); !strings.Contains(stderr, `entry "docs": status.servers[docs].endpoint names https://evil.example.com`) ||
		strings.Contains(stderr, `entry "memory"`) {
		t.Errorf("a server's endpoint on another host: %s", stderr)
	}

	// adopt holds the endpoints it writes to the same gateway.
	setEndpoints(t, "pinned", evil, nil)
	adoptee := filepath.Join(t.TempDir(), "pinned")
	before := `{"mcpServers": {"memory": {"command": "npx"}}}`
	writeFile(t, filepath.Join(adoptee, ".mcp.json"), before)
	if _, stderr := runCode(t, exitFailure, "adopt", "--project", adoptee, "--auth", "none", "--write", kc); !strings.Contains(stderr, "names https://evil.example.com") ||
		readFile(t, filepath.Join(adoptee, ".mcp.json")) != before {
		t.Errorf("adopt: %s", stderr)
	}

	// The user trusts the new host: it is written, and kept in place of the old.
	if stdout, _ := connect(exitOK, "--write", "--gateway-url", "https://EVIL.example.com:443"); !strings.Contains(stdout, v1alpha1.ServerEndpoint(evil, "memory")) {
		t.Errorf("--gateway-url: %s", stdout)
	}
	if pins := readPins(t, pinFile); pins[cluster] != "https://evil.example.com" {
		t.Errorf("pins after --gateway-url: %v", pins)
	}
	if _, stderr := runCode(t, exitUsage, "connect", "--gateway-url", "gw.example.com", kc); !strings.Contains(stderr, `--gateway-url: "gw.example.com" is not an http(s) URL with a host`) {
		t.Errorf("a --gateway-url without a scheme: %s", stderr)
	}
}

// setEndpoints writes a served project's status endpoints, as whoever may write status can.
func setEndpoints(t *testing.T, name, endpoint string, servers map[string]string) {
	t.Helper()
	env := apiServer(t)
	obj := &v1alpha1.ProjectMCP{}
	ctx := context.Background()
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, obj); err != nil {
		t.Fatal(err)
	}
	obj.Status.Endpoint, obj.Status.Servers = endpoint, nil
	for server, e := range servers {
		obj.Status.Servers = append(obj.Status.Servers, v1alpha1.ServerStatus{Name: server, Endpoint: e})
	}
	if err := env.Client.Status().Update(ctx, obj); err != nil {
		t.Fatal(err)
	}
}

func readPins(t *testing.T, path string) map[string]string {
	t.Helper()
	var pins map[string]string
	if err := json.Unmarshal([]byte(readFile(t, path)), &pins); err != nil {
		t.Fatal(err)
	}
	return pins
}
