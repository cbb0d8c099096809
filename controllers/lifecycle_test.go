package controllers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/proctest"
	"github.com/dsh-dev/projectmcp/internal/share"
	"github.com/dsh-dev/projectmcp/internal/testenv/harness"
	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// callEcho calls a server's echo tool through a mounted session's slot.
func callEcho(ctx context.Context, key types.NamespacedName, session, server, text string) (string, error) {
	c := harness.Ctl.Registry.Lookup(key, session, server)
	if c == nil {
		return "", conn.ErrUnavailable
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res, err := c.Call(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": text}}, nil)
	if err != nil {
		return "", err
	}
	if len(res.Content) == 0 {
		return "", nil
	}
	return res.Content[0].(*mcp.TextContent).Text, nil
}

func mount(t testing.TB, key types.NamespacedName, id string) {
	t.Helper()
	if _, err := harness.Ctl.Registry.Mount(context.Background(), key, share.Who{Session: id}, "test/1.0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { harness.Ctl.Registry.Release(key, id) })
}

// create: a new ProjectMCP reaches Ready with every server's tools listed under projected
// names, and kubectl shows them.
func TestCreateReachesReady(t *testing.T) {
	ns := harness.NewNamespace(t)
	start := time.Now()
	key := harness.Create(t, ns, "three", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{
		harness.FixtureServer(t, "alpha"), harness.FixtureServer(t, "beta"), harness.FixtureServer(t, "gamma", "--extra-tools", "30", "--page-size", "7"),
	}})
	obj := harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	t.Logf("3 servers Ready in %s", time.Since(start))
	if obj.Status.ReadyServers != "3/3" {
		t.Fatalf("readyServers = %q", obj.Status.ReadyServers)
	}
	alpha, _ := harness.ServerStatusOf(obj, "alpha")
	gamma, _ := harness.ServerStatusOf(obj, "gamma")
	if !slices.Contains(alpha.Tools, "alpha__echo") || alpha.Connection == "" || alpha.ConfigHash == "" {
		t.Fatalf("alpha status lacks its tools or connection: %+v", alpha)
	}
	if gamma.ToolCount != alpha.ToolCount+30 || len(gamma.Tools) != int(gamma.ToolCount) {
		t.Fatalf("gamma must list all pages: %d tools vs alpha %d", gamma.ToolCount, alpha.ToolCount)
	}
	if obj.Status.ToolCount != 3*alpha.ToolCount+30 {
		t.Fatalf("toolCount = %d", obj.Status.ToolCount)
	}
	if !slices.Contains(obj.Finalizers, v1alpha1.Finalizer) {
		t.Fatal("the finalizer is missing")
	}
	// One Created event names the three servers and their connections (one API write, not
	// three).
	assertEvent(t, ns, v1alpha1.EventCreated)
	evs := &eventsv1.EventList{}
	if err := harness.Env.Client.List(context.Background(), evs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var created []string
	for _, e := range evs.Items {
		if e.Reason == v1alpha1.EventCreated {
			created = append(created, e.Note)
		}
	}
	if len(created) != 1 || !strings.Contains(created[0], `server "alpha" as connection `+alpha.Connection) ||
		!strings.Contains(created[0], `server "gamma" as connection `+gamma.Connection) {
		t.Fatalf("want one Created event naming every server, got %q", created)
	}
	if kubectl, err := exec.LookPath("kubectl"); err == nil {
		out, err := exec.Command(kubectl, "--kubeconfig", harness.Env.Kubeconfig, "get", "projectmcp", "-n", ns, "three", "--no-headers").CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl: %v\n%s", err, out)
		}
		f := strings.Fields(string(out))
		if len(f) < 5 || f[1] != "True" || f[2] != "3/3" || f[3] != jsonNumber(obj.Status.ToolCount) {
			t.Fatalf("kubectl get shows %q", out)
		}
	}
}

func jsonNumber(n int32) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// repoint: editing a server's config while a session is mounted moves the session's slot to a
// new connection, keeps the tool names, and ends the old process.
func TestRepointKeepsNamesAndSlots(t *testing.T) {
	ns := harness.NewNamespace(t)
	srv := harness.FixtureServer(t, "alpha")
	key := harness.Create(t, ns, "repoint", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{srv}})
	before := harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	old, _ := harness.ServerStatusOf(before, "alpha")
	oldPID := harness.ReadPIDs(t, srv).PID
	mount(t, key, "s1")

	start := time.Now()
	harness.Update(t, key, func(o *v1alpha1.ProjectMCP) {
		o.Spec.Servers[0].Stdio.Args = append(o.Spec.Servers[0].Stdio.Args, "--init-delay", "10ms")
	})
	after := harness.WaitStatus(t, key, 30*time.Second, "a new connection", func(o *v1alpha1.ProjectMCP) bool {
		s, _ := harness.ServerStatusOf(o, "alpha")
		return harness.IsReady(o) && s.Connection != old.Connection && s.Connection != ""
	})
	t.Logf("repoint took %s", time.Since(start))
	now, _ := harness.ServerStatusOf(after, "alpha")
	if !slices.Equal(now.Tools, old.Tools) || now.ConfigHash == old.ConfigHash {
		t.Fatalf("tool names changed or hash did not: %v → %v", old, now)
	}
	if len(after.Status.Sessions) != 1 || after.Status.Sessions[0].Slots[0].Connection != now.Connection {
		t.Fatalf("the session slot must point at the new connection: %+v", after.Status.Sessions)
	}
	if now.Sessions != 1 {
		t.Fatalf("the slot's reference must move with it: sessions = %d", now.Sessions)
	}
	testutil.Eventually(t, 10*time.Second, "the old process to exit", func() bool { return !proctest.Alive(oldPID) })
	if got, err := callEcho(context.Background(), key, "s1", "alpha", "hi"); err != nil || got != "hi" {
		t.Fatalf("call after repoint = %q, %v", got, err)
	}
}

// retire: removing a server drops its slots and ends the process and its grandchild.
func TestRetireEndsProcessGroup(t *testing.T) {
	ns := harness.NewNamespace(t)
	keep, gone := harness.FixtureServer(t, "keep"), harness.FixtureServer(t, "gone", "--grandchild")
	key := harness.Create(t, ns, "retire", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{keep, gone}})
	harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	pids := harness.ReadPIDs(t, gone)
	if !proctest.Alive(pids.PID) || !proctest.Alive(pids.Grandchild) {
		t.Fatalf("fixture and grandchild must be running: %+v", pids)
	}
	mount(t, key, "s1")
	harness.Update(t, key, func(o *v1alpha1.ProjectMCP) {
		o.Spec.Servers = slices.DeleteFunc(o.Spec.Servers, func(s v1alpha1.MCPServer) bool { return s.Name == "gone" })
	})
	harness.WaitStatus(t, key, 30*time.Second, "the server to leave status", func(o *v1alpha1.ProjectMCP) bool {
		_, ok := harness.ServerStatusOf(o, "gone")
		return !ok && o.Status.ObservedGeneration == o.Generation
	})
	testutil.Eventually(t, 10*time.Second, "the process and its grandchild to exit", func() bool {
		return !proctest.Alive(pids.PID) && !proctest.Alive(pids.Grandchild)
	})
	if harness.Ctl.Registry.Lookup(key, "s1", "gone") != nil {
		t.Fatal("the session's slot for the retired server must be dropped")
	}
}

