package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/gateway"
	"github.com/dsh-dev/projectmcp/internal/proctest"
	"github.com/dsh-dev/projectmcp/internal/testutil"
	"github.com/dsh-dev/projectmcp/internal/toolname"
	"github.com/dsh-dev/projectmcp/test/fixture"
)

// `projectmcp controller` against a real API server: a ProjectMCP reaches Ready, and SIGTERM
// ends the controller and every server process it started.
func TestControllerCommand(t *testing.T) {
	env := apiServer(t)

	var out testutil.SyncBuffer // written by exec's copying goroutine while the test reads it
	metricsAddr, probeAddr := testutil.FreeAddr(t), testutil.FreeAddr(t)
	cmd := exec.Command(os.Args[0], "controller", "--kubeconfig", env.Kubeconfig, "--metrics-bind-address", metricsAddr,
		"--metrics-project-labels", "--health-probe-bind-address", probeAddr,
		// No leader election flags: outside a cluster it elects in the kubeconfig's namespace.
		"--connect-timeout", "5s", "--max-tool-name", "30",
		"--gateway-bind-address", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), mainEnvVar+"=1")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			t.Logf("controller output:\n%s", out.String())
		}
	}()

	pidFile := filepath.Join(t.TempDir(), "pids.json")
	broken := filepath.Join(t.TempDir(), "broken") // while it exists the server cannot start
	obj := &v1alpha1.ProjectMCP{
		ObjectMeta: metav1.ObjectMeta{Name: "cmd", Namespace: "default"},
		Spec: v1alpha1.ProjectMCPSpec{
			Reconnect: &v1alpha1.ReconnectPolicy{MaxAttempts: ptr.To[int32](0)},
			Servers: []v1alpha1.MCPServer{{Name: "a", Stdio: &v1alpha1.StdioServer{
				Command: os.Args[0], Args: []string{"--grandchild", "--pid-file", pidFile, "--fail-if-exists", broken},
				Env: []v1alpha1.NameValue{{Name: fixture.EnvVar, Value: "1"}},
			}}},
		},
	}
	ctx := context.Background()
	env.DeleteOnCleanup(t, obj)
	if err := env.Client.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	// The bucket Leases come first, and the first lines say where.
	testutil.EventuallyOK(t, 30*time.Second, "the log line of sharing by buckets", func() error {
		if strings.Contains(out.String(), `"Sharing projects by bucket Leases"`) && strings.Contains(out.String(), `"namespace":"default"`) {
			return nil
		}
		return errors.New("not yet")
	})
	testutil.EventuallyOK(t, 60*time.Second, "Ready with tools", func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			t.Fatal(err)
		}
		if obj.Status.ReadyServers == "1/1" && obj.Status.ToolCount > 0 {
			return nil
		}
		return fmt.Errorf("status %+v", obj.Status)
	})
	// An agent reaches the server's tools through the endpoint the controller wrote to status.
	if !strings.HasPrefix(obj.Status.Endpoint, "http://127.0.0.1:") || strings.HasSuffix(obj.Status.Endpoint, ":0/projects/default/cmd/mcp") {
		t.Fatalf("endpoint %q", obj.Status.Endpoint)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	session, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(cctx,
		&mcp.StreamableClientTransport{Endpoint: obj.Status.Endpoint}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := session.CallTool(cctx, &mcp.CallToolParams{Name: "a__echo", Arguments: map[string]any{"text": "via the gateway"}})
	if err != nil || res.IsError || res.Content[0].(*mcp.TextContent).Text != "via the gateway" {
		t.Fatalf("call through the gateway: %+v %v", res, err)
	}
	_ = session.Close()

	// /metrics says what the controller holds and how the forwarded call went, labelled with
	// the project (--metrics-project-labels).
	scrape := func() testutil.Metrics {
		resp, err := http.Get("http://" + metricsAddr + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		m, err := testutil.ParseMetrics(string(body))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	m := scrape()
	project := []string{"project_namespace", "default", "project", "cmd"}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"projectmcp_projects", nil, 1},
		{"projectmcp_connections", append([]string{"server", "a", "phase", "Ready"}, project...), 1},
		{"projectmcp_connect_duration_seconds_count", append([]string{"server", "a", "outcome", "ok"}, project...), 1},
		{"projectmcp_connection_transitions_total", append([]string{"server", "a", "from", "Connecting", "to", "Ready"}, project...), 1},
		{"projectmcp_tool_calls_total", append([]string{"server", "a", "outcome", "ok"}, project...), 1},
		{"projectmcp_tool_call_duration_seconds_count", append([]string{"server", "a"}, project...), 1},
		{"projectmcp_forwarded_requests_total", append([]string{"server", "a", "method", "tools/call", "result", "ok"}, project...), 1},
		{"projectmcp_mount_wait_seconds_count", project, 1},
		{"projectmcp_tool_calls_path_total", []string{"path", "raw"}, 1},
	} {
		if !m.Has(c.name, c.labels...) || m.Sum(c.name, c.labels...) != c.want {
			t.Errorf("/metrics: %s%v = %v, want %v", c.name, c.labels, m.Sum(c.name, c.labels...), c.want)
		}
	}
	for _, c := range [][]string{
		append([]string{"projectmcp_status_writes_total", "result", "ok"}, project...),
		{"projectmcp_gateway_requests_total", "code", "200", "auth", "local"},
	} {
		if m.Sum(c[0], c[1:]...) < 1 {
			t.Errorf("/metrics: %s%v = %v, want at least 1", c[0], c[1:], m.Sum(c[0], c[1:]...))
		}
	}
	if !m.Has("projectmcp_sessions", append([]string{"revision", "2025-11-25"}, project...)...) {
		t.Error("/metrics: no projectmcp_sessions for the project")
	}
	checkToolNameBudget(t, env.Client, obj, 30)

	// `projectmcp reconnect` rebuilds a Failed server and status records the handled request.
	var pids fixture.PIDs
	data, _ := os.ReadFile(pidFile)
	_ = json.Unmarshal(data, &pids)
	if err := os.WriteFile(broken, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_ = syscall.Kill(pids.PID, syscall.SIGKILL)
	testutil.EventuallyOK(t, 30*time.Second, "the server Failed", func() error {
		_ = env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj)
		if len(obj.Status.Servers) == 1 && obj.Status.Servers[0].Phase == v1alpha1.PhaseFailed {
			return nil
		}
		return fmt.Errorf("servers %+v", obj.Status.Servers)
	})
	_ = os.Remove(broken)
	var rout, rerr bytes.Buffer
	if code := run([]string{"reconnect", "cmd", "--server", "a", "--namespace", "default", "--kubeconfig", env.Kubeconfig, "--wait", "30s"}, &rout, &rerr); code != 0 {
		t.Fatalf("reconnect exited %d: %s", code, rerr.String())
	}
	if !strings.Contains(rout.String(), "handled: a Ready") {
		t.Fatalf("reconnect output: %s", rout.String())
	}
	// The kill failed the server (no reconnect budget); the reconnect rebuilt it (once, or
	// twice when a reconcile read the object before the cache saw the handled request), and
	// every connect was observed.
	m = scrape()
	if got := m.Sum("projectmcp_connection_transitions_total", append([]string{"server", "a", "from", "Ready", "to", "Failed"}, project...)...); got != 1 {
		t.Errorf("/metrics: Ready → Failed transitions of a: %v", got)
	}
	rebuilds := m.Sum("projectmcp_rebuilds_total", append([]string{"server", "a", "reason", "ReconnectRequested"}, project...)...)
	if connects := m.Sum("projectmcp_connect_duration_seconds_count", append([]string{"server", "a", "outcome", "ok"}, project...)...); rebuilds < 1 || connects != 1+rebuilds {
		t.Errorf("/metrics: %v rebuilds of a by ReconnectRequested, %v connects", rebuilds, connects)
	}
	var sout, serr bytes.Buffer
	if code := run([]string{"status", "cmd", "--kubeconfig", env.Kubeconfig}, &sout, &serr); code != 0 {
		t.Fatalf("status exited %d: %s", code, serr.String())
	}
	for _, want := range []string{"projectmcp default/cmd", "served by: ", "(bucket ", "Ready: True", "SERVER", "a ", "Ready"} {
		if !strings.Contains(sout.String(), want) {
			t.Fatalf("status output lacks %q:\n%s", want, sout.String())
		}
	}
	_ = env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj)
	if obj.Status.LastHandledReconnectAt == "" || obj.Status.LastHandledReconnectAt != obj.Annotations[v1alpha1.AnnotationReconnectRequestedAt] {
		t.Fatalf("status must record the handled request: %q vs %q", obj.Status.LastHandledReconnectAt, obj.Annotations)
	}

	// A second replica takes its share of the buckets and serves every endpoint, proxying what
	// the first serves: both are ready, and a session through the second works.
	readyz := func(addr string) int {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	testutil.EventuallyOK(t, 30*time.Second, "the first replica ready", func() error {
		if code := readyz(probeAddr); code != http.StatusOK {
			return fmt.Errorf("/readyz %d", code)
		}
		return nil
	})
	secondProbe, secondGateway := testutil.FreeAddr(t), testutil.FreeAddr(t)
	second := exec.Command(os.Args[0], "controller", "--kubeconfig", env.Kubeconfig, "--metrics-bind-address", "0",
		"--health-probe-bind-address", secondProbe, "--gateway-bind-address", secondGateway)
	second.Env = append(os.Environ(), mainEnvVar+"=1")
	if err := second.Start(); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyOK(t, 30*time.Second, "the second replica ready", func() error {
		if code := readyz(secondProbe); code != http.StatusOK {
			return fmt.Errorf("/readyz %d", code)
		}
		return nil
	})
	sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
	defer scancel()
	viaSecond, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(sctx,
		&mcp.StreamableClientTransport{Endpoint: "http://" + secondGateway + "/projects/default/cmd/mcp"}, nil)
	if err != nil {
		t.Fatalf("a session through the second replica: %v", err)
	}
	if res, err := viaSecond.CallTool(sctx, &mcp.CallToolParams{Name: "a__echo", Arguments: map[string]any{"text": "via the second"}}); err != nil || res.IsError {
		t.Fatalf("a call through the second replica: %+v %v", res, err)
	}
	_ = viaSecond.Close()
	_ = second.Process.Signal(syscall.SIGTERM)
	_ = second.Wait()

	data, _ = os.ReadFile(pidFile)
	if err := json.Unmarshal(data, &pids); err != nil || pids.Grandchild == 0 {
		t.Fatalf("pid file %q: %v", data, err)
	}

	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("the controller exited with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the controller did not stop on SIGTERM")
	}
	for _, pid := range []int{pids.PID, pids.Grandchild} {
		if proctest.Alive(pid) {
			t.Errorf("process %d outlived the controller", pid)
		}
	}
	if !strings.Contains(out.String(), `"Took a bucket"`) || !strings.Contains(out.String(), `"Released a bucket"`) {
		t.Errorf("the controller should have taken its buckets, and released them on SIGTERM:\n%s", out.String())
	}
}

