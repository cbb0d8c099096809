package controllers

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/testenv"
)

// The npm @modelcontextprotocol/sdk client (test/node/client.mjs) lists and calls tools through
// the gateway and receives list_changed. It runs when node and npm are present; dependencies
// come from test/node/package-lock.json.
func TestGatewayNodeClient(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not on PATH")
	}
	root, _ := testenv.RepoRoot()
	dir := filepath.Join(root, "test", "node")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk")); err != nil {
		npm, err := exec.LookPath("npm")
		if err != nil {
			t.Skip("npm is not on PATH")
		}
		cmd := exec.Command(npm, "ci", "--no-audit", "--no-fund")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm ci: %v\n%s", err, out)
		}
	}
	ns := newNamespace(t)
	key := create(t, ns, "node", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{fixtureServer(t, "a")}})
	obj := waitStatus(t, key, 30*time.Second, "Ready", func(o *v1alpha1.ProjectMCP) bool { return isReady(o) && o.Status.Endpoint != "" })

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
