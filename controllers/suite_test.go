package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"go.uber.org/goleak"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/gateway"
	"github.com/dsh-dev/projectmcp/internal/metrics"
	"github.com/dsh-dev/projectmcp/internal/proctest"
	"github.com/dsh-dev/projectmcp/internal/registry"
	"github.com/dsh-dev/projectmcp/internal/testenv"
	"github.com/dsh-dev/projectmcp/internal/testutil"
	"github.com/dsh-dev/projectmcp/test/fixture"
)

// The suite runs the real reconciler and registry against a real kube-apiserver, with real
// fixture MCP server processes: the test binary re-executes itself as the fixture.

var (
	env    *testenv.Env
	ctl    *testController
	logs   = &testutil.SyncBuffer{} // the controller's log, searched for secrets
	pidDir string
	// gatewayAddr is where the test controller's gateway listens.
	gatewayAddr = "127.0.0.1:0"
	testCfg     = ConnDefaults{Settings: conn.Settings{ConnectTimeout: 5 * time.Second, HealthInterval: time.Second, RelistInterval: 5 * time.Second,
		Isolation: conn.Isolation{PassEnv: testutil.ShareNpmCache()},
		// Bounds small enough for TestServerBoundsReachStatus, large enough for the rest.
		MaxMessageBytes: 1 << 20, MaxListPages: 50, MaxSchemaBytes: 64 << 10}}
)

// callTimeout bounds forwarded requests in this suite (TestGatewayCallTimeout).
const callTimeout = 4 * time.Second

// testController is one running manager with its registry; tests restart it to show that
// connections are rebuilt from the objects.
type testController struct {
	registry *registry.Registry
	gateway  *gateway.Gateway
	cancel   context.CancelFunc
	done     chan error
}

func TestMain(m *testing.M) {
	if os.Getenv(fixture.EnvVar) != "" {
		fixture.Main()
		return
	}
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	ignore := goleak.IgnoreCurrent()
	var err error
	if pidDir, err = os.MkdirTemp("", "projectmcp-pids-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(pidDir)
	ctrl.SetLogger(zap.New(zap.WriteTo(io.MultiWriter(os.Stderr, logs)), zap.UseDevMode(true), zap.Level(zapcore.Level(-2))))
	code := m.Run()
	if ctl != nil {
		ctl.stop()
	}
	if env != nil {
		env.Stop()
	}
	// The tests' own HTTP clients keep idle keep-alive connections (and their goroutines) in
	// the shared transport: those are the tests', not the controller's.
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	if code == 0 {
		if leaked := leakedProcesses(); len(leaked) > 0 {
			fmt.Fprintf(os.Stderr, "FAIL: fixture processes still running after the suite: %v\n", leaked)
			code = 1
		}
		if err := goleak.Find(ignore, goleak.IgnoreAnyFunction("k8s.io/klog/v2.(*flushDaemon).run.func1"),
			goleak.IgnoreAnyFunction("sigs.k8s.io/controller-runtime/pkg/log.(*loggerPromise).Fulfill"),
			goleak.IgnoreTopFunction("internal/poll.runtime_pollWait")); err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: goroutines leaked after the suite:\n%v\n", err)
			code = 1
		}
	}
	return code
}

// The API server and the test controller start with the first test that needs them (every
// such test calls newNamespace first), so the pure tests of this package run without one
// (make unit).
var (
	suiteOnce sync.Once
	suiteErr  error
)

// needAPI starts the suite's API server and controller on first use.
func needAPI(t testing.TB) {
	t.Helper()
	testenv.Require(t)
	suiteOnce.Do(func() {
		if env, suiteErr = testenv.Start(); suiteErr != nil {
			return
		}
		ctl, suiteErr = startController()
	})
	if suiteErr != nil {
		t.Fatalf("starting the API server and the controller: %v", suiteErr)
	}
}

