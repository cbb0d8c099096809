//go:build faults

// Package faults is the fault-injection suite (`make faults`). It runs the real thing: a
// kube-apiserver and etcd (envtest), `projectmcp controller` built from this checkout and run as
// its own process, its API traffic passing through a TCP proxy the suite can cut, fixture MCP
// servers (stdio and HTTP), hostile ones written here, and live sessions with bearer tokens.
//
// A bystander project with a stdio and an HTTP server is called by a stateful and a stateless
// session all along. Each fault hits a project of its own and asserts what its user sees; then
// the suite checks the bystander lost no call, removes the victim, and waits for the
// controller's goroutines, descriptors, processes and heap to come back to where they were. It
// prints the table docs/faults.md carries: fault | what the user sees | what is guaranteed |
// figures of this run.
package faults

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/gateway/access"
	"github.com/dsh-dev/projectmcp/internal/testenv"
	"github.com/dsh-dev/projectmcp/internal/testutil"
	"github.com/dsh-dev/projectmcp/test/fixture"
)

const ns = "faults"

// suite is everything the faults share.
type suite struct {
	top        *testing.T // the suite's own test: what lives as long as the suite is cleaned up by it
	env        *testenv.Env
	dir        string
	bin        string // projectmcp, built from this checkout
	fixture    string // mcp-fixture, built from this checkout
	proxy      *proxy
	kubeconfig string // through the proxy
	ctl        *controller
	addrs      controllerAddrs
	token      string // a ServiceAccount allowed to use every ProjectMCP of ns
	remote     string // URL of an HTTP fixture process
	load       *load
	rows       []row
	undo       []func()
}

// row is one line of the printed table.
type row struct {
	fault, sees, guaranteed string
	figures                 []string
	bystanderMayFail        bool // the fault stops the controller itself
}

func (r *row) figure(format string, args ...any) {
	r.figures = append(r.figures, fmt.Sprintf(format, args...))
}

// setup starts the API server, builds the binaries, starts the controller and the bystander.
func setup(t *testing.T) *suite {
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Stop)
	s := &suite{top: t, env: env, dir: t.TempDir()}
	s.build(t)
	host, err := url.Parse(env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	s.proxy = startProxy(t, host.Host)
	s.kubeconfig = s.proxiedKubeconfig(t)
	ctx := context.Background()
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	s.token = s.agentToken(t)
	s.remote = s.startHTTPFixture(t)
	s.addrs = controllerAddrs{gateway: testutil.FreeAddr(t), metrics: testutil.FreeAddr(t), probe: testutil.FreeAddr(t), pprof: testutil.FreeAddr(t)}
	s.ctl = s.startController(t)
	calm := s.project(t, "calm", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{
		s.stdio("local"), {Name: "remote", HTTP: &v1alpha1.HTTPServer{URL: s.remote}},
	}}, true)
	s.undo = nil // the bystander stays for the whole suite
	s.load = startLoad(t, s, calm)
	return s
}

// build compiles projectmcp and the fixture server into the suite's directory: the controller
// under test is the binary a user runs.
func (s *suite) build(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	s.bin, s.fixture = filepath.Join(s.dir, "projectmcp"), filepath.Join(s.dir, "mcp-fixture")
	for out, pkg := range map[string]string{s.bin: "./cmd/projectmcp", s.fixture: "./test/fixture/cmd/mcp-fixture"} {
		cmd := exec.Command("go", "build", "-o", out, pkg)
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, b)
		}
	}
}

