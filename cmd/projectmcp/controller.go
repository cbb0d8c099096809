package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/controllers"
	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/gateway"
	"github.com/dsh-dev/projectmcp/internal/metrics"
	"github.com/dsh-dev/projectmcp/internal/registry"
)

// controllerFlags are the flags of `projectmcp controller`.
type controllerFlags struct {
	kubeconfig     string
	metricsAddr    string
	probeAddr      string
	leaderElect    bool
	leaderElectNS  string
	leaseDuration  time.Duration
	renewDeadline  time.Duration
	retryPeriod    time.Duration
	connectTimeout time.Duration
	healthInterval time.Duration
	relistInterval time.Duration
	gatewayAddr    string
	gatewayURL     string
	gatewayAuth    string
	sessionTimeout time.Duration
	statelessIdle  time.Duration
	maxBodyBytes   int64
	callTimeout    time.Duration
	maxMessage     int64
	allowCommands  stringList
	allowAny       bool
	zap            zap.Options
}

func (f *controllerFlags) bind(fs *flag.FlagSet) {
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "path to a kubeconfig (default: $KUBECONFIG, in-cluster, ~/.kube/config)")
	fs.StringVar(&f.metricsAddr, "metrics-bind-address", "127.0.0.1:8080", `metrics endpoint address ("0" disables)`)
	fs.StringVar(&f.probeAddr, "health-probe-bind-address", "127.0.0.1:8081", `healthz/readyz address ("0" disables)`)
	fs.BoolVar(&f.leaderElect, "leader-elect", true, "hold a Lease so that one replica owns the connections")
	fs.StringVar(&f.leaderElectNS, "leader-election-namespace", "", "namespace of the Lease (default: the pod's in a cluster, else the kubeconfig context's)")
	fs.DurationVar(&f.leaseDuration, "leader-elect-lease-duration", 15*time.Second, "how long followers wait after the leader's last renewal before taking the Lease: the longest failover after a leader dies without releasing it")
	fs.DurationVar(&f.renewDeadline, "leader-elect-renew-deadline", 10*time.Second, "how long the leader keeps trying to renew before it gives up leading and exits (less than the lease duration)")
	fs.DurationVar(&f.retryPeriod, "leader-elect-retry-period", 2*time.Second, "how often the leader renews and followers try to acquire")
	fs.DurationVar(&f.connectTimeout, "connect-timeout", 30*time.Second, "bound on one connect attempt (initialize and first tools/list)")
	fs.DurationVar(&f.healthInterval, "health-interval", 15*time.Second, "how often an idle connection is probed")
	fs.DurationVar(&f.relistInterval, "relist-interval", time.Minute, "backstop tools/list interval")
	fs.StringVar(&f.gatewayAddr, "gateway-bind-address", "127.0.0.1:8484", `address of the per-project MCP endpoints ("0" disables the gateway)`)
	fs.StringVar(&f.gatewayURL, "gateway-url", "", "URL clients reach the gateway at, written to status.endpoint (default: http://<bind address>)")
	fs.StringVar(&f.gatewayAuth, "gateway-auth", "local", `"local": loopback callers only; "kubernetes": bearer token checked by TokenReview, verb "use" on the ProjectMCP checked by SubjectAccessReview`)
	fs.DurationVar(&f.sessionTimeout, "session-timeout", 30*time.Minute, "release a session that sent no request for this long")
	fs.DurationVar(&f.statelessIdle, "stateless-session-idle", 10*time.Minute, "release a stateless (2026-07-28) session that sent no request for this long")
	fs.Int64Var(&f.maxBodyBytes, "max-request-bytes", 4<<20, "largest request body the gateway accepts")
	fs.DurationVar(&f.callTimeout, "call-timeout", 30*time.Minute, `bound on one forwarded request (a tool call, a prompt, a read); "0" means none`)
	fs.Int64Var(&f.maxMessage, "max-message-bytes", 64<<20, "largest message a server may send in answer to a forwarded call; a larger one fails that call only (0: the default)")
	fs.Var(&f.allowCommands, "allow-command", "glob of a stdio command servers may run (repeatable); with none, stdio servers are refused in a cluster")
	_, inCluster := os.LookupEnv("KUBERNETES_SERVICE_HOST")
	fs.BoolVar(&f.allowAny, "allow-any-command", !inCluster, "run any stdio command (the default outside a cluster, where the controller runs as the user)")
	f.zap.BindFlags(fs)
}

