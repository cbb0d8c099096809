// Package harness is the suite that the controller's and the gateway's integration tests share:
// the real reconciler, registry and gateway in one manager against a real kube-apiserver
// (testenv), with real fixture MCP server processes; the test binary re-executes itself as the
// fixture (test/fixture). It holds the suite's state (Env, Ctl, Logs, GatewayAddr) as package
// variables, one set per test binary.
//
// A test package runs it from its TestMain with Main. The API server and the controller start
// with the first test that needs them (NewNamespace, or NeedAPI), so the package's pure tests
// run without one: in unit mode (`make unit`, testenv.UnitMode) those tests are skipped.
package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap/zapcore"
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

	"github.com/dsh-dev/projectmcp/controllers"
	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/gateway"
	"github.com/dsh-dev/projectmcp/internal/metrics"
	"github.com/dsh-dev/projectmcp/internal/policy"
	"github.com/dsh-dev/projectmcp/internal/proctest"
	"github.com/dsh-dev/projectmcp/internal/registry"
	"github.com/dsh-dev/projectmcp/internal/testenv"
	"github.com/dsh-dev/projectmcp/internal/testutil"
	"github.com/dsh-dev/projectmcp/test/fixture"
)

// CallTimeout bounds forwarded requests in the suite (TestGatewayCallTimeout).
const CallTimeout = 4 * time.Second

// Conn are the connection settings the suite's reconciler runs with.
var Conn = controllers.ConnDefaults{Settings: conn.Settings{ConnectTimeout: 5 * time.Second, HealthInterval: time.Second, RelistInterval: 5 * time.Second,
	Isolation: policy.Isolation{PassEnv: testutil.ShareNpmCache()},
	// Bounds small enough for TestServerBoundsReachStatus, large enough for the rest.
	MaxMessageBytes: 1 << 20, MaxListPages: 50, MaxSchemaBytes: 64 << 10}}

var (
	// Env is the suite's API server, started by NeedAPI.
	Env *testenv.Env
	// Ctl is the running test controller, started by NeedAPI; a test may stop it and start
	// another (StartController) to show that connections are rebuilt from the objects.
	Ctl *Controller
	// Logs is the controller's log (and the fixtures' stderr), which tests search, for secrets
	// among other things.
	Logs = &testutil.SyncBuffer{}
	// GatewayAddr is where the test controller's gateway listens: a free port chosen by the
	// first controller and kept by the ones that replace it, as a restarted controller would.
	GatewayAddr = "127.0.0.1:0"

	pidDir  string
	options Options
)

// Options are what a test package changes about the suite.
type Options struct {
	// WrapClient, when set, wraps the client the reconciler writes through (for example to
	// make status writes fail on demand).
	WrapClient func(client.Client) client.Client
}

// Main is the whole TestMain of a package that uses the suite: it runs the test binary as the
// fixture server when it is started as one, else runs the tests and stops the controller and
// the API server after them. A run whose tests passed fails when fixture processes or
// goroutines outlive it.
func Main(m *testing.M, opts Options) {
	if os.Getenv(fixture.EnvVar) != "" {
		fixture.Main()
		return
	}
	options = opts
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ignore := goleak.IgnoreCurrent()
	var err error
	if pidDir, err = os.MkdirTemp("", "projectmcp-pids-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(pidDir)
	ctrl.SetLogger(zap.New(zap.WriteTo(io.MultiWriter(os.Stderr, Logs)), zap.UseDevMode(true), zap.Level(zapcore.Level(-2))))
	code := m.Run()
	if Ctl != nil {
		Ctl.Stop()
	}
	if Env != nil {
		Env.Stop()
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

var (
	suiteOnce sync.Once
	suiteErr  error
)

// NeedAPI starts the suite's API server and controller on first use; in unit mode it skips
// the test (testenv.Require).
func NeedAPI(t testing.TB) {
	t.Helper()
	testenv.Require(t)
	suiteOnce.Do(func() {
		if Env, suiteErr = testenv.Start(); suiteErr != nil {
			return
		}
		Ctl, suiteErr = StartController()
	})
	if suiteErr != nil {
		t.Fatalf("starting the API server and the controller: %v", suiteErr)
	}
}

// Controller is one running manager with its registry and gateway.
type Controller struct {
	Registry *registry.Registry
	Gateway  *gateway.Gateway
	cancel   context.CancelFunc
	done     chan error
}

// StartController starts a manager with the reconciler, the registry and the gateway (on
// GatewayAddr), as the controller command wires them, against Env.
func StartController() (*Controller, error) {
	mgr, err := ctrl.NewManager(Env.Config, ctrl.Options{
		Scheme:                 Env.Scheme,
		Controller:             ctrlconfig.Controller{SkipNameValidation: ptr.To(true)}, // restarted in one process
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		return nil, err
	}
	reg := registry.New(clock.RealClock{}, ctrl.Log.WithName("registry"))
	gw := gateway.New(gateway.Options{
		Registry: reg, Log: ctrl.Log.WithName("gateway"), StatelessIdle: 2 * time.Second, CallTimeout: CallTimeout,
		Objects: mgr.GetClient(), Live: mgr.GetAPIReader(),
	})
	ln, err := net.Listen("tcp", GatewayAddr)
	if err != nil {
		return nil, err
	}
	GatewayAddr = ln.Addr().String()
	metrics.SetSource(reg.Counts) // as the controller command wires them
	metrics.SetSessions(gw.SessionCounts)
	gw.SetBaseURL("http://" + GatewayAddr)
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error { return gw.Serve(ctx, ln) })); err != nil {
		return nil, err
	}
	writer := mgr.GetClient()
	if options.WrapClient != nil {
		writer = options.WrapClient(writer)
	}
	r := &controllers.Reconciler{
		Client:    writer,
		APIReader: mgr.GetAPIReader(),
		Registry:  reg,
		Recorder:  mgr.GetEventRecorder("projectmcp"),
		Clock:     clock.RealClock{},
		Conn:      Conn,
		Endpoint:  gw.Endpoint,
	}
	if err := r.SetupWithManagerWrapped(mgr, held); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Controller{Registry: reg, Gateway: gw, cancel: cancel, done: make(chan error, 1)}
	go func() { c.done <- mgr.Start(ctx) }()
	return c, nil
}

// Stop stops the manager and waits for it.
func (c *Controller) Stop() {
	c.cancel()
	if err := <-c.done; err != nil {
		fmt.Fprintf(os.Stderr, "manager: %v\n", err)
	}
}

// holds are the projects whose reconciles tests hold back (Hold), across controller restarts.
var holds sync.Map // types.NamespacedName → chan struct{} (closed on release)

// Hold stops the test controller from reconciling a project until the returned function is
// called (or the test ends), so tests can act before a project's first reconcile.
func Hold(t testing.TB, key types.NamespacedName) (release func()) {
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

// held wraps the reconciler so that a held project is reconciled once it is released.
func held(r reconcile.Reconciler) reconcile.Reconciler {
	return reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		if ch, ok := holds.Load(req.NamespacedName); ok {
			select {
			case <-ch.(chan struct{}):
			case <-ctx.Done():
				return reconcile.Result{}, ctx.Err()
			}
		}
		return r.Reconcile(ctx, req)
	})
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