// idle: releasing the last session does not tear the connection down; the idle timer does;
// idleTimeout 0 never does.
func TestIdleReclaim(t *testing.T) {
	ns := harness.NewNamespace(t)
	shortSrv := harness.FixtureServer(t, "a")
	short := harness.Create(t, ns, "short", v1alpha1.ProjectMCPSpec{
		IdleTimeout: &metav1.Duration{Duration: 1500 * time.Millisecond},
		Servers:     []v1alpha1.MCPServer{shortSrv},
	})
	never := harness.Create(t, ns, "never", v1alpha1.ProjectMCPSpec{
		IdleTimeout: &metav1.Duration{},
		Servers:     []v1alpha1.MCPServer{harness.FixtureServer(t, "a")},
	})
	harness.WaitStatus(t, short, 30*time.Second, "Ready", harness.IsReady)
	harness.WaitStatus(t, never, 30*time.Second, "Ready", harness.IsReady)

	// A mounted session keeps the connection past the idle timeout.
	if _, err := harness.Ctl.Registry.Mount(context.Background(), short, share.Who{Session: "s1"}, "test"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond)
	if o := harness.Get(t, short); !harness.PhaseIs("a", v1alpha1.PhaseReady)(o) {
		t.Fatalf("a connection in use was reclaimed: %+v", o.Status.Servers)
	}
	// Releasing it starts the timer; the connection stays until the timer fires: status has
	// recorded the release (no session) while the server is still Ready and its process alive.
	pid := harness.ReadPIDs(t, shortSrv).PID
	harness.Ctl.Registry.Release(short, "s1")
	released := harness.WaitStatus(t, short, 10*time.Second, "the release in status", func(o *v1alpha1.ProjectMCP) bool {
		s, _ := harness.ServerStatusOf(o, "a")
		return o.Status.SessionCount == 0 && s.Sessions == 0
	})
	if !harness.PhaseIs("a", v1alpha1.PhaseReady)(released) || !proctest.Alive(pid) {
		t.Fatalf("release must not tear the connection down: %+v", released.Status.Servers)
	}
	harness.WaitStatus(t, short, 10*time.Second, "the idle reclaim", harness.PhaseIs("a", v1alpha1.PhaseIdle))
	if o := harness.Get(t, never); !harness.PhaseIs("a", v1alpha1.PhaseReady)(o) {
		t.Fatalf("idleTimeout 0 must never reclaim: %+v", o.Status.Servers)
	}
	// The next mount brings the server back.
	mount(t, short, "s2")
	harness.WaitStatus(t, short, 30*time.Second, "the server back after a mount", harness.PhaseIs("a", v1alpha1.PhaseReady))
	if got, err := callEcho(context.Background(), short, "s2", "a", "back"); err != nil || got != "back" {
		t.Fatalf("call after re-create = %q, %v", got, err)
	}
}

