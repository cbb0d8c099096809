package main

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/dsh-dev/projectmcp/internal/config"
)

const renderLong = `Prints the ProjectMCP manifest for a config file, for a GitOps repository (Flux or Argo CD
apply it like any other manifest). The name defaults to the project folder's name; without
--namespace the manifest names none and the applier chooses. render and mirror produce the
same spec for the same file.

On bad input it prints every problem with file, line and column to stderr, prints nothing to
stdout (so a pipeline never applies half a manifest), and exits 1.`

func newRenderCmd(g *globalFlags, stdout io.Writer) *cobra.Command {
	var name, project string
	cmd := &cobra.Command{
		Use:   "render FILE",
		Short: "Print the ProjectMCP manifest for a .dsh/mcp.json (for GitOps)",
		Long:  renderLong,
		Example: `  # in the project folder, for a GitOps repository
  projectmcp render .dsh/mcp.json --namespace team-a > projectmcp.yaml

  # with the object's name and spec.project given
  projectmcp render .dsh/mcp.json --name shop --project https://git.example.com/shop`,
		Args: positional([]string{"FILE"}),
		RunE: func(_ *cobra.Command, args []string) error {
			return render(args[0], name, g.namespace, project, stdout)
		},
	}
	cmd.Flags().StringVar(&name, "name", "", "object name (default: the project folder's name)")
	cmd.Flags().StringVar(&project, "project", "", "value of spec.project, e.g. the repository URL")
	return cmd
}

// render prints the ProjectMCP for a config file, or nothing when it is invalid.
func render(path, name, namespace, project string, stdout io.Writer) error {
	data, err := readConfig(path)
	if err != nil {
		return err
	}
	spec, err := config.Parse(path, data)
	if err != nil {
		return fmt.Errorf("invalid config:\n%v", err)
	}
	spec.Project = project
	// A rendered object is for a cluster, whose servers run on another machine: the project
	// folder is spec.project, and there is no user's home.
	if err := config.ExpandPlace(spec, config.Place{ProjectDir: project}); err != nil {
		return fmt.Errorf("invalid config:\n%v", err)
	}
	if name == "" {
		name = config.NameFor(path)
	}
	out, err := config.Render(spec, name, namespace)
	if err != nil {
		return err
	}
	_, err = stdout.Write(out)
	return err
}

// readConfig reads at most one byte more than the parser accepts, so a huge file (or a device)
// is refused without being read whole.
func readConfig(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, config.MaxFileSize+1))
}
