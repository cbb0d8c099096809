package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/signal"
	"syscall"

	"github.com/dsh-dev/projectmcp/internal/controlplane"
)

// runEnvtest gets kube-apiserver and etcd (the step `dev` takes first) and says where they are:
// for CI caches, for the project's own Makefile, and to fill the cache before going offline.
func runEnvtest(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("envtest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	printPath := fs.Bool("print-path", false, "print only the directory (for KUBEBUILDER_ASSETS=$(projectmcp envtest --print-path)); progress goes to stderr")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: projectmcp envtest [--print-path]\n\n"+
			"Finds or gets kube-apiserver and etcd: KUBEBUILDER_ASSETS, the cache in\n"+
			"${XDG_DATA_HOME:-~/.local/share}/projectmcp/envtest, a download, or a build with the\n"+
			"`go` on PATH (ENVTEST_SKIP_DOWNLOAD=1 skips the download).")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	dir, err := controlplane.Ensure(ctx, controlplane.Options{Progress: stderr})
	if err != nil {
		fmt.Fprintf(stderr, "projectmcp envtest: %v\n", err)
		return 1
	}
	if *printPath {
		fmt.Fprintln(stdout, dir)
		return 0
	}
	fmt.Fprintf(stdout, "kube-apiserver and etcd are in %s\nexport KUBEBUILDER_ASSETS=%s\n", dir, dir)
	return 0
}