// electionNamespace makes leader election work with no extra flags: in a cluster the Lease
// lives in the pod's namespace (controller-runtime finds it); outside one, in the namespace of
// the kubeconfig's current context ("default" when it names none). It says which, first thing.
func (f *controllerFlags) electionNamespace() error {
	log := ctrl.Log.WithName("setup")
	if !f.leaderElect {
		log.Info("Leader election off: this process owns every ProjectMCP it sees")
		return nil
	}
	source := "flag"
	if f.leaderElectNS == "" {
		if _, inCluster := os.LookupEnv("KUBERNETES_SERVICE_HOST"); inCluster {
			log.Info("Leader election on", "lease", leaseName, "namespace", "the pod's", "source", "in-cluster")
			return nil
		}
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		rules.ExplicitPath = f.kubeconfig
		ns, _, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).Namespace()
		if err != nil {
			return fmt.Errorf("leader election: the kubeconfig's namespace: %w (or set --leader-election-namespace, or --leader-elect=false)", err)
		}
		f.leaderElectNS, source = ns, "kubeconfig context (not running in a cluster)"
	}
	log.Info("Leader election on", "lease", leaseName, "namespace", f.leaderElectNS, "source", source)
	return nil
}

// leaseName is the Lease replicas elect with.
const leaseName = "projectmcp.mcp.dsh.dev"

// defaultControllerFlags are the flags of `projectmcp controller` with nothing set: dev starts
// from them, so the two never disagree about a default.
func defaultControllerFlags() controllerFlags {
	var f controllerFlags
	f.bind(flag.NewFlagSet("defaults", flag.ContinueOnError))
	return f
}

func (f *controllerFlags) restConfig() (*rest.Config, error) {
	if f.kubeconfig != "" {
		return clientcmd.BuildConfigFromFlags("", f.kubeconfig)
	}
	return ctrl.GetConfig()
}

// newScheme holds the types the controller reads and writes.
func newScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, v1alpha1.AddToScheme(s)
}

// orDefault is nil for an unset duration, which leaves controller-runtime's default in force.
func orDefault(d time.Duration) *time.Duration {
	if d == 0 {
		return nil
	}
	return &d
}

// checkLeaseTimings refuses lease timings the election cannot work with, naming the flags
// (client-go would refuse them too, without saying which flag is wrong).
func (f *controllerFlags) checkLeaseTimings() error {
	if !f.leaderElect {
		return nil
	}
	switch {
	case f.leaseDuration <= 0 || f.renewDeadline <= 0 || f.retryPeriod <= 0:
		return fmt.Errorf("--leader-elect-lease-duration (%s), --leader-elect-renew-deadline (%s) and --leader-elect-retry-period (%s) must be positive",
			f.leaseDuration, f.renewDeadline, f.retryPeriod)
	case f.renewDeadline >= f.leaseDuration:
		return fmt.Errorf("--leader-elect-renew-deadline (%s) must be less than --leader-elect-lease-duration (%s)", f.renewDeadline, f.leaseDuration)
	case float64(f.retryPeriod)*1.2 >= float64(f.renewDeadline): // client-go's jitter factor
		return fmt.Errorf("--leader-elect-retry-period (%s) must be less than --leader-elect-renew-deadline (%s) / 1.2", f.retryPeriod, f.renewDeadline)
	}
	return nil
}