// dead: a killed server is Disconnected with its tools still listed, reconnects; with the
// budget spent it is Failed with tools withdrawn; a reconnect request rebuilds it and a call
// succeeds.
func TestKillReconnectFailRebuild(t *testing.T) {
	ns := harness.NewNamespace(t)
	broken := filepath.Join(t.TempDir(), "broken") // while it exists the fixture fails at start
	srv := harness.FixtureServer(t, "a", "--fail-if-exists", broken)
	key := harness.Create(t, ns, "dead", v1alpha1.ProjectMCPSpec{
		Reconnect: &v1alpha1.ReconnectPolicy{
			MaxAttempts:    ptr.To[int32](2),
			InitialBackoff: &metav1.Duration{Duration: time.Second},
			MaxBackoff:     &metav1.Duration{Duration: time.Second},
		},
		Servers: []v1alpha1.MCPServer{srv},
	})
	ready := harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	tools := ready.Status.ToolCount
	mount(t, key, "s1")

	// A killed server is Disconnected with its tools listed, then reconnects.
	_ = syscall.Kill(harness.ReadPIDs(t, srv).PID, syscall.SIGKILL)
	obj := harness.WaitStatus(t, key, 10*time.Second, "Disconnected", harness.PhaseIs("a", v1alpha1.PhaseDisconnected))
	if obj.Status.ToolCount != tools {
		t.Fatalf("tools must stay listed while disconnected: %d → %d", tools, obj.Status.ToolCount)
	}
	if _, err := callEcho(context.Background(), key, "s1", "a", "x"); err == nil || !strings.Contains(err.Error(), `"a"`) {
		t.Fatalf("a call while disconnected must fail at once naming the server, got %v", err)
	}
	harness.WaitStatus(t, key, 20*time.Second, "the reconnect", harness.PhaseIs("a", v1alpha1.PhaseReady))

	// A server that cannot come back spends the budget: Failed, tools withdrawn.
	if err := os.WriteFile(broken, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_ = syscall.Kill(harness.ReadPIDs(t, srv).PID, syscall.SIGKILL)
	harness.WaitStatus(t, key, 30*time.Second, "Failed", harness.PhaseIs("a", v1alpha1.PhaseFailed))
	failed := harness.WaitStatus(t, key, 10*time.Second, "tools withdrawn", func(o *v1alpha1.ProjectMCP) bool { return o.Status.ToolCount == 0 })
	if s, _ := harness.ServerStatusOf(failed, "a"); s.LastError == "" || s.ReconnectAttempts != 2 {
		t.Fatalf("a Failed server must say why and count its attempts: %+v", s)
	}
	failedConn, _ := harness.ServerStatusOf(failed, "a")

	if err := os.Remove(broken); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	harness.Update(t, key, func(o *v1alpha1.ProjectMCP) {
		if o.Annotations == nil {
			o.Annotations = map[string]string{}
		}
		o.Annotations[v1alpha1.AnnotationReconnectRequestedAt] = time.Now().Format(time.RFC3339Nano)
	})
	rebuilt := harness.WaitStatus(t, key, 30*time.Second, "the rebuild", func(o *v1alpha1.ProjectMCP) bool {
		s, _ := harness.ServerStatusOf(o, "a")
		return s.Phase == v1alpha1.PhaseReady && s.Connection != failedConn.Connection
	})
	t.Logf("rebuild took %s", time.Since(start))
	if rebuilt.Status.LastHandledReconnectAt != rebuilt.Annotations[v1alpha1.AnnotationReconnectRequestedAt] {
		t.Fatal("status must record the handled reconnect request")
	}
	if got, err := callEcho(context.Background(), key, "s1", "a", "alive"); err != nil || got != "alive" {
		t.Fatalf("call after rebuild = %q, %v", got, err)
	}
	assertEvent(t, ns, v1alpha1.EventConnectFailed)
	assertEvent(t, ns, v1alpha1.EventRebuilt)
}

// A server that is up offering nothing (no tool, prompt or resource) for more than 5 s counts
// as dead and is rebuilt at the next mount.
func TestZeroToolsRebuiltAtMount(t *testing.T) {
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "empty", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "a", "--no-tools", "--offer", "tools")}}) // declares tools, lists nothing
	obj := harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	first, _ := harness.ServerStatusOf(obj, "a")
	time.Sleep(conn.DeadAfter + 500*time.Millisecond)
	mount(t, key, "s1")
	harness.WaitStatus(t, key, 30*time.Second, "a rebuild", func(o *v1alpha1.ProjectMCP) bool {
		s, _ := harness.ServerStatusOf(o, "a")
		return s.Connection != "" && s.Connection != first.Connection
	})
}

