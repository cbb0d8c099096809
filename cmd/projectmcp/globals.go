package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.uber.org/zap/zapcore"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// globalFlags are the flags every command shares, defined once on the root (kubectl's names):
// which cluster, which namespace, how much to log.
type globalFlags struct {
	kubeconfig string
	namespace  string
	verbose    int
}

func (g *globalFlags) bind(fs *pflag.FlagSet) {
	fs.StringVar(&g.kubeconfig, "kubeconfig", "", "path to a kubeconfig (default: $KUBECONFIG, in-cluster config, ~/.kube/config)")
	fs.StringVarP(&g.namespace, "namespace", "n", "", `namespace of the ProjectMCP (default: the kubeconfig context's, else "default")`)
	fs.CountVarP(&g.verbose, "verbose", "v", "log more: -v shows the logs dev hides, -vv and more add debug levels")
}

// restConfig is the configuration for the cluster --kubeconfig names, else $KUBECONFIG, the
// in-cluster config or ~/.kube/config. Either way the client does not throttle itself (the API
// server's priority and fairness does), as controller-runtime's own loader sets it: client-go's
// default of 5 requests per second would hold 1,000 new projects' finalizer and status writes
// for minutes (the scale benchmark).
func (g *globalFlags) restConfig() (*rest.Config, error) {
	if g.kubeconfig == "" {
		return ctrl.GetConfig()
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", g.kubeconfig)
	if err != nil {
		return nil, err
	}
	if cfg.QPS == 0 {
		cfg.QPS = -1
	}
	return cfg, nil
}

// client is a client for that cluster, knowing the ProjectMCP type.
func (g *globalFlags) client() (client.Client, error) {
	cfg, err := g.restConfig()
	if err != nil {
		return nil, err
	}
	scheme, err := newScheme()
	if err != nil {
		return nil, err
	}
	return client.New(cfg, client.Options{Scheme: scheme})
}

// target is a client and the namespace a command works in.
func (g *globalFlags) target() (client.Client, string, error) {
	ns, err := g.ns()
	if err != nil {
		return nil, "", err
	}
	c, err := g.client()
	return c, ns, err
}

// ns is the namespace a command works in, as kubectl chooses it: --namespace, else the
// kubeconfig context's (the pod's in a cluster), else "default".
func (g *globalFlags) ns() (string, error) {
	if g.namespace != "" {
		return g.namespace, nil
	}
	return kubeconfigNamespace(g.kubeconfig)
}

// kubeconfigNamespace is the namespace of the kubeconfig's current context ("default" when it
// names none; the pod's namespace in a cluster).
func kubeconfigNamespace(kubeconfig string) (string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	ns, _, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).Namespace()
	if err != nil {
		return "", fmt.Errorf("the kubeconfig's namespace: %w (or set --namespace)", err)
	}
	return ns, nil
}

// refuse makes a global flag that means nothing to cmd a usage error instead of a silent no-op.
func refuse(cmd *cobra.Command, flag, why string) error {
	if cmd.Flags().Changed(flag) {
		return usageErrorf("--%s does not apply: %s", flag, why)
	}
	return nil
}

// setupLogging sets the process's logger (see logger).
func (g *globalFlags) setupLogging(opts *zap.Options, fs *pflag.FlagSet, stderr io.Writer, quiet bool) {
	ctrl.SetLogger(g.logger(opts, fs, stderr, quiet))
}

// logger is built from the zap flags (opts, parsed from fs; fs may lack them) and -v: -vv and
// more lower the level to debug unless --zap-log-level says otherwise. With quiet (dev) nothing
// is logged unless -v or a --zap-* flag asks for it.
func (g *globalFlags) logger(opts *zap.Options, fs *pflag.FlagSet, stderr io.Writer, quiet bool) logr.Logger {
	opts.DestWriter = stderr
	if g.verbose >= 2 && !fs.Changed("zap-log-level") {
		opts.Level = zapcore.Level(-(g.verbose - 1))
	}
	if quiet && g.verbose == 0 {
		asked := false
		fs.Visit(func(f *pflag.Flag) { asked = asked || strings.HasPrefix(f.Name, "zap-") })
		if !asked {
			opts.DestWriter = io.Discard
		}
	}
	return zap.New(zap.UseFlagOptions(opts))
}

// untilSignal is a context that ends at SIGINT or SIGTERM: the long-running commands stop
// cleanly then and exit 0.
func untilSignal() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
}

// runningInCluster reports whether this process runs in a Kubernetes pod.
func runningInCluster() bool {
	_, ok := os.LookupEnv("KUBERNETES_SERVICE_HOST")
	return ok
}
