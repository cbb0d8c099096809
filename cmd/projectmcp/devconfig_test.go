package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dsh-dev/projectmcp/internal/controlplane"
	"github.com/dsh-dev/projectmcp/internal/testenv"
)

// The reporter prints a refusal once per change of the reader's errors, and says when the
// file is applied again; an accepted file read again says nothing.
func TestConfigReporter(t *testing.T) {
	var out bytes.Buffer
	r := &configReporter{file: "/p/.dsh/mcp.json", w: &out}
	refused := func(msg string) metav1.Condition {
		return metav1.Condition{Status: metav1.ConditionFalse, Message: msg + stillInEffect}
	}
	applied := metav1.Condition{Status: metav1.ConditionTrue, Message: ".dsh/mcp.json applied: 1 servers"}
	noted := metav1.Condition{Status: metav1.ConditionTrue, Message: `.dsh/mcp.json applied: 1 servers; server "a": sandbox is carried but not enforced yet`}
	steps := []struct {
		cond metav1.Condition
		want string
	}{
		{applied, ""},
		{refused(".dsh/mcp.json:3:5: unknown key \"comand\" in server \"a\"; did you mean \"command\"?"),
			"/p/.dsh/mcp.json is refused; nothing of it is applied until it is fixed:\n  .dsh/mcp.json:3:5: unknown key \"comand\" in server \"a\"; did you mean \"command\"?\n"},
		{refused(".dsh/mcp.json:3:5: unknown key \"comand\" in server \"a\"; did you mean \"command\"?"), ""},
		{refused(".dsh/mcp.json:1:1: a\n.dsh/mcp.json:2:1: b"), "/p/.dsh/mcp.json is refused; nothing of it is applied until it is fixed:\n  .dsh/mcp.json:1:1: a\n  .dsh/mcp.json:2:1: b\n"},
		{applied, "/p/.dsh/mcp.json: .dsh/mcp.json applied: 1 servers\n"},
		{applied, ""},
		{noted, "/p/.dsh/mcp.json: " + noted.Message + "\n"},
		{noted, ""},
		{applied, ""},
	}
	for i, s := range steps {
		out.Reset()
		r.onRead(s.cond)
		if out.String() != s.want {
			t.Errorf("step %d: printed %q, want %q", i, out.String(), s.want)
		}
	}
}

// projectmcp dev on a refused .dsh/mcp.json prints the reader's error (file, line, column,
// the nearest known key) before it even starts the control plane, prints it again when an
// edit leaves the file refused for another reason, and serves the project once it is fixed.
func TestDevPrintsRefusedConfig(t *testing.T) {
	testenv.Require(t) // dev starts a kube-apiserver of its own
	assets, err := controlplane.Ensure(context.Background(), controlplane.Options{Progress: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	sh := newReadmeShell(t, "")
	sh.env = append(sh.env, "KUBEBUILDER_ASSETS="+assets)
	file := filepath.Join(sh.home, "src", "shop", ".dsh", "mcp.json")
	writeFile(t, file, "{\"mcpServers\": {\n  \"a\": {\"comand\": \"npx\"}\n}}\n")

	dev := startShell(t, sh, "src/shop", "projectmcp dev --gateway-bind-address "+freeAddr(t))
	first := "  .dsh/mcp.json:2:9: unknown key \"comand\" in server \"a\"; did you mean \"command\"?"
	dev.waitFor(t, 30*time.Second, first)
	out := dev.out.String()
	refusal := strings.Index(out, file+" is refused")
	if starting := strings.Index(out, "Starting a local control plane"); refusal < 0 || starting < refusal {
		t.Fatalf("dev must name the refused file before it starts the control plane:\n%s", out)
	}

	// An edit that leaves it refused, for another reason: said again, once the mirror runs.
	writeFile(t, file, "{\"mcpServers\": {\n  \"a\": {\"command\": \"npx\", \"tools\": {\"alow\": []}}\n}}\n")
	dev.waitFor(t, 3*time.Minute, `unknown key "alow" in "tools" in server "a"; did you mean "allow"?`)

	writeFile(t, file, fixtureConfig("memory"))
	dev.waitFor(t, 3*time.Minute, file+": .dsh/mcp.json applied: 1 servers")
	dev.waitFor(t, 3*time.Minute, "Press Ctrl-C to stop.")
	if code := dev.stop(t, syscall.SIGINT, 60*time.Second); code != exitOK {
		t.Fatalf("dev exited %d after Ctrl-C, want 0", code)
	}
}

// freeAddr is a loopback address with a port free at the time of asking.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return fmt.Sprintf("127.0.0.1:%d", ln.Addr().(*net.TCPAddr).Port)
}