// checkToolNameBudget adds a tool whose projected name would be over budget (as the
// controller's --max-tool-name): the project endpoint and status list it shortened, a call
// under that name reaches the tool, and the server's own endpoint keeps the raw name.
func checkToolNameBudget(t *testing.T, c client.Client, obj *v1alpha1.ProjectMCP, budget int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	session := connectTo(t, ctx, obj.Status.Endpoint)
	defer session.Close()
	raw := "add_pull_request_review_comment_to_pending_review"
	want := toolname.Project("a", raw, budget)
	if len(want) > budget || want == "a__"+raw {
		t.Fatalf("%q is not a shortened name within %d", want, budget)
	}
	if res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "a__add_tool", Arguments: map[string]any{"name": raw}}); err != nil || res.IsError {
		t.Fatalf("add_tool: %+v %v", res, err)
	}
	testutil.EventuallyOK(t, 20*time.Second, "the shortened name listed and in status", func() error {
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		if len(obj.Status.Servers) == 0 || !slices.Contains(obj.Status.Servers[0].Tools, want) {
			return fmt.Errorf("status lists %v", obj.Status.Servers)
		}
		return listsTool(ctx, session, want)
	})
	res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: want})
	if err != nil || res.IsError || res.Content[0].(*mcp.TextContent).Text != "I am "+raw {
		t.Fatalf("call of %s: %+v %v", want, res, err)
	}
	own := connectTo(t, ctx, obj.Status.Servers[0].Endpoint)
	defer own.Close()
	if err := listsTool(ctx, own, raw); err != nil {
		t.Fatalf("the server's own endpoint: %v", err)
	}
}

