package main

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	projectconfig "github.com/dsh-dev/projectmcp/config"
	"github.com/dsh-dev/projectmcp/internal/config"
	"github.com/dsh-dev/projectmcp/internal/controlplane"
	"github.com/dsh-dev/projectmcp/internal/gateway"
	"github.com/dsh-dev/projectmcp/internal/mirror"
)

const devLong = `Runs everything locally for a project folder until Ctrl-C: a control plane (a real
kube-apiserver and etcd), the ProjectMCP CRD, the controller with its gateway, and the mirror
of the folder's .dsh/mcp.json. While the servers start it prints one line per change of a
server's state (starting, ready with its tool count and what its status notes, such as a
tool description or instructions over the 2 KB Claude Code keeps, failed with the reason), and
later the notes of a server that comes up, such as one added to the file. Once every
enabled server's first connect has ended, or --first-run-timeout has passed, and
"projectmcp connect --write" would succeed, it prints the kubeconfig, the endpoint and the
entry that command adds to the agent's config. Ctrl-C (SIGINT) or SIGTERM stops every server process and the control plane,
removes the temporary directory, and exits 0.

It takes the controller's flags (the same definitions), with the defaults a local
single-user run needs: metrics and health probes off, no leader election, local gateway
access, any stdio command allowed. --kubeconfig and --namespace do not apply: dev runs its
own control plane and puts the ProjectMCP in namespace "default".`

// devControllerFlags are the controller's defaults with what a local single-user run needs
// instead.
func devControllerFlags() controllerFlags {
	f := defaultControllerFlags()
	f.metricsAddr, f.probeAddr, f.leaderElect = "0", "0", false
	f.gatewayAuth = "local"
	f.allowAny = true // dev runs as the user, with the user's commands
	return f
}

func newDevCmd(g *globalFlags, stdout, stderr io.Writer) *cobra.Command {
	f := devControllerFlags()
	var project, dataDir string
	firstRunBound := defaultFirstRunTimeout
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run everything locally for a project folder: control plane, controller, gateway, mirror",
		Long:  devLong,
		Example: `  # in the project folder (the one holding .dsh/mcp.json)
  projectmcp dev

  # another folder, keeping the control plane's data between runs, with the controller's logs
  projectmcp dev --project ~/src/shop --data-dir ~/.cache/shop-dev -v`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, name := range []string{"kubeconfig", "namespace"} {
				if err := refuse(cmd, name, "dev runs its own control plane, with the ProjectMCP in namespace \"default\""); err != nil {
					return err
				}
			}
			if f.gatewayAddr == "0" {
				return usageErrorf(`--gateway-bind-address cannot be "0": dev serves the project's endpoint`)
			}
			if err := f.checkToolNameBudget(); err != nil {
				return err
			}
			g.setupLogging(&f.zap, cmd.Flags(), stderr, true)
			ctx, stop := untilSignal()
			defer stop()
			return dev(ctx, project, dataDir, firstRunBound, &f, stdout, stderr)
		},
	}
	cmd.Flags().StringVar(&project, "project", ".", "project directory holding .dsh/mcp.json")
	cmd.Flags().DurationVar(&firstRunBound, "first-run-timeout", firstRunBound, "how long to wait for every enabled server's first connect before printing the endpoint (0: print it once it serves)")
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "keep the control plane's data and kubeconfig here (default: a temporary directory, removed on exit)")
	// Leader election means nothing for one local process; dev's endpoint is for this machine,
	// so there are no tokens to review.
	f.bind(cmd.Flags(), "leader-elect", "leader-election-namespace", "leader-elect-lease-duration",
		"leader-elect-renew-deadline", "leader-elect-retry-period", "buckets", "handoff-timeout", "advertise-address", "replica-token-file",
		"gateway-auth", "gateway-tls-cert", "gateway-tls-key",
		"gateway-audience", "gateway-oauth-issuer", "gateway-oauth-scope", "gateway-review-ttl", "gateway-new-token-reviews", "gateway-new-token-reviews-per-source")
	return cmd
}

