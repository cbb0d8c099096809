package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/dsh-dev/projectmcp/internal/controlplane"
)

// newEnvtestCmd gets kube-apiserver and etcd (the step `dev` takes first) and says where they
// are: for CI caches, for the project's own Makefile, and to fill the cache before going offline.
func newEnvtestCmd(stdout, stderr io.Writer) *cobra.Command {
	var printPath bool
	cmd := &cobra.Command{
		Use:   "envtest",
		Short: "Get kube-apiserver and etcd (built once, then cached) and print where they are",
		Long: `Finds or gets kube-apiserver and etcd, the control plane dev runs and the tests use:
KUBEBUILDER_ASSETS, the cache in ${XDG_DATA_HOME:-~/.local/share}/projectmcp/envtest, a
download, or a build with the go on PATH (ENVTEST_SKIP_DOWNLOAD=1 skips the download). Progress
goes to stderr; SIGINT or SIGTERM stops it.`,
		Example: `  # fill the cache, and say how to point envtest-based tests at it
  projectmcp envtest

  # for a script: the directory alone
  export KUBEBUILDER_ASSETS=$(projectmcp envtest --print-path)`,
		RunE: func(*cobra.Command, []string) error {
			ctx, stop := untilSignal()
			defer stop()
			dir, err := controlplane.Ensure(ctx, controlplane.Options{Progress: stderr})
			if err != nil {
				return err
			}
			if printPath {
				fmt.Fprintln(stdout, dir)
				return nil
			}
			fmt.Fprintf(stdout, "kube-apiserver and etcd are in %s\nexport KUBEBUILDER_ASSETS=%s\n", dir, dir)
			return nil
		},
	}
	cmd.Flags().BoolVar(&printPath, "print-path", false, "print only the directory (for KUBEBUILDER_ASSETS=$(projectmcp envtest --print-path)); progress goes to stderr")
	return cmd
}