// newManager wires the registry, the reconciler and the gateway into a manager. The gateway is
// nil when it is off.
func newManager(cfg *rest.Config, f *controllerFlags) (mgr manager.Manager, gw *gateway.Gateway, err error) {
	scheme, err := newScheme()
	if err != nil {
		return nil, nil, err
	}
	mgr, err = ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metricsserver.Options{BindAddress: f.metricsAddr},
		HealthProbeBindAddress:        f.probeAddr,
		LeaderElection:                f.leaderElect,
		LeaderElectionID:              leaseName,
		LeaderElectionNamespace:       f.leaderElectNS,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 orDefault(f.leaseDuration),
		RenewDeadline:                 orDefault(f.renewDeadline),
		RetryPeriod:                   orDefault(f.retryPeriod),
	})
	if err != nil {
		return nil, nil, err
	}
	reg := registry.New(clock.RealClock{}, ctrl.Log.WithName("registry"))
	metrics.SetSource(reg.Counts)
	r := &controllers.Reconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Registry:  reg,
		Recorder:  mgr.GetEventRecorder("projectmcp"),
		Clock:     clock.RealClock{},
		Conn: controllers.ConnDefaults{
			AllowCommands:  f.commandAllowlist(),
			ConnectTimeout: f.connectTimeout,
			HealthInterval: f.healthInterval,
			RelistInterval: f.relistInterval,
		},
	}
	if f.gatewayAddr != "0" {
		// Bound now, so that a port of 0 is resolved before any endpoint is written to status.
		ln, err := net.Listen("tcp", f.gatewayAddr)
		if err != nil {
			return nil, nil, fmt.Errorf("gateway: %w", err)
		}
		gw, err = f.gateway(cfg, mgr, reg, ln.Addr().String())
		if err != nil {
			ln.Close()
			return nil, nil, err
		}
		r.Endpoint = gw.Endpoint
		if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
			ctrl.Log.WithName("gateway").Info("Serving MCP endpoints", "address", ln.Addr().String())
			return gw.Serve(ctx, ln)
		})); err != nil {
			return nil, nil, err
		}
	}
	if err := r.SetupWithManager(mgr); err != nil {
		return nil, nil, err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return nil, nil, err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return nil, nil, err
	}
	// Only the leader holds connections and serves the gateway: a replica waiting for the
	// Lease is not ready, so a Service sends sessions to the leader alone.
	if err := mgr.AddReadyzCheck("leader", func(*http.Request) error {
		select {
		case <-mgr.Elected():
			return nil
		default:
			return errors.New("not the leader: waiting for the Lease")
		}
	}); err != nil {
		return nil, nil, err
	}
	return mgr, gw, nil
}

// commandAllowlist is nil (everything allowed) or the --allow-command patterns (possibly none).
func (f *controllerFlags) commandAllowlist() []string {
	if f.allowAny && len(f.allowCommands) == 0 {
		return nil
	}
	return append([]string{}, f.allowCommands...)
}

// gateway builds the per-project MCP endpoint server from the flags.
func (f *controllerFlags) gateway(cfg *rest.Config, mgr manager.Manager, reg *registry.Registry, bound string) (*gateway.Gateway, error) {
	if f.maxMessage > 0 {
		conn.MaxMessageBytes = f.maxMessage // one process, one bound: set before any connection reads
	}
	opts := gateway.Options{
		Registry: reg, BaseURL: f.gatewayURL, SessionTimeout: f.sessionTimeout,
		StatelessIdle: f.statelessIdle, MaxBodyBytes: f.maxBodyBytes, CallTimeout: f.callTimeout, Log: ctrl.Log.WithName("gateway"),
		Objects: mgr.GetClient(), Live: mgr.GetAPIReader(),
	}
	if opts.BaseURL == "" {
		opts.BaseURL = "http://" + bound
	}
	switch f.gatewayAuth {
	case "local":
		host, _, _ := net.SplitHostPort(bound)
		if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
			return nil, fmt.Errorf("--gateway-auth=local needs a loopback --gateway-bind-address, not %q", f.gatewayAddr)
		}
	case "kubernetes":
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		opts.Auth = &gateway.KubernetesAuth{Client: cs}
	default:
		return nil, fmt.Errorf("--gateway-auth must be local or kubernetes, not %q", f.gatewayAuth)
	}
	return gateway.New(opts), nil
}

// runController runs the manager against the kubeconfig's cluster until SIGINT or SIGTERM; on
// the way out every connection is destroyed and every server process ends.
func runController(args []string, _, stderr io.Writer) int {
	fs := flag.NewFlagSet("controller", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f controllerFlags
	f.bind(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	f.zap.DestWriter = stderr
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&f.zap)))
	if os.Getenv("GOGC") == "" {
		// The MCP SDK allocates heavily per message (about 0.5 MB per forwarded call, most of it
		// JSON decoder buffers); with the default GOGC a third of the gateway's CPU goes to the
		// collector. 400 halves the per-call latency (make bench) for a few MB more heap.
		debug.SetGCPercent(400)
	}
	if err := f.checkLeaseTimings(); err != nil {
		fmt.Fprintf(stderr, "projectmcp controller: %v\n", err)
		return 2
	}
	cfg, err := f.restConfig()
	if err != nil {
		fmt.Fprintf(stderr, "projectmcp controller: %v\n", err)
		return 1
	}
	if err := f.electionNamespace(); err != nil {
		fmt.Fprintf(stderr, "projectmcp controller: %v\n", err)
		return 1
	}
	mgr, _, err := newManager(cfg, &f)
	if err != nil {
		fmt.Fprintf(stderr, "projectmcp controller: %v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := mgr.Start(ctx); err != nil {
		fmt.Fprintf(stderr, "projectmcp controller: %v\n", err)
		return 1
	}
	return 0
}
