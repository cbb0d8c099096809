package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/yaml"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	projectconfig "github.com/dsh-dev/projectmcp/config"
	"github.com/dsh-dev/projectmcp/internal/config"
	"github.com/dsh-dev/projectmcp/internal/controlplane"
	"github.com/dsh-dev/projectmcp/internal/gateway"
	"github.com/dsh-dev/projectmcp/internal/mirror"
)

// runDev is the embedded default: a local control plane (a real kube-apiserver and etcd), the
// CRD, the controller with its gateway, and the mirror of the project folder, until Ctrl-C.
func runDev(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	fs.SetOutput(stderr)
	project := fs.String("project", ".", "project directory holding .dsh/mcp.json")
	dataDir := fs.String("data-dir", "", "keep the control plane's data and kubeconfig here (default: a temporary directory, removed on exit)")
	gatewayAddr := fs.String("gateway-bind-address", "127.0.0.1:8484", "address of the MCP endpoint")
	verbose := fs.Bool("v", false, "log the controller's activity")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	logOpts := zap.Options{DestWriter: io.Discard}
	if *verbose {
		logOpts.DestWriter = stderr
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&logOpts)))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := dev(ctx, *project, *dataDir, *gatewayAddr, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "projectmcp dev: %v\n", err)
		return 1
	}
	return 0
}

func dev(ctx context.Context, projectDir, dataDir, gatewayAddr string, stdout, stderr io.Writer) error {
	if gatewayAddr == "0" {
		return errors.New(`dev serves the project's endpoint: --gateway-bind-address cannot be "0"`)
	}
	abs, err := filepath.Abs(projectDir)
	if err != nil {
		return err
	}
	keep := dataDir != ""
	if !keep {
		if dataDir, err = os.MkdirTemp("", "projectmcp-dev-"); err != nil {
			return err
		}
		defer os.RemoveAll(dataDir)
	} else if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return err
	}

	fmt.Fprintln(stderr, "Starting a local control plane (kube-apiserver and etcd)...")
	assets, err := controlplane.Ensure(ctx, controlplane.Options{Progress: stderr})
	if err != nil {
		return err
	}
	crds, err := embeddedCRDs()
	if err != nil {
		return err
	}
	scheme, err := newScheme()
	if err != nil {
		return err
	}
	env := &envtest.Environment{BinaryAssetsDirectory: assets, CRDs: crds, Scheme: scheme, ControlPlaneStartTimeout: 2 * time.Minute}
	cfg, err := env.Start()
	if err != nil {
		return fmt.Errorf("starting the control plane: %w", err)
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintf(stderr, "stopping the control plane: %v\n", err)
		}
	}()
	kubeconfig := filepath.Join(dataDir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.KubeConfig, 0o600); err != nil {
		return err
	}

	// The controller's own defaults, with what a local single-user run needs instead.
	f := defaultControllerFlags()
	f.metricsAddr, f.probeAddr, f.leaderElect = "0", "0", false
	f.gatewayAddr, f.gatewayAuth = gatewayAddr, "local"
	f.allowAny = true // dev runs as the user, with the user's commands
	mgr, gw, err := newManager(cfg, &f)
	if err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	key := types.NamespacedName{Namespace: "default", Name: config.NameFor(filepath.Join(abs, config.DefaultPath))}
	m := &mirror.Mirror{Client: c, Dir: abs, Key: key, Log: ctrl.Log.WithName("mirror")}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, 2)
	go func() { errs <- mgr.Start(ctx) }()
	go func() { errs <- m.Run(ctx) }()

	// The endpoint is printed once a request to it would be served: the gateway answers and
	// the mirror has created the ProjectMCP (a session arriving before the first reconcile
	// then waits for it). Until then a request would get 404.
	var firstErr error
	waiting := 2
	if err := awaitServing(ctx, c, gw, key, m.Path(), errs, stderr); err != nil {
		firstErr = err
		waiting--
	}
	if firstErr == nil && ctx.Err() == nil {
		endpoint := gw.Endpoint(key)
		fmt.Fprintf(stdout, `projectmcp dev is running for %s
  config:     %s
  kubeconfig: %s
              export KUBECONFIG=%s
  endpoint:   %s

Add it to an MCP client, e.g. Claude Code's .mcp.json:
  {"mcpServers": {"project": {"type": "http", "url": "%s"}}}

Press Ctrl-C to stop.
`, abs, m.Path(), kubeconfig, kubeconfig, endpoint, endpoint)
	}

	// Run until Ctrl-C or until the manager or the mirror fails; then stop both and wait.
	if firstErr == nil {
		select {
		case <-ctx.Done():
		case firstErr = <-errs:
			waiting--
		}
	}
	cancel()
	for ; waiting > 0; waiting-- {
		if err := <-errs; err != nil && firstErr == nil {
			firstErr = err
		}
	}
	fmt.Fprintln(stderr, "Stopped: connections closed, control plane stopping.")
	return firstErr
}

// stillStartingAfter is how long dev waits before saying what it is still waiting for.
const stillStartingAfter = 10 * time.Second

// awaitServing waits until the gateway serves requests and the project's ProjectMCP exists.
// It returns the error of the manager or the mirror if one stops first (taken from errs), and
// nil when ready or when ctx ends.
func awaitServing(ctx context.Context, c client.Client, gw *gateway.Gateway, key types.NamespacedName, file string, errs <-chan error, stderr io.Writer) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	slow := time.NewTimer(stillStartingAfter)
	defer slow.Stop()
	for {
		select {
		case <-gw.Serving():
			if err := c.Get(ctx, key, &v1alpha1.ProjectMCP{}); err == nil {
				return nil
			}
		default:
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-errs:
			if err == nil {
				err = errors.New("stopped while starting")
			}
			return err
		case <-slow.C:
			fmt.Fprintf(stderr, "Still starting: waiting for %s to be applied as ProjectMCP %s (run with -v to see why it is not).\n", file, key)
		case <-tick.C:
		}
	}
}

// embeddedCRDs parses the CRDs compiled into the binary.
func embeddedCRDs() ([]*apiextensionsv1.CustomResourceDefinition, error) {
	var out []*apiextensionsv1.CustomResourceDefinition
	err := fs.WalkDir(projectconfig.CRDs, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := projectconfig.CRDs.ReadFile(path)
		if err != nil {
			return err
		}
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := yaml.Unmarshal(data, crd); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, crd)
		return nil
	})
	return out, err
}
