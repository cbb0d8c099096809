package gateway_test

import (
	"encoding/json"
	"maps"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/testenv"
	"github.com/dsh-dev/projectmcp/internal/testenv/harness"
)

// The npm @modelcontextprotocol/sdk client (test/node/client.mjs) lists and calls tools through
// the gateway and receives list_changed. It runs when node and npm are present; dependencies
// come from test/node/package-lock.json.
func TestGatewayNodeClient(t *testing.T) {
	node, dir := testenv.NodeScripts(t)
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "node", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "a")}})
	obj := harness.WaitStatus(t, key, 30*time.Second, "Ready", func(o *v1alpha1.ProjectMCP) bool { return harness.IsReady(o) && o.Status.Endpoint != "" })

	cmd := exec.Command(node, filepath.Join(dir, "client.mjs"), obj.Status.Endpoint)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node client: %v\n%s", err, out)
	}
	var got struct {
		Before []string `json:"before"`
		Echo   string   `json:"echo"`
		After  []string `json:"after"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("node client printed %q: %v", out, err)
	}
	if !slices.Contains(got.Before, "a__echo") || got.Echo != "from node" || !slices.Contains(got.After, "a__from_node") {
		t.Fatalf("node client saw %+v", got)
	}
}

// The npm @modelcontextprotocol/server-everything behind the endpoint, against the same server
// directly, through the npm SDK client that declares sampling, elicitation and roots
// (test/node/compare.mjs): every operation that works directly works through the endpoint
// and answers the same, apart from the projected names and the roots the server hears (the
// project's, never a session's). Needs npx (the package comes from the
// npm registry, or its cache).
func TestGatewayMatchesServerEverything(t *testing.T) {
	node, dir := testenv.NodeScripts(t)
	if _, err := exec.LookPath("npx"); err != nil {
		t.Skip("npx is not on PATH")
	}
	pkg := []string{"-y", "@modelcontextprotocol/server-everything"}
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "everything", v1alpha1.ProjectMCPSpec{
		// The first run may download the package: retries cover it.
		Reconnect: &v1alpha1.ReconnectPolicy{MaxAttempts: ptr.To[int32](30),
			InitialBackoff: &metav1.Duration{Duration: time.Second}, MaxBackoff: &metav1.Duration{Duration: 5 * time.Second}},
		Servers: []v1alpha1.MCPServer{{Name: "everything", Stdio: &v1alpha1.StdioServer{Command: "npx", Args: pkg}}},
	})
	obj := harness.WaitStatus(t, key, 4*time.Minute, "Ready", func(o *v1alpha1.ProjectMCP) bool { return harness.IsReady(o) && o.Status.Endpoint != "" })
	cmd := exec.Command(node, append([]string{filepath.Join(dir, "compare.mjs"), obj.Status.Endpoint, "everything__", "npx"}, pkg...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("compare.mjs: %v\n%s\n%s", err, out, stderr.String())
	}
	var table map[string]struct {
		Direct, Endpoint, Diff string
		Same                   bool
	}
	if err := json.Unmarshal(out, &table); err != nil {
		t.Fatalf("compare.mjs printed %q: %v", out, err)
	}
	ops := slices.Sorted(maps.Keys(table))
	for _, op := range ops {
		r := table[op]
		t.Logf("%-50s direct: %-10s endpoint: %s", op, r.Direct, r.Endpoint)
	}
	// Where the endpoint differs on purpose: a 2025-11-25 server's roots are the shared
	// connection's (the project's, none here), never a session's, whose answer would set them
	// for every session. So get-roots-list shows none, and the server sends none of the
	// "Roots updated: 1 root(s) received from client" lines that are its only log lines in
	// this run.
	roots := map[string]func(endpoint, diff string) bool{
		"notifications/message (after setLevel debug)": func(endpoint, _ string) bool { return endpoint == "none" },
		"tools/call get-roots-list": func(endpoint, diff string) bool {
			return endpoint == "ok" && strings.Contains(diff, "no roots are currently configured")
		},
	}
	for _, op := range ops {
		r := table[op]
		if want, ok := roots[op]; ok {
			if r.Direct != "ok" || !want(r.Endpoint, r.Diff) {
				t.Errorf("%s: directly %s, through the endpoint %s (%s): the server must hear no session's roots", op, r.Direct, r.Endpoint, r.Diff)
			}
			continue
		}
		if !r.Same {
			t.Errorf("%s: directly %s, through the endpoint %s; first difference %s", op, r.Direct, r.Endpoint, r.Diff)
		}
	}
	for _, op := range []string{"tools/list", "prompts/list", "resources/list", "resources/templates/list"} {
		if table[op].Endpoint != "ok" {
			t.Errorf("%s must work through the endpoint: %s", op, table[op].Endpoint)
		}
	}
}