// dev runs until ctx ends (Ctrl-C) or a part fails. f are the controller's flags;
// firstRunBound bounds the wait for the servers' first connects.
func dev(ctx context.Context, projectDir, dataDir string, firstRunBound time.Duration, f *controllerFlags, stdout, stderr io.Writer) error {
	abs, err := filepath.Abs(projectDir)
	if err != nil {
		return err
	}
	stderr = &lockedWriter{w: stderr}
	reporter := &configReporter{file: filepath.Join(abs, config.DefaultPath), w: stderr}
	reporter.check()
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
	// If dev is killed hard, the guard ends kube-apiserver and etcd (the servers die by their
	// parent-death signal). Released first on the way out, before they are stopped.
	guard, err := controlplane.GuardChildren("kube-apiserver", "etcd")
	if err != nil {
		return err
	}
	defer guard.Release()
	kubeconfig := filepath.Join(dataDir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.KubeConfig, 0o600); err != nil {
		return err
	}

	// With the user's HOME, where npx and uvx keep their caches and CLIs their logins; the
	// rest of the environment stays as clean as in a cluster, so a config that works here
	// does not depend on the user's shell.
	if f.serverHome, err = os.UserHomeDir(); err != nil {
		return fmt.Errorf("servers run with your HOME: %w", err)
	}
	f.allowLoopback = true // local servers (http://localhost:3000/mcp) are the point of dev
	// The control plane's data and its admin kubeconfig are no sandboxed server's business.
	f.hide = append(f.hide, dataDir)
	mgr, gw, err := newManager(cfg, f)
	if err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	key := types.NamespacedName{Namespace: "default", Name: config.NameFor(filepath.Join(abs, config.DefaultPath))}
	// The controller is this process: the folder's path in spec.project is its servers' root.
	m := &mirror.Mirror{Client: c, Dir: abs, Key: key, Log: ctrl.Log.WithName("mirror"), PublishPath: true, OnRead: reporter.onRead}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, 2)
	go func() { errs <- mgr.Start(ctx) }()
	go func() { errs <- m.Run(ctx) }()

	// The endpoint is printed once a request to it would be served (the gateway answers and
	// the mirror has created the ProjectMCP; until then a request gets 404), once
	// `connect --write` would succeed (status.endpoint is written), and once the servers'
	// first connects have ended: the first client then lists every tool that came up, even
	// on a first run where npx downloads its packages for longer than the ready budget.
	var firstErr error
	waiting := 2
	if err := awaitServing(ctx, c, gw, key, m.Path(), reporter.isRefused, errs, stderr); err != nil {
		firstErr = err
		waiting--
	} else if err := awaitFirstRun(ctx, c, key, firstRunBound, errs, stderr); err != nil {
		firstErr = err
		waiting--
	}
	if firstErr == nil && ctx.Err() == nil {
		if err := printDevReady(ctx, stdout, c, key, abs, m.Path(), kubeconfig); err != nil {
			firstErr = err
		}
	}

	// Run until Ctrl-C or until the manager or the mirror fails, saying the notes of servers
	// that come up later; then stop both and wait.
	if firstErr == nil {
		var took bool
		if took, firstErr = watchNotes(ctx, c, key, errs, stderr); took {
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

// printDevReady says where everything is, and prints the entries `projectmcp connect --write`
// would add to Claude Code's .mcp.json (dev's gateway is local: no token): one per enabled
// server, computed as connect computes them.
func printDevReady(ctx context.Context, w io.Writer, c client.Client, key types.NamespacedName, project, file, kubeconfig string) error {
	obj := &v1alpha1.ProjectMCP{}
	if err := c.Get(ctx, key, obj); err != nil {
		return err
	}
	connect := "projectmcp connect --kubeconfig " + kubeconfig
	if wd, err := os.Getwd(); err != nil || wd != project {
		connect += " --project " + project
	}
	fmt.Fprintf(w, `projectmcp dev is running for %s
  config:     %s
  kubeconfig: %s
              export KUBECONFIG=%s
  endpoint:   %s

`, project, file, kubeconfig, kubeconfig, obj.Status.Endpoint)
	targets, err := connectEntries(key, obj, false, defaultEntryName)
	if err != nil {
		fmt.Fprintf(w, "No server of %s is enabled yet: once one is, \"%s --write\" adds its entry to the\nproject's .mcp.json.\n\nPress Ctrl-C to stop.\n", file, connect)
		return nil //nolint:nilerr // connectEntries fails only when no server is enabled, which dev reports and waits out
	}
	entries, err := clientFormats[0].snippet(connectWants(clientFormats[0], obj, targets, false), false)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, `Connect an agent: "%s --write" adds one entry per server, named
as in .dsh/mcp.json, so the agent names the tools as with a direct config (mcp__<server>__<tool>),
and a "projectmcp" entry that serves the servers added since, in the session already running
(mcp__projectmcp__<server>__<tool>, until connect --write gives them their own); an entry that
defines the same server directly gives way to it ("projectmcp adopt" moves such entries into
.dsh/mcp.json), and --aggregate writes the one "projectmcp" entry instead. These
entries go into the project's .mcp.json (Claude Code; --client vscode or cursor for theirs):
%s

Press Ctrl-C to stop.
`, connect, entries)
	return nil
}

// stillStartingAfter is how long dev waits before saying what it is still waiting for.
const stillStartingAfter = 10 * time.Second

// awaitServing waits until the gateway serves requests and the project's ProjectMCP exists,
// saying what it waits for once stillStartingAfter has passed (refused says whether the file
// is refused, whose errors are printed already). It returns the error of the manager or the
// mirror if one stops first, and nil when ready or when ctx ends.
func awaitServing(ctx context.Context, c client.Client, gw *gateway.Gateway, key types.NamespacedName, file string, refused func() bool,
	errs <-chan error, stderr io.Writer,
) error {
	start, said := time.Now(), false
	return poll(ctx, errs, func() bool {
		select {
		case <-gw.Serving():
			if err := c.Get(ctx, key, &v1alpha1.ProjectMCP{}); err == nil {
				return true
			}
		default:
		}
		if !said && time.Since(start) >= stillStartingAfter {
			said = true
			if refused() {
				fmt.Fprintf(stderr, "Still starting: waiting for %s to be fixed (its errors are above).\n", file)
			} else {
				fmt.Fprintf(stderr, "Still starting: waiting for %s to be applied as ProjectMCP %s (run with -v to see why it is not).\n", file, key)
			}
		}
		return false
	})
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