func startController() (*testController, error) {
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 env.Scheme,
		Controller:             ctrlconfig.Controller{SkipNameValidation: ptr.To(true)}, // restarted in one process
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		return nil, err
	}
	reg := registry.New(clock.RealClock{}, ctrl.Log.WithName("registry"))
	gw := gateway.New(gateway.Options{
		Registry: reg, Log: ctrl.Log.WithName("gateway"), StatelessIdle: 2 * time.Second, CallTimeout: callTimeout,
		Objects: mgr.GetClient(), Live: mgr.GetAPIReader(),
	})
	ln, err := net.Listen("tcp", gatewayAddr)
	if err != nil {
		return nil, err
	}
	gatewayAddr = ln.Addr().String() // a restarted controller keeps the address, as a real one would
	metrics.SetSource(reg.Counts)    // as the controller command wires them
	metrics.SetSessions(gw.SessionCounts)
	gw.SetBaseURL("http://" + gatewayAddr)
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error { return gw.Serve(ctx, ln) })); err != nil {
		return nil, err
	}
	r := &Reconciler{
		Client:    faultyClient{mgr.GetClient()}, // status writes fail when a test asks (failStatusWrites)
		APIReader: mgr.GetAPIReader(),
		Registry:  reg,
		Recorder:  mgr.GetEventRecorder("projectmcp"),
		Clock:     clock.RealClock{},
		Conn:      testCfg,
		Endpoint:  gw.Endpoint,
	}
	if err := r.setupWithManager(mgr, heldReconciler{r}); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &testController{registry: reg, gateway: gw, cancel: cancel, done: make(chan error, 1)}
	go func() { c.done <- mgr.Start(ctx) }()
	return c, nil
}

func (c *testController) stop() {
	c.cancel()
	if err := <-c.done; err != nil {
		fmt.Fprintf(os.Stderr, "manager: %v\n", err)
	}
}

// holds are the projects whose reconciles tests hold back (hold), across controller restarts.
var holds sync.Map // types.NamespacedName → chan struct{} (closed on release)

// hold stops the test controller from reconciling a project until the returned function is
// called (or the test ends), so tests can act before a project's first reconcile.
func hold(t testing.TB, key types.NamespacedName) (release func()) {
	ch := make(chan struct{})
	holds.Store(key, ch)
	var once sync.Once
	release = func() {
		once.Do(func() {
			holds.Delete(key)
			close(ch)
		})
	}
	t.Cleanup(release)
	return release
}

// heldReconciler runs the reconciler once a held project is released.
type heldReconciler struct{ r *Reconciler }

func (h heldReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if ch, ok := holds.Load(req.NamespacedName); ok {
		select {
		case <-ch.(chan struct{}):
		case <-ctx.Done():
			return reconcile.Result{}, ctx.Err()
		}
	}
	return h.r.Reconcile(ctx, req)
}

func ctrlLog(name string) logr.Logger { return ctrl.Log.WithName(name) }

// --- helpers for tests ---

func newNamespace(t testing.TB) string {
	t.Helper()
	needAPI(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "pmcp-"}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// fixtureServer is a stdio server running this test binary as the fixture, writing its pids to
// a file named after the server.
func fixtureServer(t testing.TB, name string, args ...string) v1alpha1.MCPServer {
	t.Helper()
	pidFile := filepath.Join(pidDir, fmt.Sprintf("%s-%s-%d.json", strings.ReplaceAll(t.Name(), "/", "_"), name, time.Now().UnixNano()))
	return v1alpha1.MCPServer{Name: name, Stdio: &v1alpha1.StdioServer{
		Command: os.Args[0],
		Args:    append([]string{"--name", name, "--pid-file", pidFile}, args...),
		Env:     []v1alpha1.NameValue{{Name: fixture.EnvVar, Value: "1"}},
	}}
}

func pidFileOf(s v1alpha1.MCPServer) string {
	for i, a := range s.Stdio.Args {
		if a == "--pid-file" {
			return s.Stdio.Args[i+1]
		}
	}
	return ""
}

// readPIDs reads the pids the fixture of a server wrote at its latest start.
func readPIDs(t testing.TB, s v1alpha1.MCPServer) fixture.PIDs {
	t.Helper()
	var p fixture.PIDs
	eventually(t, 10*time.Second, "the fixture's pid file", func() bool {
		data, err := os.ReadFile(pidFileOf(s))
		return err == nil && json.Unmarshal(data, &p) == nil && p.PID > 0
	})
	return p
}

// leakedProcesses lists fixture processes (from every pid file) that are still alive.
func leakedProcesses() []int {
	files, _ := filepath.Glob(filepath.Join(pidDir, "*.json"))
	var leaked []int
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var p fixture.PIDs
		if json.Unmarshal(data, &p) != nil {
			continue
		}
		for _, pid := range []int{p.PID, p.Grandchild} {
			if proctest.Alive(pid) {
				leaked = append(leaked, pid)
			}
		}
	}
	return leaked
}

