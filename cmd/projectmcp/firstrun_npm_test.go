//go:build firstrun

package main

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/internal/controlplane"
	"github.com/dsh-dev/projectmcp/internal/testenv"
)

// A newcomer's first `projectmcp dev` of the bundled demo, on a machine whose npm cache is
// empty (a fresh HOME: npx keeps its cache there, and dev runs the servers with the user's
// HOME): dev says what each server is doing while npx downloads the packages, and once it
// prints the endpoint, `connect --write` succeeds and a client's first tools/list has the
// demo's tools. Needs the npm registry; `make test-first-run` runs it.
func TestFirstRunEmptyNpmCache(t *testing.T) {
	testenv.Require(t)
	requireFreePorts(t, "127.0.0.1:8484")
	if _, err := exec.LookPath("npx"); err != nil {
		t.Fatal("npx is needed: the demo's servers are npm packages")
	}
	assets, err := controlplane.Ensure(context.Background(), controlplane.Options{Progress: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	sh := newReadmeShell(t, "")
	sh.env = append(sh.env, "KUBEBUILDER_ASSETS="+assets)
	demo := filepath.Join(sh.home, "src", "demo")
	if err := os.CopyFS(demo, os.DirFS(filepath.Join(root, "examples", "demo"))); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(sh.home, ".npm")); !os.IsNotExist(err) {
		t.Fatalf("the npm cache must start empty: %v", err)
	}

	started := time.Now()
	dev := startShell(t, sh, "src/demo", "projectmcp dev")
	dev.waitFor(t, 10*time.Minute, "Press Ctrl-C to stop.")
	out := dev.out.String()
	before, _, _ := strings.Cut(out, "endpoint:")
	t.Logf("dev printed the endpoint after %s:\n%s", time.Since(started).Round(time.Second), before)
	for _, want := range []string{
		"memory: starting (npx may be downloading the package on a first run)\n",
		"everything: starting (npx may be downloading the package on a first run)\n",
		"memory: ready, 9 tools\n",
		"everything: ready, ",
	} {
		if !strings.Contains(before, want) {
			t.Fatalf("dev must say %q before the endpoint:\n%s", strings.TrimSpace(want), before)
		}
	}
	var kubeconfig, endpoint string
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "kubeconfig: "); ok {
			kubeconfig = v
		}
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "endpoint:"); ok {
			endpoint = strings.TrimSpace(v)
		}
	}

	// At once: connect writes the entry dev printed, and a client lists the demo's tools.
	sh.env = append(sh.env, "KUBECONFIG="+kubeconfig)
	if code, out := sh.run(t, "src/demo", "projectmcp connect --write"); code != exitOK || !strings.Contains(out, `created "memory"`) {
		t.Fatalf("connect --write: exit %d:\n%s", code, out)
	}
	if written := readFile(t, filepath.Join(demo, ".mcp.json")); strings.TrimSpace(written) != printedEntry(t, out) {
		t.Fatalf("dev printed\n%s\nconnect wrote\n%s", printedEntry(t, out), written)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	session, err := mcp.NewClient(&mcp.Implementation{Name: "first-run", Version: "1"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer session.Close()
	res, err := session.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
	}
	for _, want := range []string{"memory__read_graph", "everything__echo"} {
		if !slices.Contains(names, want) {
			t.Errorf("the first tools/list lacks %s: %v", want, names)
		}
	}
	if code := dev.stop(t, syscall.SIGINT, 60*time.Second); code != exitOK {
		t.Fatalf("dev exited %d after Ctrl-C, want 0", code)
	}
}
