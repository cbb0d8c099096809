package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/controlplane"
	"github.com/dsh-dev/projectmcp/internal/proctest"
	"github.com/dsh-dev/projectmcp/internal/testenv"
	"github.com/dsh-dev/projectmcp/test/fixture"
)

// `projectmcp dev` end to end, as a user runs it from the README: `projectmcp dev` in a project
// folder, `projectmcp connect --write` in a second terminal, Ctrl-C to the terminal's process
// group at the end (which also reaches kube-apiserver and etcd), and exit code 0.
func TestDevEndToEnd(t *testing.T) {
	testenv.Require(t) // dev starts a kube-apiserver of its own
	requireFreePorts(t, "127.0.0.1:8484")
	sh := newReadmeShell(t, "")
	// The shell's home is a temporary folder: dev finds the cached kube-apiserver through this.
	assets, err := controlplane.Ensure(context.Background(), controlplane.Options{Progress: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	sh.env = append(sh.env, "KUBEBUILDER_ASSETS="+assets)
	dir := filepath.Join(sh.home, "src", "shop")
	server := func(name string) map[string]any {
		return map[string]any{"command": os.Args[0], "args": []string{"--name", name}, "env": map[string]string{fixture.EnvVar: "1"}}
	}
	write := func(servers map[string]any) {
		data, _ := json.Marshal(map[string]any{"mcpServers": servers})
		writeFile(t, filepath.Join(dir, ".dsh", "mcp.json"), string(data))
	}
	// a answers its first initialize after 7 s, past the 5 s ready budget, as an npx server
	// does on a first run while npx downloads its package.
	slow := server("a")
	// Its tool verbose has a description over the 2 KB Claude Code keeps, which dev says.
	slow["args"] = []string{"--name", "a", "--init-delay", "7s", "--description-bytes", "3000"}
	write(map[string]any{"a": slow})

	dev := startShell(t, sh, "", readmeDevLine)
	dev.waitFor(t, 3*time.Minute, "Press Ctrl-C to stop.")
	// dev said what a was doing, one line per change, before it printed the endpoint.
	before, _, _ := strings.Cut(dev.out.String(), "endpoint:")
	starting := strings.Index(before, "a: starting\n")
	ready := regexp.MustCompile(`a: ready, [1-9][0-9]* tools\n`).FindStringIndex(before)
	if starting < 0 || ready == nil || ready[0] < starting || strings.Count(before, "a: starting\n") != 1 {
		t.Fatalf("dev must say \"a: starting\" once, then \"a: ready, N tools\", before the endpoint:\n%s", before)
	}
	if want := `a: tool "verbose": a description of 3000 bytes, over the 2048 (2 KB) Claude Code keeps`; !strings.Contains(before, want) {
		t.Fatalf("dev must warn of the description Claude Code cuts, before the endpoint (%q):\n%s", want, before)
	}
	var kubeconfig, endpoint string
	for _, line := range strings.Split(dev.out.String(), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "kubeconfig: "); ok {
			kubeconfig = v
		}
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "endpoint:"); ok {
			endpoint = strings.TrimSpace(v)
		}
	}
	if !filepath.IsAbs(kubeconfig) || endpoint != "http://127.0.0.1:8484/projects/default/shop/mcp" {
		t.Fatalf("kubeconfig %q, endpoint %q", kubeconfig, endpoint)
	}

	// The second terminal, the moment the endpoint is printed: connect writes the entry dev
	// printed into the project's .mcp.json.
	sh.env = append(sh.env, "KUBECONFIG="+kubeconfig)
	code, out := sh.run(t, "src/shop", readmeConnectLine)
	if code != exitOK || !strings.Contains(out, `.mcp.json: created "a" (`+v1alpha1.ServerEndpoint(endpoint, "a")+`)`) {
		t.Fatalf("%s: exit %d:\n%s", readmeConnectLine, code, out)
	}
	// dev's controller is the same process: spec.project names the folder, its servers' root.
	c, err := (&globalFlags{kubeconfig: kubeconfig}).client()
	if err != nil {
		t.Fatal(err)
	}
	obj := &v1alpha1.ProjectMCP{}
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: "default", Name: "shop"}, obj); err != nil || obj.Spec.Project != dir {
		t.Fatalf("spec.project %q (%v), want %q", obj.Spec.Project, err, dir)
	}
	printed := printedEntry(t, dev.out.String())
	if written := readFile(t, filepath.Join(dir, ".mcp.json")); strings.TrimSpace(written) != printed {
		t.Fatalf("dev printed\n%s\nconnect wrote\n%s", printed, written)
	}

	// An agent connects, calls a tool, and sees a tool added by editing the file.
	changed := make(chan struct{}, 16)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Connect once, the moment the endpoint is printed: no 404, and the first tools/list
	// already has the server's tools (dev prints the endpoint only when it would be served).
	session, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	}).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatalf("connecting the moment the endpoint was printed: %v", err)
	}
	names := func() []string {
		res, err := session.ListTools(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, tl := range res.Tools {
			out = append(out, tl.Name)
		}
		return out
	}
	if first := names(); !slices.Contains(first, "a__echo") {
		t.Fatalf("the first tools/list must have a__echo: %v", first)
	}
	res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "a__echo", Arguments: map[string]any{"text": "dev"}})
	if err != nil || res.IsError || res.Content[0].(*mcp.TextContent).Text != "dev" {
		t.Fatalf("call: %+v %v", res, err)
	}
	if kubectl, err := exec.LookPath("kubectl"); err == nil {
		out, err := exec.Command(kubectl, "--kubeconfig", kubeconfig, "get", "projectmcp", "shop", "--no-headers").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "1/1") {
			t.Fatalf("kubectl get projectmcp: %v\n%s", err, out)
		}
	}
	// b's instructions are over the 2 KB Claude Code keeps: dev says so as b comes up, though
	// the first run is over.
	b := server("b")
	b["args"] = []string{"--name", "b", "--instructions-bytes", "3000"}
	write(map[string]any{"a": server("a"), "b": b})
	for !slices.Contains(names(), "b__echo") {
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatalf("the edit did not reach the session: %v", names())
		}
	}
	dev.waitFor(t, 30*time.Second, "b: instructions of 3000 bytes, over the 2048 (2 KB) Claude Code keeps")
	_ = session.Close()

	// Ctrl-C in the terminal ends everything dev started (apiserver, etcd, the MCP servers),
	// and dev exits 0.
	kids := descendants(dev.cmd.Process.Pid)
	if len(kids) < 4 { // kube-apiserver, etcd, two fixture servers
		t.Fatalf("want at least 4 processes under dev, got %v", kids)
	}
	if code := dev.stop(t, syscall.SIGINT, 60*time.Second); code != exitOK {
		t.Fatalf("dev exited %d after Ctrl-C, want 0", code)
	}
	for _, pid := range kids {
		if proctest.Alive(pid) {
			t.Errorf("process %d survived dev", pid)
		}
	}
	if _, err := os.Stat(kubeconfig); !os.IsNotExist(err) {
		t.Errorf("the temporary data directory must be removed: %v", err)
	}
}