// proxiedKubeconfig is the envtest kubeconfig with the server replaced by the proxy's address
// (the serving certificate names 127.0.0.1, which the proxy also listens on).
func (s *suite) proxiedKubeconfig(t *testing.T) string {
	cfg, err := clientcmd.Load(s.env.Env.KubeConfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfg.Clusters {
		c.Server = "https://" + s.proxy.addr()
	}
	path := filepath.Join(s.dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// agentToken creates a ServiceAccount that may use every ProjectMCP of ns and returns a token
// for it, as `kubectl create token` does.
func (s *suite) agentToken(t *testing.T) string {
	ctx := context.Background()
	objs := []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: ns}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: ns}, Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"projectmcps"}, Verbs: []string{access.UseVerb}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: ns},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "agent"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "agent", Namespace: ns}}},
	}
	for _, o := range objs {
		if err := s.env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	cs, err := kubernetes.NewForConfig(s.env.Config)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "agent", &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// startHTTPFixture runs a fixture process serving streamable HTTP and returns its MCP URL.
func (s *suite) startHTTPFixture(t *testing.T, args ...string) string {
	cmd := exec.Command(s.fixture, append([]string{"--http", "127.0.0.1:0", "--name", "remote"}, args...)...)
	return fixture.StartHTTPProcess(t, cmd) + "/mcp"
}

// stdio is a server running the fixture binary over stdio.
func (s *suite) stdio(name string, args ...string) v1alpha1.MCPServer {
	return v1alpha1.MCPServer{Name: name, Stdio: &v1alpha1.StdioServer{Command: s.fixture, Args: append([]string{"--name", name}, args...)}}
}

// project creates a ProjectMCP and, when ready is set, waits until every server is Ready. The
// object is deleted (and its deletion awaited) by the fault's wrapper before the leak checks.
func (s *suite) project(t *testing.T, name string, spec v1alpha1.ProjectMCPSpec, ready bool) types.NamespacedName {
	t.Helper()
	key := types.NamespacedName{Namespace: ns, Name: name}
	obj := &v1alpha1.ProjectMCP{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: spec}
	if err := s.env.Client.Create(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
	s.undo = append(s.undo, func() { s.remove(t, key) })
	if ready {
		s.waitStatus(t, key, 60*time.Second, "every server Ready", func(o *v1alpha1.ProjectMCP) bool {
			return o.Status.ObservedGeneration == o.Generation && o.Status.ReadyServers == fmt.Sprintf("%d/%d", len(spec.Servers), len(spec.Servers))
		})
	}
	return key
}

// remove deletes a ProjectMCP and waits until the controller let it go (finalizer removed).
func (s *suite) remove(t *testing.T, key types.NamespacedName) {
	ctx := context.Background()
	obj := &v1alpha1.ProjectMCP{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace}}
	if err := client.IgnoreNotFound(s.env.Client.Delete(ctx, obj)); err != nil {
		t.Errorf("deleting %s: %v", key, err)
		return
	}
	testutil.Eventually(t, 60*time.Second, key.String()+" deleted", func() bool {
		return s.env.Client.Get(ctx, key, &v1alpha1.ProjectMCP{}) != nil
	})
}

// get reads a ProjectMCP straight from the API server (not through the proxy).
func (s *suite) get(t *testing.T, key types.NamespacedName) *v1alpha1.ProjectMCP {
	t.Helper()
	obj := &v1alpha1.ProjectMCP{}
	if err := s.env.Client.Get(context.Background(), key, obj); err != nil {
		t.Fatal(err)
	}
	return obj
}

func (s *suite) waitStatus(t *testing.T, key types.NamespacedName, timeout time.Duration, what string, cond func(*v1alpha1.ProjectMCP) bool) *v1alpha1.ProjectMCP {
	t.Helper()
	var last *v1alpha1.ProjectMCP
	deadline := time.Now().Add(timeout)
	for {
		obj := &v1alpha1.ProjectMCP{}
		if err := s.env.Client.Get(context.Background(), key, obj); err == nil {
			last = obj
			if cond(obj) {
				return obj
			}
		}
		if time.Now().After(deadline) {
			var st v1alpha1.ProjectMCPStatus
			if last != nil {
				st = last.Status
			}
			t.Fatalf("%s: timed out after %s waiting for %s; status %+v", key, timeout, what, st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func serverStatus(obj *v1alpha1.ProjectMCP, name string) v1alpha1.ServerStatus {
	for _, s := range obj.Status.Servers {
		if s.Name == name {
			return s
		}
	}
	return v1alpha1.ServerStatus{}
}

// events are the messages of the events recorded about an object, oldest first.
func (s *suite) events(t *testing.T, key types.NamespacedName) []string {
	t.Helper()
	list := &corev1.EventList{}
	if err := s.env.Client.List(context.Background(), list, client.InNamespace(key.Namespace)); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		if e.InvolvedObject.Name == key.Name && e.InvolvedObject.Kind == "ProjectMCP" {
			out = append(out, e.Reason+": "+e.Message)
		}
	}
	return out
}

// endpoint is a project's MCP URL on the gateway.
func (s *suite) endpoint(key types.NamespacedName) string {
	return fmt.Sprintf("http://%s/projects/%s/%s/mcp", s.addrs.gateway, key.Namespace, key.Name)
}

// bearer sets the suite's token on every request.
type bearer struct {
	token string
	base  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

// connect opens a session on a project: version "2025-11-25" is a stateful session, "" the
// SDK's default (2026-07-28, stateless).
func (s *suite) connect(ctx context.Context, key types.NamespacedName, version string, opts *mcp.ClientOptions) (*mcp.ClientSession, error) {
	return s.connectAs(ctx, key, version, "fault-agent", opts)
}

func (s *suite) connectAs(ctx context.Context, key types.NamespacedName, version, name string, opts *mcp.ClientOptions) (*mcp.ClientSession, error) {
	hc := &http.Client{Transport: bearer{s.token, http.DefaultTransport}}
	c := mcp.NewClient(&mcp.Implementation{Name: name, Version: "1"}, opts)
	return c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: s.endpoint(key), HTTPClient: hc},
		&mcp.ClientSessionOptions{ProtocolVersion: version})
}

func (s *suite) mustConnect(t *testing.T, key types.NamespacedName, version string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := s.connect(ctx, key, version, opts)
	if err != nil {
		t.Fatalf("connect to %s: %v", key, err)
	}
	s.undo = append(s.undo, func() { _ = cs.Close() })
	return cs
}

// call calls a tool with a deadline and returns its text or the error.
func call(cs *mcp.ClientSession, timeout time.Duration, tool string, args map[string]any) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if args == nil {
		args = map[string]any{}
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	if res.IsError {
		return "", fmt.Errorf("tool error: %s", b.String())
	}
	return b.String(), nil
}

// fault runs one fault as a subtest and records its row: the victim's objects and sessions are
// removed afterwards, then the bystander's calls and the controller's resources are checked.
func (s *suite) fault(t *testing.T, r row, f func(t *testing.T, r *row)) {
	if only := os.Getenv("FAULTS"); only != "" && !strings.Contains(strings.ToLower(r.fault), strings.ToLower(only)) {
		return
	}
	t.Run(r.fault, func(t *testing.T) {
		before := s.ctl.usage(t, true)
		s.load.window()
		started := time.Now()
		f(t, &r)
		for i := len(s.undo) - 1; i >= 0; i-- {
			s.undo[i]()
		}
		s.undo = nil
		w := s.load.window()
		switch {
		case w.ok == 0:
			t.Errorf("the bystander completed no call during the fault")
		case w.failed > 0 && !r.bystanderMayFail:
			t.Errorf("the bystander's calls failed %d times during the fault, first: %s", w.failed, w.firstErr)
		}
		after := s.settle(t, before)
		r.figure("bystander: %d calls, %d failed, p50 %s p99 %s", w.ok+w.failed, w.failed, ms(w.p(50)), ms(w.p(99)))
		r.figure("after: goroutines %+d, fds %+d, processes %+d, heap %+.1f MiB (RSS %+.1f MiB)",
			after.goroutines-before.goroutines, after.fds-before.fds, after.procs-before.procs,
			mib(after.heap-before.heap), mib(after.rss-before.rss))
		r.figure("took %s", time.Since(started).Round(100*time.Millisecond))
		if t.Failed() {
			t.Logf("controller output (tail):\n%s", tail(s.ctl.out.String(), 400))
		}
		s.rows = append(s.rows, r)
	})
}

// settle waits until the controller holds no more than before: goroutines and descriptors (with
// a small slack for connections the HTTP client keeps alive), child processes, no zombie, and
// the heap after a forced GC.
func (s *suite) settle(t *testing.T, before usage) usage {
	t.Helper()
	var u usage
	deadline := time.Now().Add(45 * time.Second)
	for {
		u = s.ctl.usage(t, true)
		problem := ""
		switch {
		case u.goroutines > before.goroutines+10:
			problem = fmt.Sprintf("goroutines %d, were %d", u.goroutines, before.goroutines)
		case u.fds > before.fds+6:
			problem = fmt.Sprintf("descriptors %d, were %d", u.fds, before.fds)
		case u.procs > before.procs:
			problem = fmt.Sprintf("child processes %d, were %d: %v", u.procs, before.procs, u.commands)
		case u.zombies > 0:
			problem = fmt.Sprintf("%d zombie children", u.zombies)
		case u.heap > before.heap+32<<20:
			problem = fmt.Sprintf("heap %.1f MiB, was %.1f MiB", mib(u.heap), mib(before.heap))
		}
		if problem == "" {
			return u
		}
		if time.Now().After(deadline) {
			t.Errorf("the controller did not come back to its baseline: %s", problem)
			return u
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// --- the controller process ---------------------------------------------------------------

type controllerAddrs struct{ gateway, metrics, probe, pprof string }

type controller struct {
	cmd    *exec.Cmd
	out    testutil.SyncBuffer
	exited chan struct{}
	addrs  controllerAddrs
}

// startController runs `projectmcp controller` with kubernetes gateway auth, its API traffic
// through the proxy, and short timeouts so that faults resolve in seconds (reviews too: the
// bystander's token is reviewed again every 2 s).
func (s *suite) startController(t *testing.T) *controller {
	t.Helper()
	return s.startControllerAs(t, controllerRun{})
}

// controllerRun is how a controller is run besides the suite's flags: under a wrapper command
// (such as setpriv, which execs it in place), with more environment and more flags.
type controllerRun struct{ wrap, env, args []string }

func (s *suite) startControllerAs(t *testing.T, run controllerRun) *controller {
	t.Helper()
	c := &controller{exited: make(chan struct{}), addrs: s.addrs}
	argv := slices.Concat(run.wrap, []string{s.bin, "controller", "--kubeconfig", s.kubeconfig, "--leader-elect=false",
		"--metrics-bind-address", c.addrs.metrics, "--health-probe-bind-address", c.addrs.probe,
		"--pprof-bind-address", c.addrs.pprof, "--gateway-bind-address", c.addrs.gateway,
		"--gateway-auth", "kubernetes", "--gateway-review-ttl", "2s", "--allow-url", "127.0.0.1/32",
		"--connect-timeout", "5s", "--call-timeout", "5s", "--health-interval", "2s", "-v"}, run.args)
	c.cmd = exec.Command(argv[0], argv[1:]...)
	c.cmd.Env = append(os.Environ(), run.env...)
	c.cmd.Stdout, c.cmd.Stderr = &c.out, &c.out
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.cmd.Wait(); close(c.exited) }()
	s.top.Cleanup(func() {
		c.stop(s.top)
		if s.top.Failed() {
			s.top.Logf("controller output (tail):\n%s", tail(c.out.String(), 80))
		}
	})
	testutil.Eventually(t, 60*time.Second, "the controller ready", func() bool {
		resp, err := http.Get("http://" + c.addrs.probe + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return c
}

// stop ends the controller with SIGTERM (SIGKILL after 30 s).
func (c *controller) stop(t *testing.T) {
	select {
	case <-c.exited:
		return
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(30 * time.Second):
		t.Errorf("the controller did not exit within 30 s of SIGTERM")
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
}

// usage is what the controller process holds at one moment.
type usage struct {
	goroutines, fds, procs, zombies int
	rss, heap                       int64
	commands                        []string
}

// usage reads the controller's goroutines and heap (from /metrics, after a GC forced through
// pprof when gc is set), RSS and descriptors (from /proc) and its descendant processes.
func (c *controller) usage(t *testing.T, gc bool) usage {
	t.Helper()
	if gc {
		if resp, err := http.Get("http://" + c.addrs.pprof + "/debug/pprof/heap?gc=1"); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}
	var u usage
	m := scrape(t, c.addrs.metrics)
	u.goroutines, u.heap = int(m["go_goroutines"]), int64(m["go_memstats_heap_inuse_bytes"])
	pid := c.cmd.Process.Pid
	u.rss = rss(pid)
	if fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
		u.fds = len(fds)
	}
	for _, p := range descendants(pid) {
		u.procs++
		if p.state == "Z" {
			u.zombies++
		}
		u.commands = append(u.commands, fmt.Sprintf("%d:%s(%s)", p.pid, p.comm, p.state))
	}
	return u
}

// scrape reads the unlabelled samples of a Prometheus text page.
func scrape(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("scraping /metrics: %v", err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(value), 64); err == nil {
			out[name] = v
		}
	}
	return out
}

// rss is a process's resident set in bytes.
func rss(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// peakRSS samples a process's RSS every 10 ms until stop is called, and returns the largest.
func peakRSS(pid int) (stop func() int64) {
	done, result := make(chan struct{}), make(chan int64, 1)
	go func() {
		peak := rss(pid)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				result <- peak
				return
			case <-tick.C:
				peak = max(peak, rss(pid))
			}
		}
	}()
	return func() int64 { close(done); return <-result }
}

type proc struct {
	pid, ppid   int
	state, comm string
}

// descendants are the processes below pid, from /proc.
func descendants(pid int) []proc {
	entries, _ := os.ReadDir("/proc")
	children := map[int][]proc{}
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", n))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after the last ')'.
		s := string(b)
		open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || end < 0 {
			continue
		}
		f := strings.Fields(s[end+1:])
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		children[ppid] = append(children[ppid], proc{pid: n, ppid: ppid, state: f[0], comm: s[open+1 : end]})
	}
	var out []proc
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c.pid)
		}
	}
	return out
}

// --- the API proxy ------------------------------------------------------------------------

// proxy forwards TCP connections to the API server until cut: then it closes every open
// connection and refuses new ones until restored, as a network partition would.
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	down   bool
	conns  map[net.Conn]struct{}
}

func startProxy(t *testing.T, target string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.cut() })
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		if p.down {
			p.mu.Unlock()
			c.Close()
			up.Close()
			continue
		}
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		go p.pipe(c, up)
		go p.pipe(up, c)
	}
}