// connectTo is a session of an endpoint.
func connectTo(t *testing.T, ctx context.Context, endpoint string) *mcp.ClientSession {
	t.Helper()
	s, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: endpoint}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// listsTool is nil when the session lists a tool of that name.
func listsTool(ctx context.Context, s *mcp.ClientSession, name string) error {
	var names []string
	for tool, err := range s.Tools(ctx, nil) {
		if err != nil {
			return err
		}
		if tool.Name == name {
			return nil
		}
		names = append(names, tool.Name)
	}
	return fmt.Errorf("%s not among %v", name, names)
}

// The bounds on what a server may send reach the connections' options from their flags; a
// negative one is refused naming the flag.
func TestBoundFlagsReachConnections(t *testing.T) {
	f := defaultControllerFlags()
	fs := pflag.NewFlagSet("controller", pflag.ContinueOnError)
	f.bind(fs)
	if err := fs.Parse([]string{"--max-message-bytes", "1048576", "--max-list-items", "7", "--max-list-pages", "3",
		"--max-list-bytes", "4096", "--max-schema-bytes", "512"}); err != nil {
		t.Fatal(err)
	}
	d, err := f.connDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if d.MaxMessageBytes != 1<<20 || d.MaxListItems != 7 || d.MaxListPages != 3 || d.MaxListBytes != 4096 || d.MaxSchemaBytes != 512 {
		t.Fatalf("the bounds did not reach the connections: %+v", d)
	}
	f.conn.MaxListPages = -1
	if _, err := f.connDefaults(); err == nil || !strings.Contains(err.Error(), "--max-list-pages") {
		t.Fatalf("a negative bound: %v", err)
	}
}

// The per-identity session bound is a tenth of the project's unless set: an operator lowering
// --max-sessions-per-project alone never lets one identity fill a project.
func TestPrincipalBound(t *testing.T) {
	for _, tc := range []struct {
		perUser, perProject, want int
	}{
		{0, 1000, 100},
		{0, 50, 5},
		{0, 5, 1},
		{0, 0, gateway.DefaultMaxSessionsPerPrincipal},
		{7, 1000, 7},
		{300, 0, 300},
	} {
		if got := principalBound(tc.perUser, tc.perProject); got != tc.want {
			t.Errorf("principalBound(%d, %d) = %d, want %d", tc.perUser, tc.perProject, got, tc.want)
		}
	}
}