// A server that never answers initialize blocks neither other servers nor a mount beyond
// readyTimeout, and ends Failed with a clear lastError.
func TestHangingServerDoesNotBlock(t *testing.T) {
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "hang", v1alpha1.ProjectMCPSpec{
		ReadyTimeout: &metav1.Duration{Duration: time.Second},
		Reconnect:    &v1alpha1.ReconnectPolicy{MaxAttempts: ptr.To[int32](0)},
		Servers:      []v1alpha1.MCPServer{harness.FixtureServer(t, "good"), harness.FixtureServer(t, "stuck", "--hang-init")},
	})
	harness.WaitStatus(t, key, 30*time.Second, "good Ready", harness.PhaseIs("good", v1alpha1.PhaseReady))
	start := time.Now()
	if _, err := harness.Ctl.Registry.Mount(context.Background(), key, share.Who{Session: "s1"}, "test"); err != nil {
		t.Fatal(err)
	}
	defer harness.Ctl.Registry.Release(key, "s1")
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("mount took %s with readyTimeout 1s", d)
	}
	obj := harness.WaitStatus(t, key, 30*time.Second, "stuck Failed", harness.PhaseIs("stuck", v1alpha1.PhaseFailed))
	s, _ := harness.ServerStatusOf(obj, "stuck")
	if !strings.Contains(s.LastError, "connect timed out") {
		t.Fatalf("lastError must say what happened: %q", s.LastError)
	}
	if got, err := callEcho(context.Background(), key, "s1", "good", "ok"); err != nil || got != "ok" {
		t.Fatalf("the good server must work: %q, %v", got, err)
	}
}

// Deleting the ProjectMCP ends every process it started.
func TestDeleteStopsEverything(t *testing.T) {
	ns := harness.NewNamespace(t)
	a, b := harness.FixtureServer(t, "a", "--grandchild"), harness.FixtureServer(t, "b")
	key := harness.Create(t, ns, "del", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{a, b}})
	harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	pa, pb := harness.ReadPIDs(t, a), harness.ReadPIDs(t, b)
	harness.DeleteAndWait(t, key)
	testutil.Eventually(t, 10*time.Second, "every process to exit", func() bool {
		return !proctest.Alive(pa.PID) && !proctest.Alive(pa.Grandchild) && !proctest.Alive(pb.PID)
	})
}

