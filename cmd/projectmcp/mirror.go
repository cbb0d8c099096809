package main

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"sync"

	"github.com/spf13/cobra"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/dsh-dev/projectmcp/internal/config"
	"github.com/dsh-dev/projectmcp/internal/mirror"
)

const mirrorLong = `Watches each --project folder's .dsh/mcp.json (the folder is watched, so editors that save by
renaming a new file over the old one are seen; bursts are debounced) and server-side-applies
it to a ProjectMCP (field manager projectmcp-mirror) until SIGINT or SIGTERM, then exits 0.
The object is named after the folder, made a valid object name, unless --name says otherwise.

An invalid file never replaces the last good spec: the ConfigSynced condition turns False
with the parser's message, a Warning event is recorded, and the running connections stay.
Deleting the file empties the server list; recreating it brings the servers back.

The file is read only inside the folder: a .dsh, or a .dsh/mcp.json, that is a symlink
leading out of it is refused like an invalid file (the condition and the event name the
link; the log says where it points), since the mirror would publish whatever file it
reaches into the cluster. A link that stays inside the folder is followed.

spec.project stays empty unless --publish-project-path writes the folder's path into it: a
controller on this machine (started with "projectmcp controller") gives that folder to the
servers as their root (within --project-root-base), and to a controller anywhere else the
path means nothing, while it tells everyone who can read the object your user name and
directory layout. "projectmcp dev" publishes it, since its controller is the same process.`

func newMirrorCmd(g *globalFlags, stderr io.Writer) *cobra.Command {
	var projects []string
	var name string
	var publishPath bool
	cmd := &cobra.Command{
		Use:   "mirror --project DIR...",
		Short: "Apply project folders' .dsh/mcp.json to ProjectMCPs as they change",
		Long:  mirrorLong,
		Example: `  # two checkouts, each into its own ProjectMCP in the kubeconfig context's namespace
  projectmcp mirror --project ~/src/shop --project ~/src/web

  # one checkout under another name and namespace
  projectmcp mirror --project /repo --name shop-main -n team-a`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case len(projects) == 0:
				return usageErrorf("--project is required: the folder holding .dsh/mcp.json")
			case name != "" && len(projects) > 1:
				return usageErrorf("--name names one object: give it with one --project, not %d", len(projects))
			}
			ns, err := g.ns()
			if err != nil {
				return err
			}
			g.setupLogging(&zap.Options{}, cmd.Flags(), stderr, false)
			ctx, stop := untilSignal()
			defer stop()
			return mirrorProjects(ctx, g.kubeconfig, projects, name, ns, publishPath)
		},
	}
	cmd.Flags().StringArrayVar(&projects, "project", nil, "project folder holding .dsh/mcp.json (repeatable)")
	cmd.Flags().StringVar(&name, "name", "", "object name (default: the folder's name; only with one --project)")
	cmd.Flags().BoolVar(&publishPath, "publish-project-path", false, "write each folder's absolute path into spec.project, for a controller on this machine to give its servers as their root (without it spec.project stays empty: the path names your user and directories to everyone who reads the object)")
	_ = cmd.MarkFlagDirname("project")
	return cmd
}

// mirrorProjects runs one mirror per directory until ctx ends.
func mirrorProjects(ctx context.Context, kubeconfig string, dirs []string, name, namespace string, publishPath bool) error {
	c, err := (&globalFlags{kubeconfig: kubeconfig}).client()
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
		m := &mirror.Mirror{Client: c, Dir: abs, PublishPath: publishPath,
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