func (p *proxy) pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

func (p *proxy) restore() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

// --- the bystander ------------------------------------------------------------------------

// load keeps a stateful and a stateless session of the bystander project calling its stdio and
// HTTP servers' echo, every 25 ms, and counts what came back. A session whose calls fail is
// opened again (after a controller restart, a stateful session's id is unknown: 404).
type load struct {
	s    *suite
	key  types.NamespacedName
	mu   sync.Mutex
	w    window
	stop chan struct{}
	done sync.WaitGroup
}

type window struct {
	ok, failed int
	firstErr   string
	lat        []time.Duration
}

func (w window) p(q int) time.Duration {
	if len(w.lat) == 0 {
		return 0
	}
	s := slices.Clone(w.lat)
	slices.Sort(s)
	return s[(len(s)*q-1)/100]
}

func startLoad(t *testing.T, s *suite, key types.NamespacedName) *load {
	l := &load{s: s, key: key, stop: make(chan struct{})}
	for _, version := range []string{"2025-11-25", ""} {
		cs := s.mustConnectKeep(t, key, version)
		l.done.Add(1)
		go l.run(cs, version)
	}
	t.Cleanup(func() { close(l.stop); l.done.Wait() })
	return l
}

// mustConnectKeep is mustConnect for sessions that live as long as the suite.
func (s *suite) mustConnectKeep(t *testing.T, key types.NamespacedName, version string) *mcp.ClientSession {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := s.connectAs(ctx, key, version, "bystander", nil)
	if err != nil {
		t.Fatalf("bystander connect: %v", err)
	}
	return cs
}

