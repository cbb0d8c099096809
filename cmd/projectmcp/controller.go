package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
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
	"github.com/dsh-dev/projectmcp/internal/registry"
)

// controllerFlags are the flags of `projectmcp controller`.
type controllerFlags struct {
	kubeconfig     string
	metricsAddr    string
	probeAddr      string
	leaderElect    bool
	leaderElectNS  string
	connectTimeout time.Duration
	healthInterval time.Duration
	relistInterval time.Duration
	zap            zap.Options
}

func (f *controllerFlags) bind(fs *flag.FlagSet) {
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "path to a kubeconfig (default: $KUBECONFIG, in-cluster, ~/.kube/config)")
	fs.StringVar(&f.metricsAddr, "metrics-bind-address", "127.0.0.1:8080", `metrics endpoint address ("0" disables)`)
	fs.StringVar(&f.probeAddr, "health-probe-bind-address", "127.0.0.1:8081", `healthz/readyz address ("0" disables)`)
	fs.BoolVar(&f.leaderElect, "leader-elect", true, "hold a Lease so that one replica owns the connections")
	fs.StringVar(&f.leaderElectNS, "leader-election-namespace", "", "namespace of the Lease (default: in-cluster namespace)")
	fs.DurationVar(&f.connectTimeout, "connect-timeout", 30*time.Second, "bound on one connect attempt (initialize and first tools/list)")
	fs.DurationVar(&f.healthInterval, "health-interval", 15*time.Second, "how often an idle connection is probed")
	fs.DurationVar(&f.relistInterval, "relist-interval", time.Minute, "backstop tools/list interval")
	f.zap.BindFlags(fs)
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

// newManager wires the registry and the reconciler into a manager.
func newManager(cfg *rest.Config, f *controllerFlags) (manager.Manager, error) {
	scheme, err := newScheme()
	if err != nil {
		return nil, err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Metrics:                       metricsserver.Options{BindAddress: f.metricsAddr},
		HealthProbeBindAddress:        f.probeAddr,
		LeaderElection:                f.leaderElect,
		LeaderElectionID:              "projectmcp.mcp.dsh.dev",
		LeaderElectionNamespace:       f.leaderElectNS,
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		return nil, err
	}
	log := ctrl.Log.WithName("registry")
	r := &controllers.Reconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Registry:  registry.New(clock.RealClock{}, log),
		Recorder:  mgr.GetEventRecorder("projectmcp"),
		Clock:     clock.RealClock{},
		Conn: controllers.ConnDefaults{
			ConnectTimeout: f.connectTimeout,
			HealthInterval: f.healthInterval,
			RelistInterval: f.relistInterval,
		},
	}
	if err := r.SetupWithManager(mgr); err != nil {
		return nil, err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return nil, err
	}
	return mgr, nil
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
	cfg, err := f.restConfig()
	if err != nil {
		fmt.Fprintf(stderr, "projectmcp controller: %v\n", err)
		return 1
	}
	mgr, err := newManager(cfg, &f)
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