func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, timeout, what, cond)
}

func create(t testing.TB, ns, name string, spec v1alpha1.ProjectMCPSpec) types.NamespacedName {
	t.Helper()
	obj := &v1alpha1.ProjectMCP{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: spec}
	if err := env.Client.Create(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(obj)
	t.Cleanup(func() { deleteAndWait(t, key) })
	return key
}

func get(t testing.TB, key types.NamespacedName) *v1alpha1.ProjectMCP {
	t.Helper()
	obj := &v1alpha1.ProjectMCP{}
	if err := env.Client.Get(context.Background(), key, obj); err != nil {
		t.Fatal(err)
	}
	return obj
}

// update applies f to the latest object, retrying on conflicts.
func update(t testing.TB, key types.NamespacedName, f func(*v1alpha1.ProjectMCP)) {
	t.Helper()
	eventually(t, 10*time.Second, "an update without conflict", func() bool {
		obj := get(t, key)
		f(obj)
		return env.Client.Update(context.Background(), obj) == nil
	})
}

func deleteAndWait(t testing.TB, key types.NamespacedName) {
	obj := &v1alpha1.ProjectMCP{}
	if err := env.Client.Get(context.Background(), key, obj); err != nil {
		return
	}
	_ = env.Client.Delete(context.Background(), obj)
	eventually(t, 30*time.Second, "the object to be deleted", func() bool {
		return env.Client.Get(context.Background(), key, &v1alpha1.ProjectMCP{}) != nil
	})
}

func serverStatusOf(obj *v1alpha1.ProjectMCP, name string) (v1alpha1.ServerStatus, bool) {
	for _, s := range obj.Status.Servers {
		if s.Name == name {
			return s, true
		}
	}
	return v1alpha1.ServerStatus{}, false
}

// waitStatus waits until cond holds for the object's status and returns the object.
func waitStatus(t testing.TB, key types.NamespacedName, timeout time.Duration, what string, cond func(*v1alpha1.ProjectMCP) bool) *v1alpha1.ProjectMCP {
	t.Helper()
	var obj *v1alpha1.ProjectMCP
	eventually(t, timeout, what, func() bool {
		obj = &v1alpha1.ProjectMCP{}
		if err := env.Client.Get(context.Background(), key, obj); err != nil {
			return false // not created yet, e.g. by the mirror
		}
		return cond(obj)
	})
	return obj
}

func isReady(obj *v1alpha1.ProjectMCP) bool {
	for _, c := range obj.Status.Conditions {
		if c.Type == v1alpha1.ConditionReady {
			return c.Status == metav1.ConditionTrue && obj.Status.ObservedGeneration == obj.Generation
		}
	}
	return false
}

func phaseIs(name string, phase v1alpha1.ServerPhase) func(*v1alpha1.ProjectMCP) bool {
	return func(obj *v1alpha1.ProjectMCP) bool {
		s, ok := serverStatusOf(obj, name)
		return ok && s.Phase == phase
	}
}