// Restarting the controller loses nothing: connections are rebuilt from the objects.
func TestRestartRebuildsFromObjects(t *testing.T) {
	ns := harness.NewNamespace(t)
	srv := harness.FixtureServer(t, "a")
	key := harness.Create(t, ns, "restart", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{srv}})
	before := harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	old, _ := harness.ServerStatusOf(before, "a")
	oldPID := harness.ReadPIDs(t, srv).PID
	ag := harness.ConnectAgent(t, key, "2025-11-25", nil)
	oldSession := ag.Session.ID()

	harness.Ctl.Stop()
	harness.Ctl = nil
	if proctest.Alive(oldPID) {
		t.Fatal("stopping the controller must end its server processes")
	}
	// The new process has not reconciled the project yet (held back) when the old session's
	// client gets 404 and re-initializes at once: the new session waits for the reconcile and
	// its first tools/list has the tools.
	release := harness.Hold(t, key)
	var err error
	if harness.Ctl, err = harness.StartController(); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, before.Status.Endpoint, strings.NewReader(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", oldSession)
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("an old session id got %d, want 404", resp.StatusCode)
	}
	reinit := harness.DialAsync(t, before.Status.Endpoint, "2025-11-25", nil)
	time.Sleep(300 * time.Millisecond)
	harness.StillWaiting(t, "a re-initialize", reinit)
	release()
	fresh := harness.AwaitDial(t, reinit)
	if names := harness.FirstTools(t, fresh); !slices.Contains(names, "a__echo") {
		t.Fatalf("the re-initialized session's first tools/list must have the tools: %v", names)
	}
	res, err := fresh.CallTool(context.Background(), &mcp.CallToolParams{Name: "a__echo", Arguments: map[string]any{"text": "again"}})
	if err != nil || harness.Text(res) != "again" {
		t.Fatalf("a re-initialized session must work: %v %+v", err, res)
	}
	after := harness.WaitStatus(t, key, 30*time.Second, "a new connection after restart", func(o *v1alpha1.ProjectMCP) bool {
		s, _ := harness.ServerStatusOf(o, "a")
		return s.Phase == v1alpha1.PhaseReady && s.Connection != old.Connection
	})
	if after.Status.Endpoint != before.Status.Endpoint {
		t.Fatalf("the endpoint changed across the restart: %s → %s", before.Status.Endpoint, after.Status.Endpoint)
	}
}

