// Command projectmcp keeps every agent session of a project on the MCP servers its
// .dsh/mcp.json lists. `projectmcp --help` lists the commands; docs/cli is the reference,
// generated from the command tree defined here (`make docs`).
package main

//go:generate go test -run ^TestCLIReference$ . -update

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
)

// Exit codes, the same for every command (the README and `projectmcp --help` state them).
const (
	exitOK      = 0 // success, including a clean stop on SIGINT or SIGTERM
	exitFailure = 1 // the command ran and failed
	exitUsage   = 2 // the command line is wrong: unknown command or flag, bad value, missing argument
)

// usageError is a mistake in the command line itself: it exits 2 with a pointer to --help.
type usageError struct{ err error }

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return &usageError{fmt.Errorf(format, args...)}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes one command line and returns the exit code. Each call builds a fresh command
// tree, so nothing parsed by one call leaks into the next (the tests call it many times).
func run(args []string, stdout, stderr io.Writer) int {
	root := newRootCmd(stdout, stderr)
	root.SetArgs(args)
	cmd, err := root.ExecuteC()
	if err == nil {
		return exitOK
	}
	if cmd == nil {
		cmd = root
	}
	fmt.Fprintf(stderr, "%s: %v\n", cmd.CommandPath(), err)
	var ue *usageError
	if errors.As(err, &ue) {
		use := cmd.UseLine()
		if cmd.HasAvailableSubCommands() {
			use = cmd.CommandPath() + " COMMAND [flags]"
		}
		fmt.Fprintf(stderr, "Usage: %s\nRun '%s --help' for more.\n", use, cmd.CommandPath())
		return exitUsage
	}
	return exitFailure
}

const rootLong = `projectmcp makes a project's .dsh/mcp.json the single source of truth for the MCP servers
every coding-agent session on that project uses: the file is mirrored into a ProjectMCP
custom resource, a controller keeps one live connection per project and server, and a gateway
serves them to the agents through one MCP endpoint per project.

Start with "projectmcp dev" in a project folder, then "projectmcp connect --write" to point
an agent at it.

Exit codes: 0 success (also after a clean stop on SIGINT or SIGTERM), 1 failure, 2 usage
error (unknown command or flag, bad flag value, missing or extra argument).`

func init() {
	// Help lists the commands in the order a user meets them, not alphabetically.
	cobra.EnableCommandSorting = false
}

// newRootCmd builds the command tree. Output goes to stdout and stderr as given.
func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	g := &globalFlags{}
	root := &cobra.Command{
		Use:   "projectmcp",
		Short: "One MCP endpoint per project, serving the servers its .dsh/mcp.json lists",
		Long:  rootLong,
		Example: `  # run everything locally for the project in this folder
  projectmcp dev

  # point Claude Code at the project's endpoint
  projectmcp connect --write`,
		// Errors and usage are printed once, by run, which also chooses the exit code.
		SilenceErrors: true,
		SilenceUsage:  true,
		// The commands' own help is enough; the completion command is ours (bash, zsh, fish).
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
		// A root with Args is never refused by cobra's own "unknown command" check, so the
		// check below can make it a usage error.
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageErrorf("unknown command %q%s", args[0], suggest(cmd, args[0]))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			cmd.SetOut(stderr)
			_ = cmd.Help()
			return usageErrorf("a command is required")
		},
	}
	root.SuggestionsMinimumDistance = 2
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err} })
	g.bind(root.PersistentFlags())
	root.AddCommand(
		newDevCmd(g, stdout, stderr),
		newConnectCmd(g, stdout, stderr),
		newAdoptCmd(g, stdout, stderr),
		newControllerCmd(g, stderr),
		newMirrorCmd(g, stderr),
		newStatusCmd(g, stdout),
		newTokenCmd(g, stdout, stderr),
		newReconnectCmd(g, stdout),
		newLoginCmd(g, stdout),
		newLogoutCmd(g, stdout),
		newRenderCmd(g, stdout),
		newEnvtestCmd(stdout, stderr),
		newVersionCmd(stdout),
		newCompletionCmd(root, stdout),
	)
	// A command that declares no arguments takes none: a stray word is a usage error naming it.
	visit(root, func(c *cobra.Command) {
		c.DisableAutoGenTag = true // the generated reference stays the same from day to day
		if c.Args == nil {
			c.Args = positional(nil)
		}
	})
	return root
}

// visit calls fn for c and every command below it.
func visit(c *cobra.Command, fn func(*cobra.Command)) {
	fn(c)
	for _, sub := range c.Commands() {
		visit(sub, fn)
	}
}

// suggest is cobra's "did you mean" for a mistyped command, as one clause.
func suggest(cmd *cobra.Command, typed string) string {
	if s := cmd.SuggestionsFor(typed); len(s) > 0 {
		return fmt.Sprintf(" (did you mean %q?)", s[0])
	}
	return ""
}

// positional checks a command's arguments: the required ones by name, then the optional ones.
// Too few names what is missing, too many names the first extra one.
func positional(required []string, optional ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < len(required) {
			return usageErrorf("missing argument %s", strings.Join(required[len(args):], " "))
		}
		if most := len(required) + len(optional); len(args) > most {
			if most == 0 {
				return usageErrorf("unexpected argument %q: %s takes none", args[most], cmd.Name())
			}
			return usageErrorf("unexpected argument %q: %s takes %s", args[most], cmd.Name(),
				strings.Join(append(append([]string{}, required...), optional...), " "))
		}
		return nil
	}
}
