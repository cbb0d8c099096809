package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/internal/proctest"
	"github.com/dsh-dev/projectmcp/internal/testenv"
	"github.com/dsh-dev/projectmcp/internal/testutil"
	"github.com/dsh-dev/projectmcp/test/fixture"
)

// `projectmcp dev` end to end, as a user runs it in a project folder.
func TestDevEndToEnd(t *testing.T) {
	testenv.Require(t) // dev starts a kube-apiserver of its own
	dir := filepath.Join(t.TempDir(), "shop")
	if err := os.MkdirAll(filepath.Join(dir, ".dsh"), 0o755); err != nil {
		t.Fatal(err)
	}
	server := func(name string) map[string]any {
		return map[string]any{"command": os.Args[0], "args": []string{"--name", name}, "env": map[string]string{fixture.EnvVar: "1"}}
	}
	write := func(servers map[string]any) {
		data, _ := json.Marshal(map[string]any{"mcpServers": servers})
		if err := os.WriteFile(filepath.Join(dir, ".dsh", "mcp.json"), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(map[string]any{"a": server("a")})

	cmd := exec.Command(os.Args[0], "dev", "--gateway-bind-address", "127.0.0.1:0")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), mainEnvVar+"=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr testutil.SyncBuffer // exec copies into it while a failing test reads it
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	defer func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("dev stderr:\n%s", stderr.String())
		}
	}()

	// Read the printed kubeconfig and endpoint.
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	var kubeconfig, endpoint string
	deadline := time.After(3 * time.Minute)
	for endpoint == "" {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatal("dev exited before printing its endpoint")
			}
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "kubeconfig: "); ok {
				kubeconfig = v
			}
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "endpoint:"); ok {
				endpoint = strings.TrimSpace(v)
			}
		case <-deadline:
			t.Fatal("dev printed no endpoint")
		}
	}
	if !filepath.IsAbs(kubeconfig) || !strings.HasSuffix(endpoint, "/projects/default/shop/mcp") {
		t.Fatalf("kubeconfig %q, endpoint %q", kubeconfig, endpoint)
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
	write(map[string]any{"a": server("a"), "b": server("b")})
	for !slices.Contains(names(), "b__echo") {
		select {
		case <-changed:
		case <-ctx.Done():
			t.Fatalf("the edit did not reach the session: %v", names())
		}
	}
	_ = session.Close()

	// Ctrl-C ends everything it started: apiserver, etcd and the MCP servers.
	kids := proctest.Children(cmd.Process.Pid)
	if len(kids) < 4 { // kube-apiserver, etcd, two fixture servers
		t.Fatalf("want at least 4 child processes, got %v", kids)
	}
	_ = cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("dev exited with %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("dev did not stop on SIGINT")
	}
	for _, pid := range kids {
		if proctest.Alive(pid) {
			t.Errorf("child process %d survived dev", pid)
		}
	}
	if _, err := os.Stat(kubeconfig); !os.IsNotExist(err) {
		t.Errorf("the temporary data directory must be removed: %v", err)
	}
}
