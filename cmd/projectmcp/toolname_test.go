package main

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/dsh-dev/projectmcp/internal/toolname"
)

// A --max-tool-name no name can be shortened to, or one over the specification's limit, is
// refused by both commands that take it before anything starts, naming the flag.
func TestMaxToolNameRefused(t *testing.T) {
	for _, command := range [][]string{{"controller", "--kubeconfig", "/nonexistent"}, {"dev"}} {
		for _, v := range []string{"0", "27", "129"} {
			cmd := exec.Command(os.Args[0], append(command, "--max-tool-name", v)...)
			cmd.Env = append(os.Environ(), mainEnvVar+"=1")
			out, err := cmd.CombinedOutput()
			want := "--max-tool-name must be within 28..128, not " + v
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), want) {
				t.Errorf("%s --max-tool-name %s: %v, output lacks %q:\n%s", command[0], v, err, want, out)
			}
		}
	}
}

// The default budget is what OpenAI's 64 characters leave after the prefix Claude Code puts
// before the tools of the entry connect writes, the longest prefix the README names.
func TestDefaultToolNameBudget(t *testing.T) {
	if want := 64 - len("mcp__"+defaultEntryName+"__"); toolname.DefaultBudget != want {
		t.Fatalf("toolname.DefaultBudget is %d; connect's entry %q leaves %d", toolname.DefaultBudget, defaultEntryName, want)
	}
}