func (l *load) run(cs *mcp.ClientSession, version string) {
	defer l.done.Done()
	defer func() { _ = cs.Close() }()
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	tools := []string{"local__echo", "remote__echo"}
	for i := 0; ; i++ {
		select {
		case <-l.stop:
			return
		case <-tick.C:
		}
		start := time.Now()
		got, err := call(cs, 10*time.Second, tools[i%2], map[string]any{"text": "calm"})
		if err == nil && got != "calm" {
			err = fmt.Errorf("echo returned %q", got)
		}
		l.mu.Lock()
		if err != nil {
			l.w.failed++
			if l.w.firstErr == "" {
				l.w.firstErr = fmt.Sprintf("%s %s (session %q): %v", time.Now().Format("15:04:05.000"), tools[i%2], version, err)
			}
		} else {
			l.w.ok++
			l.w.lat = append(l.w.lat, time.Since(start))
		}
		l.mu.Unlock()
		if err != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if fresh, cerr := l.s.connectAs(ctx, l.key, version, "bystander", nil); cerr == nil {
				go cs.Close() // closing a session the gateway forgot can wait on its stream
				cs = fresh
			}
			cancel()
		}
	}
}

// window returns the counts since the previous call and starts a new window.
func (l *load) window() window {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.w
	l.w = window{}
	return w
}

// --- small helpers ------------------------------------------------------------------------

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func tail(s string, lines int) string {
	l := strings.Split(s, "\n")
	return strings.Join(l[max(0, len(l)-lines):], "\n")
}

// printTable writes the rows as the Markdown table of docs/faults.md.
func printTable(w io.Writer, rows []row) {
	var b bytes.Buffer
	fmt.Fprintln(&b, "| fault | what the user sees | what is guaranteed | figures (this run) |")
	fmt.Fprintln(&b, "|---|---|---|---|")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", r.fault, r.sees, r.guaranteed, strings.Join(r.figures, "; "))
	}
	_, _ = w.Write(b.Bytes())
}
