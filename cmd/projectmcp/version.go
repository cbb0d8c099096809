package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"
	"text/tabwriter"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"
)

// versionInfo is what `projectmcp version` reports, read from the binary's build information
// and the MCP SDK, so it cannot drift from what was built.
type versionInfo struct {
	Version    string   // the module version ("(devel)" for a build from a checkout)
	Commit     string   // vcs.revision, with "(modified)" for a dirty tree; "unknown" without
	Go         string   // the Go version that built it
	Kubernetes string   // the Kubernetes release whose API it speaks, from k8s.io/api
	MCP        []string // the MCP protocol revisions the SDK speaks, newest first
	MCPSDK     string   // the MCP Go SDK's module version
}

// readVersion reads the running binary's build information (nil when it has none).
func readVersion(info *debug.BuildInfo) versionInfo {
	v := versionInfo{Version: "unknown", Commit: "unknown", Go: runtime.Version(), Kubernetes: "unknown",
		MCP: mcp.SupportedProtocolVersions(), MCPSDK: "unknown"}
	if info == nil {
		return v
	}
	v.Version = info.Main.Version
	var modified bool
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Commit = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if modified && v.Commit != "unknown" {
		v.Commit += " (modified)"
	}
	for _, d := range info.Deps {
		if d.Replace != nil {
			d = d.Replace
		}
		switch d.Path {
		case "k8s.io/api":
			// k8s.io/api v0.X.Y is released with Kubernetes v1.X.Y.
			v.Kubernetes = "v1." + strings.TrimPrefix(d.Version, "v0.") + " (k8s.io/api " + d.Version + ")"
		case "github.com/modelcontextprotocol/go-sdk":
			v.MCPSDK = d.Version
		}
	}
	return v
}

func newVersionCmd(stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, commit, Go version, and the Kubernetes and MCP versions it speaks",
		Long: `Prints what this binary is, from its build information: the module version, the commit it
was built from (when the build recorded it), the Go version, the Kubernetes API version it
was built against, and the MCP protocol revisions its SDK speaks, newest first.`,
		Example: `  projectmcp version`,
		RunE: func(*cobra.Command, []string) error {
			info, _ := debug.ReadBuildInfo()
			v := readVersion(info)
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "projectmcp:\t%s\n", v.Version)
			fmt.Fprintf(tw, "commit:\t%s\n", v.Commit)
			fmt.Fprintf(tw, "go:\t%s\n", v.Go)
			fmt.Fprintf(tw, "kubernetes:\t%s\n", v.Kubernetes)
			fmt.Fprintf(tw, "mcp protocol:\t%s (go-sdk %s)\n", strings.Join(v.MCP, ", "), v.MCPSDK)
			return tw.Flush()
		},
	}
}
