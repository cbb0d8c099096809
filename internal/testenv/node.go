package testenv

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
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
	modules := filepath.Join(dir, "node_modules")
	if installed(modules, nodePackages...) {
		return node, dir
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Skip("npm is not on PATH")
	}
	// The packages' test binaries run at once, and npm ci first removes node_modules: one
	// installs while the others wait, then finds the packages there.
	unlock := lockFile(t, filepath.Join(dir, ".install.lock"))
	defer unlock()
	if !installed(modules, nodePackages...) {
		cmd := exec.Command(npm, "ci", "--no-audit", "--no-fund")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm ci: %v\n%s", err, out)
		}
	}
	return node, dir
}

// nodePackages are the packages of test/node/package.json the tests use.
var nodePackages = []string{"@modelcontextprotocol/sdk", "@modelcontextprotocol/conformance",
	"@modelcontextprotocol/server-everything", "@modelcontextprotocol/server-sequential-thinking", "glob", "@anthropic-ai/claude-code"}

// SequentialThinking is the npm @modelcontextprotocol/server-sequential-thinking as a stdio
// server, installed from test/node's lock file and run by node as the tests run
// server-everything: a real third-party server whose one process keeps one thought history
// and one set of branches for all its clients, which makes the sharing scope visible
// (docs/sharing.md). Its thoughts are not echoed to stderr. It skips without node and npm.
func SequentialThinking(t testing.TB) *v1alpha1.StdioServer {
	t.Helper()
	node, dir := NodeScripts(t)
	script := filepath.Join(dir, "node_modules", "@modelcontextprotocol", "server-sequential-thinking", "dist", "index.js")
	return &v1alpha1.StdioServer{Command: node, Args: []string{script},
		Env: []v1alpha1.NameValue{{Name: "DISABLE_THOUGHT_LOGGING", Value: "true"}}}
}

// lockFile takes an exclusive flock on path, waiting for another process that holds it; the
// kernel drops it when that process exits, however it exits.
func lockFile(t testing.TB, path string) (unlock func()) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EINTR) {
			f.Close()
			t.Fatalf("locking %s: %v", path, err)
		}
	}
	return func() { f.Close() } // closing the descriptor releases the lock
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