// printedEntry is the JSON dev printed after "Connect an agent".
func printedEntry(t *testing.T, out string) string {
	t.Helper()
	_, rest, ok := strings.Cut(out, "the project's .mcp.json")
	if !ok {
		t.Fatalf("dev printed no entry:\n%s", out)
	}
	_, rest, _ = strings.Cut(rest, "\n")
	entry, _, _ := strings.Cut(rest, "\n\n")
	return strings.TrimSpace(entry)
}

// descendants lists every live process below pid.
func descendants(pid int) []int {
	var out []int
	for _, c := range proctest.Children(pid) {
		out = append(append(out, c), descendants(c)...)
	}
	return out
}

// `make dev` and Ctrl-C: projectmcp exits 0, so make reports no error (it ran `go run` before,
// which exits 1 whenever it sees SIGINT: "make: *** [Makefile:22: dev] Error 1"). make itself
// then ends by the same SIGINT, as an interrupted make does, which shells report silently.
func TestMakeDev(t *testing.T) {
	testenv.Require(t)
	requireFreePorts(t, "127.0.0.1:8484")
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatal("make is needed")
	}
	assets, err := controlplane.Ensure(context.Background(), controlplane.Options{Progress: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	project := filepath.Join(t.TempDir(), "shop")
	writeFile(t, filepath.Join(project, ".dsh", "mcp.json"), fixtureConfig("a"))
	var env []string
	for _, kv := range os.Environ() {
		// This test may itself run under make: the inner make is a user's, not a sub-make.
		if k, _, _ := strings.Cut(kv, "="); k != "MAKEFLAGS" && k != "MFLAGS" && k != "MAKELEVEL" && k != mainEnvVar {
			env = append(env, kv)
		}
	}
	env = append(env, "KUBEBUILDER_ASSETS="+assets)
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	mk := startMainEnv(t, root, env, "make", "dev", "PROJECT="+project)
	mk.waitFor(t, 5*time.Minute, "Press Ctrl-C to stop.")
	code := mk.stop(t, syscall.SIGINT, 60*time.Second)
	ws, _ := mk.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if code != exitOK && !(ws.Signaled() && ws.Signal() == syscall.SIGINT) {
		t.Fatalf("make dev ended with %v after Ctrl-C, want exit 0 or make's own SIGINT", mk.cmd.ProcessState)
	}
	if out := mk.out.String(); strings.Contains(out, "make: ***") || strings.Contains(out, "exit status") || !strings.Contains(out, "Stopped:") {
		t.Fatalf("make dev reported an error after Ctrl-C, or dev did not stop cleanly:\n%s", out)
	}
}
