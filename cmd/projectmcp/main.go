// Command projectmcp keeps every agent session of a project on the MCP servers its
// .dsh/mcp.json lists. Subcommands:
//
//	dev             run everything locally for a project folder (the default way to start)
//	controller      run the controller (reconciler and connection registry) against a cluster
//	mirror          apply project directories' .dsh/mcp.json to ProjectMCPs as they change
//	reconnect NAME  rebuild a project's connections now
//	status NAME     show a project's servers, connections, tools and sessions
//	render FILE     print the ProjectMCP manifest for a config file (for GitOps)
//	envtest         get kube-apiserver and etcd for dev and the tests, and print where they are
//
// Later subcommands run the controller, the local dev environment, the mirror and reconnects.
package main

import (
	"fmt"
	"io"
	"os"
)

// command is one subcommand: it gets its own arguments and returns the process exit code.
type command struct {
	summary string
	run     func(args []string, stdout, stderr io.Writer) int
}

var commands = map[string]command{
	"render":     {"print the ProjectMCP manifest for a .dsh/mcp.json", runRender},
	"controller": {"run the controller against the kubeconfig's cluster", runController},
	"reconnect":  {"rebuild a project's connections now (all, or --server S)", runReconnect},
	"mirror":     {"apply each --project's .dsh/mcp.json to a ProjectMCP as it changes", runMirror},
	"dev":        {"run everything locally for this folder: control plane, controller, gateway, mirror", runDev},
	"status":     {"show a project's servers, connections, tools and sessions", runStatus},
	"envtest":    {"get kube-apiserver and etcd (built once, then cached) and print where they are", runEnvtest},
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "projectmcp: unknown command %q\n", args[0])
		usage(stderr)
		return 2
	}
	return cmd.run(args[1:], stdout, stderr)
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: projectmcp COMMAND [flags]\n\ncommands:")
	for _, name := range []string{"dev", "controller", "mirror", "reconnect", "status", "render", "envtest"} {
		fmt.Fprintf(w, "  %-10s %s\n", name, commands[name].summary)
	}
}
