package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/dsh-dev/projectmcp/internal/config"
	"github.com/dsh-dev/projectmcp/internal/mirror"
)

// runMirror watches each --project directory's .dsh/mcp.json and applies it to a ProjectMCP
// until SIGINT or SIGTERM.
func runMirror(args []string, _, stderr io.Writer) int {
	fs := flag.NewFlagSet("mirror", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var projects stringList
	fs.Var(&projects, "project", "project directory holding .dsh/mcp.json (repeatable)")
	name := fs.String("name", "", "object name (default: the directory's name; only with one --project)")
	namespace := fs.String("namespace", "default", "namespace of the ProjectMCP objects")
	kubeconfig := fs.String("kubeconfig", "", "path to a kubeconfig (default: $KUBECONFIG, in-cluster, ~/.kube/config)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if len(projects) == 0 || (*name != "" && len(projects) > 1) || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: projectmcp mirror --project DIR [--project DIR]... [--name N] [--namespace NS]")
		return 2
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(stderr)))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := mirrorProjects(ctx, *kubeconfig, projects, *name, *namespace); err != nil {
		fmt.Fprintf(stderr, "projectmcp mirror: %v\n", err)
		return 1
	}
	return 0
}

// mirrorProjects runs one mirror per directory until ctx ends.
func mirrorProjects(ctx context.Context, kubeconfig string, dirs []string, name, namespace string) error {
	c, err := newClient(kubeconfig)
	if err != nil {
		return err
	}
	errs := make(chan error, len(dirs))
	var wg sync.WaitGroup
	for _, dir := range dirs {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return err
		}
		n := name
		if n == "" {
			n = config.NameFor(filepath.Join(abs, config.DefaultPath))
		}
		m := &mirror.Mirror{Client: c, Dir: abs,
			Key: types.NamespacedName{Namespace: namespace, Name: n}, Log: ctrl.Log.WithName("mirror").WithValues("project", abs)}
		ctrl.Log.Info("Mirroring", "file", m.Path(), "projectmcp", m.Key.String())
		wg.Go(func() { errs <- m.Run(ctx) })
	}
	wg.Wait()
	close(errs)
	var all []error
	for e := range errs {
		all = append(all, e)
	}
	return errors.Join(all...)
}
