package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// NodeScripts returns node and the folder of the npm scripts (test/node), with their
// dependencies installed from test/node/package-lock.json; it skips without node and npm.
// The scripts drive real MCP clients no one here wrote (the npm SDK, the conformance suite), and
// node_modules/.bin holds the real Claude Code.
func NodeScripts(t testing.TB) (node, dir string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not on PATH")
	}
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir = filepath.Join(root, "test", "node")
	if !installed(filepath.Join(dir, "node_modules"), "@modelcontextprotocol/sdk", "@modelcontextprotocol/conformance",
		"@modelcontextprotocol/server-everything", "glob", "@anthropic-ai/claude-code") {
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
	return node, dir
}

// installed reports whether every package named is in the node_modules folder.
func installed(modules string, packages ...string) bool {
	for _, p := range packages {
		if _, err := os.Stat(filepath.Join(modules, filepath.FromSlash(p), "package.json")); err != nil {
			return false
		}
	}
	return true
}
