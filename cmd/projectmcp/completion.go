package main

import (
	"io"

	"github.com/spf13/cobra"
)

// newCompletionCmd prints a shell's completion script. Commands, flags and flag values
// complete, and so do ProjectMCP names (read from the cluster as you type).
func newCompletionCmd(root *cobra.Command, stdout io.Writer) *cobra.Command {
	shells := map[string]func() error{
		"bash": func() error { return root.GenBashCompletionV2(stdout, true) },
		"zsh":  func() error { return root.GenZshCompletion(stdout) },
		"fish": func() error { return root.GenFishCompletion(stdout, true) },
	}
	return &cobra.Command{
		Use:   "completion bash|zsh|fish",
		Short: "Print the shell completion script for bash, zsh or fish",
		Long: `Prints a script that makes the shell complete projectmcp's commands, flags, flag values
and ProjectMCP names. Load it in the current shell, or install it where the shell looks.`,
		Example: `  # bash, this shell only (or save it in /etc/bash_completion.d/projectmcp)
  source <(projectmcp completion bash)

  # zsh: save it on $fpath
  projectmcp completion zsh > "${fpath[1]}/_projectmcp"

  # fish
  projectmcp completion fish > ~/.config/fish/completions/projectmcp.fish`,
		ValidArgs: []cobra.Completion{"bash", "zsh", "fish"},
		Args: func(cmd *cobra.Command, args []string) error {
			if err := positional([]string{"SHELL"})(cmd, args); err != nil {
				return err
			}
			if _, ok := shells[args[0]]; !ok {
				return usageErrorf("unknown shell %q: bash, zsh or fish", args[0])
			}
			return nil
		},
		RunE: func(_ *cobra.Command, args []string) error { return shells[args[0]]() },
	}
}
