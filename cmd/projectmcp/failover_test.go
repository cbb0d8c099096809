package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/proctest"
	"github.com/dsh-dev/projectmcp/internal/testutil"
	"github.com/dsh-dev/projectmcp/test/fixture"
)

// replica is one `projectmcp controller` process of the failover test.
type replica struct {
	name             string
	probe, gateway   string // addresses
	cmd              *exec.Cmd
	out              testutil.SyncBuffer
	exited           chan error
	waitedForExiting bool
}

// startReplica runs a controller process with the given lease namespace and timings, its
// gateway on a fixed loopback address and status.endpoint pointing at the shared URL (what a
// Service's address is in a cluster).
func startReplica(t testing.TB, name, kubeconfig, leaseNS, sharedURL string, lease ...string) *replica {
	t.Helper()
	r := &replica{name: name, probe: testutil.FreeAddr(t), gateway: testutil.FreeAddr(t), exited: make(chan error, 1)}
	args := append([]string{"controller", "--kubeconfig", kubeconfig, "--metrics-bind-address", "0",
		"--health-probe-bind-address", r.probe, "--gateway-bind-address", r.gateway, "--gateway-url", sharedURL,
		"--leader-election-namespace", leaseNS, "--connect-timeout", "10s",
		"--allow-url", "127.0.0.1/32"}, lease...) // the HTTP fixture listens on loopback
	r.cmd = exec.Command(os.Args[0], args...)
	r.cmd.Env = append(os.Environ(), mainEnvVar+"=1")
	r.cmd.Stdout, r.cmd.Stderr = &r.out, &r.out
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.exited <- r.cmd.Wait() }()
	t.Cleanup(func() {
		if !r.waitedForExiting {
			_ = r.cmd.Process.Kill()
			<-r.exited
		}
		if t.Failed() {
			t.Logf("replica %s output:\n%s", r.name, r.out.String())
		}
	})
	return r
}

// ready is the replica's /readyz status code (0 when it does not answer).
func (r *replica) ready() int {
	resp, err := http.Get("http://" + r.probe + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// service stands in for the gateway's Kubernetes Service: it forwards every request to a
// replica whose /readyz answered 200 at the last check (every 100 ms, as endpoints follow
// readiness probes), and answers 503 while none is ready.
type service struct {
	mu       sync.Mutex
	target   *replica
	replicas []*replica
	srv      *httptest.Server
}

func newService(t *testing.T) *service {
	s := &service{}
	proxy := &httputil.ReverseProxy{
		FlushInterval: -1, // SSE streams pass through as they are written
		Rewrite: func(pr *httputil.ProxyRequest) {
			s.mu.Lock()
			target := s.target
			s.mu.Unlock()
			pr.SetURL(&url.URL{Scheme: "http", Host: target.gateway})
			pr.Out.Host = pr.In.Host
		},
	}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		target := s.target
		s.mu.Unlock()
		if target == nil {
			http.Error(w, "no ready endpoint", http.StatusServiceUnavailable)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			s.mu.Lock()
			replicas := append([]*replica(nil), s.replicas...)
			s.mu.Unlock()
			var ready *replica
			for _, r := range replicas {
				if r.ready() == http.StatusOK {
					ready = r
					break
				}
			}
			s.mu.Lock()
			s.target = ready
			s.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		s.srv.CloseClientConnections()
		s.srv.Close()
	})
	return s
}

func (s *service) add(r *replica) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.replicas = append(s.replicas, r)
}