// Secrets: ${TOKEN} from the Secret reaches the server's environment, and the value appears in
// no status, event or log line.
func TestSecretsNeverLeak(t *testing.T) {
	ns := harness.NewNamespace(t)
	const value = "s3cr3t-Value-9f2c"
	withToken := harness.FixtureServer(t, "a")
	withToken.Stdio.Env = append(withToken.Stdio.Env, v1alpha1.NameValue{Name: "API_TOKEN", Value: "${TOKEN}"})
	// A server whose URL carries the secret and then fails: the error must not show it.
	leaky := v1alpha1.MCPServer{Name: "leaky", HTTP: &v1alpha1.HTTPServer{URL: "http://127.0.0.1:1/mcp/${TOKEN}"}}
	missing := harness.FixtureServer(t, "missing")
	missing.Stdio.Env = append(missing.Stdio.Env, v1alpha1.NameValue{Name: "X", Value: "${NOT_IN_SECRET}"})
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "tokens", Namespace: ns, Annotations: map[string]string{
		v1alpha1.AnnotationAllowedProjects:     "secrets",
		v1alpha1.AnnotationAllowedDestinations: strings.Join([]string{commandLine(withToken), "http://127.0.0.1:1", commandLine(missing)}, "\n"),
	}}, StringData: map[string]string{"TOKEN": value}}
	if err := harness.Env.Client.Create(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	key := harness.Create(t, ns, "secrets", v1alpha1.ProjectMCPSpec{
		SecretRef: &corev1.LocalObjectReference{Name: "tokens"},
		Reconnect: &v1alpha1.ReconnectPolicy{MaxAttempts: ptr.To[int32](0)},
		Servers:   []v1alpha1.MCPServer{withToken, leaky, missing},
	})
	obj := harness.WaitStatus(t, key, 30*time.Second, "a Ready, leaky and missing Failed", func(o *v1alpha1.ProjectMCP) bool {
		return harness.PhaseIs("a", v1alpha1.PhaseReady)(o) && harness.PhaseIs("leaky", v1alpha1.PhaseFailed)(o) && harness.PhaseIs("missing", v1alpha1.PhaseFailed)(o)
	})
	m, _ := harness.ServerStatusOf(obj, "missing")
	if !strings.Contains(m.LastError, `"NOT_IN_SECRET"`) {
		t.Fatalf("a missing variable must be named: %q", m.LastError)
	}
	mount(t, key, "s1")
	c := harness.Ctl.Registry.Lookup(key, "s1", "a")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := c.Call(ctx, &mcp.CallToolParams{Name: "getenv", Arguments: map[string]any{"name": "API_TOKEN"}}, nil)
	if err != nil || res.Content[0].(*mcp.TextContent).Text != value {
		t.Fatalf("the secret must reach the server's environment: %v %v", res, err)
	}
	assertEvent(t, ns, v1alpha1.EventConnectFailed)

	statusJSON, _ := json.Marshal(harness.Get(t, key).Status)
	evs := &eventsv1.EventList{}
	if err := harness.Env.Client.List(context.Background(), evs, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	eventsJSON, _ := json.Marshal(evs)
	for what, text := range map[string]string{"status": string(statusJSON), "events": string(eventsJSON), "logs": harness.Logs.String()} {
		if strings.Contains(text, value) {
			t.Errorf("the secret value appears in %s", what)
		}
	}
	if !strings.Contains(string(statusJSON), "[redacted]") {
		t.Errorf("the failing command's error should show where the secret was redacted: %s", statusJSON)
	}
}

func assertEvent(t testing.TB, ns, reason string) {
	t.Helper()
	defer func() {
		if t.Failed() {
			evs := &eventsv1.EventList{}
			_ = harness.Env.Client.List(context.Background(), evs, client.InNamespace(ns))
			for _, e := range evs.Items {
				t.Logf("event %s %s: %s", e.Reason, e.Type, e.Note)
			}
		}
	}()
	testutil.Eventually(t, 10*time.Second, "event "+reason, func() bool {
		evs := &eventsv1.EventList{}
		if err := harness.Env.Client.List(context.Background(), evs, client.InNamespace(ns)); err != nil {
			return false
		}
		for _, e := range evs.Items {
			if e.Reason == reason {
				return true
			}
		}
		return false
	})
}

// A burst of 1,000 mounts becomes a handful of status writes, and status stays bounded.
func TestMountBurstCoalescesStatusWrites(t *testing.T) {
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "burst", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "a")}})
	harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)

	wc, err := client.NewWithWatch(harness.Env.Config, client.Options{Scheme: harness.Env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := wc.Watch(ctx, &v1alpha1.ProjectMCPList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	writes := 0
	counted := make(chan struct{})
	go func() {
		defer close(counted)
		for range w.ResultChan() {
			writes++
		}
	}()

	const n = 1000
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if _, err := harness.Ctl.Registry.Mount(context.Background(), key, share.Who{Session: fmt.Sprintf("s%04d", i)}, "burst"); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	obj := harness.WaitStatus(t, key, 10*time.Second, "1000 sessions", func(o *v1alpha1.ProjectMCP) bool { return o.Status.SessionCount == n })
	if len(obj.Status.Sessions) != v1alpha1.MaxStatusSessions {
		t.Fatalf("status must list the newest %d sessions, lists %d", v1alpha1.MaxStatusSessions, len(obj.Status.Sessions))
	}
	if s, _ := harness.ServerStatusOf(obj, "a"); s.Sessions != n {
		t.Fatalf("server a has %d sessions bound", s.Sessions)
	}
	for i := range n {
		harness.Ctl.Registry.Release(key, fmt.Sprintf("s%04d", i))
	}
	harness.WaitStatus(t, key, 10*time.Second, "0 sessions", func(o *v1alpha1.ProjectMCP) bool { return o.Status.SessionCount == 0 })
	time.Sleep(300 * time.Millisecond)
	w.Stop()
	<-counted
	t.Logf("%d mounts and %d releases made %d status writes", n, n, writes)
	if writes > 40 {
		t.Fatalf("status writes are not coalesced: %d writes for %d mounts and releases", writes, 2*n)
	}
}
