package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/dsh-dev/projectmcp/internal/config"
)

// runRender prints the ProjectMCP for a config file. Bad input prints every problem to stderr
// and exits 1; nothing is printed to stdout, so a pipeline never applies half a manifest.
func runRender(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("render", flag.ContinueOnError)
	fs.SetOutput(stderr)
	name := fs.String("name", "", "object name (default: the project directory's name)")
	namespace := fs.String("namespace", "", "object namespace (default: none, the applier chooses)")
	project := fs.String("project", "", "value of spec.project, e.g. the repository URL")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: projectmcp render FILE [--name N] [--namespace NS] [--project P]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}
	path := fs.Arg(0)
	data, err := readConfig(path)
	if err != nil {
		fmt.Fprintf(stderr, "projectmcp render: %v\n", err)
		return 1
	}
	spec, err := config.Parse(path, data)
	if err != nil {
		fmt.Fprintf(stderr, "projectmcp render: invalid config:\n%v\n", err)
		return 1
	}
	spec.Project = *project
	if *name == "" {
		*name = config.NameFor(path)
	}
	out, err := config.Render(spec, *name, *namespace)
	if err != nil {
		fmt.Fprintf(stderr, "projectmcp render: %v\n", err)
		return 1
	}
	_, _ = stdout.Write(out)
	return 0
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