// Two controllers against one API server, as two replicas of the Deployment: the follower is
// not ready while the leader lives; when the leader is killed (SIGKILL: it cannot release the
// Lease) the follower takes the Lease once it expires — within the lease duration of the
// leader's last renewal, plus a retry period — becomes ready, rebuilds the connections (a
// stdio and an HTTP server) from the ProjectMCP and serves. A 2025-11-25 session of the old leader, reaching the new one through
// the same URL, gets 404 and re-initializes, and the new session's calls work; a stateless
// 2026-07-28 session just goes on.
func TestFailoverToSecondReplica(t *testing.T) {
	env := apiServer(t)
	ctx := context.Background()
	// A Lease of its own: other tests' controllers elect in "default".
	leaseNS := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "failover-"}}
	if err := env.Client.Create(ctx, leaseNS); err != nil {
		t.Fatal(err)
	}
	const (
		leaseDuration = 4 * time.Second
		retryPeriod   = 500 * time.Millisecond
	)
	// One bucket: one replica serves every project, as one leader did, and the other proxies
	// to it until it takes the bucket over.
	lease := []string{"--buckets", "1", "--leader-elect-lease-duration", leaseDuration.String(), "--leader-elect-renew-deadline", "3s",
		"--leader-elect-retry-period", retryPeriod.String()}

	svc := newService(t)
	pidFile := filepath.Join(t.TempDir(), "pids.json")
	upstream := fixture.StartHTTP(t) + "/mcp" // in this process: it outlives the killed leader
	obj := &v1alpha1.ProjectMCP{
		ObjectMeta: metav1.ObjectMeta{Name: "failover", Namespace: "default"},
		Spec: v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{
			{Name: "a", Stdio: &v1alpha1.StdioServer{
				Command: os.Args[0], Args: []string{"--pid-file", pidFile},
				Env: []v1alpha1.NameValue{{Name: fixture.EnvVar, Value: "1"}},
			}},
			{Name: "b", HTTP: &v1alpha1.HTTPServer{URL: upstream}},
		}},
	}
	env.DeleteOnCleanup(t, obj)
	if err := env.Client.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}

	leader := startReplica(t, "leader", env.Kubeconfig, leaseNS.Name, svc.srv.URL, lease...)
	svc.add(leader)
	testutil.EventuallyOK(t, 60*time.Second, "the first replica to lead", func() error {
		if code := leader.ready(); code != http.StatusOK {
			return fmt.Errorf("/readyz %d", code)
		}
		return nil
	})
	follower := startReplica(t, "follower", env.Kubeconfig, leaseNS.Name, svc.srv.URL, lease...)
	svc.add(follower)

	endpoint := svc.srv.URL + "/projects/default/failover/mcp"
	firstConns := map[string]string{} // server → the leader's connection
	testutil.EventuallyOK(t, 60*time.Second, "Ready behind the Service's URL", func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			t.Fatal(err)
		}
		if obj.Status.ReadyServers != "2/2" || obj.Status.Endpoint != endpoint || len(obj.Status.Servers) != 2 {
			return fmt.Errorf("status %+v", obj.Status)
		}
		if obj.Status.Owner == nil {
			return errors.New("status names no owner")
		}
		for _, s := range obj.Status.Servers {
			firstConns[s.Name] = s.Connection
		}
		return nil
	})
	firstOwner := *obj.Status.Owner
	// The follower serves the endpoint too, by proxying to the replica holding the bucket.
	testutil.EventuallyOK(t, 30*time.Second, "the follower ready, proxying", func() error {
		if code := follower.ready(); code != http.StatusOK {
			return fmt.Errorf("/readyz %d", code)
		}
		return nil
	})

	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	connect := func(version string) *mcp.ClientSession {
		t.Helper()
		s, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil).Connect(cctx,
			&mcp.StreamableClientTransport{Endpoint: endpoint, MaxRetries: -1}, &mcp.ClientSessionOptions{ProtocolVersion: version})
		if err != nil {
			t.Fatalf("connecting through the Service (%s): %v", version, err)
		}
		if got := s.InitializeResult().ProtocolVersion; got != version {
			t.Fatalf("negotiated %s, want %s", got, version)
		}
		return s
	}
	// echo calls both servers' echo tool.
	echo := func(s *mcp.ClientSession, text string) error {
		for _, tool := range []string{"a__echo", "b__echo"} {
			res, err := s.CallTool(cctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"text": text}})
			if err != nil {
				return fmt.Errorf("%s: %w", tool, err)
			}
			if len(res.Content) == 0 {
				return fmt.Errorf("%s: result without content: %+v", tool, res)
			}
			if got, _ := res.Content[0].(*mcp.TextContent); res.IsError || got == nil || got.Text != text {
				return fmt.Errorf("%s: result %+v: %+v", tool, res, res.Content[0])
			}
		}
		return nil
	}
	// A 2025-11-25 session lives in the leader's memory (Mcp-Session-Id); a 2026-07-28 one
	// is stateless, each request standing alone.
	old := connect("2025-11-25")
	defer old.Close()
	stateless := connect("2026-07-28")
	defer stateless.Close()
	if old.ID() == "" {
		t.Fatal("the 2025-11-25 session has no session id")
	}
	for _, s := range []*mcp.ClientSession{old, stateless} {
		if err := echo(s, "before"); err != nil {
			t.Fatalf("a call through the leader: %v", err)
		}
	}

	// The leader dies without releasing the Lease.
	killed := time.Now()
	if err := leader.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-leader.exited
	leader.waitedForExiting = true
	// Its server process outlives it only until it reads the end of its stdin.
	var pids fixture.PIDs
	if data, err := os.ReadFile(pidFile); err != nil || json.Unmarshal(data, &pids) != nil || pids.PID == 0 {
		t.Fatalf("the leader's server wrote no pid file: %v", err)
	}
	testutil.EventuallyOK(t, 10*time.Second, "the killed leader's server process to exit", func() error {
		if proctest.Alive(pids.PID) {
			return fmt.Errorf("process %d alive", pids.PID)
		}
		return nil
	})
	testutil.EventuallyOK(t, 30*time.Second, "the follower to take the bucket over", func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			t.Fatal(err)
		}
		if o := obj.Status.Owner; o == nil || o.Replica == firstOwner.Replica || o.Epoch <= firstOwner.Epoch {
			return fmt.Errorf("status.owner %+v (the leader's %+v)", o, firstOwner)
		}
		return nil
	})
	took := time.Since(killed)
	// The follower may only take an expired Lease: it last saw a renewal at most a retry period
	// or two before the kill, and tries again every retry period after expiry; then its first
	// reconcile writes status. A second of grace for a loaded machine.
	if took < leaseDuration-2*retryPeriod || took > leaseDuration+2*retryPeriod+time.Second {
		t.Errorf("the follower served the project %s after the kill; the lease is %s, retry period %s", took, leaseDuration, retryPeriod)
	}
	t.Logf("failover: the follower served the project %s after the leader was killed (lease %s)", took.Round(time.Millisecond), leaseDuration)
	if !strings.Contains(follower.out.String(), `"Took a bucket"`) {
		t.Errorf("the follower did not log taking the bucket")
	}

	// It rebuilds the connections from the object: new ones, Ready.
	testutil.EventuallyOK(t, 60*time.Second, "the new leader's own connections", func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
			t.Fatal(err)
		}
		if len(obj.Status.Servers) != 2 {
			return fmt.Errorf("servers %+v", obj.Status.Servers)
		}
		for _, s := range obj.Status.Servers {
			if s.Phase != v1alpha1.PhaseReady || s.Connection == firstConns[s.Name] {
				return fmt.Errorf("servers %+v (the leader's connections %v)", obj.Status.Servers, firstConns)
			}
		}
		return nil
	})

	// The old session's id means nothing to the new leader: 404, as the specification says,
	// telling the client to initialize again.
	req, _ := http.NewRequest(http.MethodPost, endpoint, strings.NewReader(`{"jsonrpc":"2.0","id":9,"method":"tools/list"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", old.ID())
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var body bytes.Buffer
	_, _ = body.ReadFrom(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("the old session's request got %d, want 404: %s", resp.StatusCode, body.String())
	}
	if err := echo(old, "after"); err == nil {
		t.Fatal("the old session's call succeeded on a replica that never knew it")
	}
	// Re-initialized, the client goes on.
	renewed := connect("2025-11-25")
	defer renewed.Close()
	if err := echo(renewed, "after failover"); err != nil {
		t.Fatalf("a call after re-initializing: %v", err)
	}
	// The stateless session held nothing on the old leader: its next call simply works.
	if err := echo(stateless, "stateless after failover"); err != nil {
		t.Fatalf("a stateless session's call after the failover: %v", err)
	}

	_ = follower.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-follower.exited:
		follower.waitedForExiting = true
		if err != nil {
			t.Errorf("the new leader exited with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Error("the new leader did not stop on SIGTERM")
	}
}

// Lease timings and bucket settings the replicas cannot work with are refused before
// anything starts, naming the flag.
func TestLeaseTimingsRefused(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--leader-elect-renew-deadline", "20s"}, "--leader-elect-renew-deadline (20s) must be less than --leader-elect-lease-duration (15s)"},
		{[]string{"--leader-elect-retry-period", "9s"}, "--leader-elect-retry-period (9s) must be less than --leader-elect-renew-deadline (10s) / 1.2"},
		{[]string{"--leader-elect-lease-duration", "0s"}, "must be positive"},
		{[]string{"--leader-elect-lease-duration", "11s"}, "--leader-elect-renew-deadline (10s) plus --leader-elect-retry-period (2s) must be less than --leader-elect-lease-duration (11s)"},
		{[]string{"--buckets", "0"}, "--buckets must be within 1..1024, not 0"},
		{[]string{"--handoff-timeout", "0s"}, "--handoff-timeout must be positive"},
	} {
		cmd := exec.Command(os.Args[0], append([]string{"controller", "--kubeconfig", "/nonexistent"}, tc.args...)...)
		cmd.Env = append(os.Environ(), mainEnvVar+"=1")
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), tc.want) {
			t.Errorf("%q: %v, output lacks %q:\n%s", tc.args, err, tc.want, out)
		}
	}
}
