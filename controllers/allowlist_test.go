package controllers_test

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/testenv/harness"
)

// withAllowlist runs the suite's controller with --allow-command patterns until the test ends,
// then the usual one again (no allowlist).
func withAllowlist(t *testing.T, patterns ...string) {
	t.Helper()
	restart := func(allow []string) {
		harness.Ctl.Stop()
		harness.Ctl = nil
		harness.Conn.AllowCommands = allow
		var err error
		if harness.Ctl, err = harness.StartController(); err != nil {
			t.Fatal(err)
		}
	}
	restart(patterns)
	t.Cleanup(func() { restart(nil) })
}

// With an allowlist, a server whose env would have the allowed command run or fetch code the
// allowlist never saw is refused: its status says Failed with a lastError naming the variable
// and why, and the project's other servers serve on; an edit that adds such a variable to a
// running server is reported the same way.
func TestAllowlistRefusedVariableReachesStatus(t *testing.T) {
	ns := harness.NewNamespace(t)
	withAllowlist(t, os.Args[0])
	bad := harness.FixtureServer(t, "bad")
	bad.Stdio.Env = append(bad.Stdio.Env, v1alpha1.NameValue{Name: "GIT_SSH_COMMAND", Value: "sh -c id"})
	key := harness.Create(t, ns, "allowlist", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "ok"), bad}})
	refused := func(server, name, why string) func(*v1alpha1.ProjectMCP) bool {
		return func(o *v1alpha1.ProjectMCP) bool {
			s, _ := harness.ServerStatusOf(o, server)
			return s.Phase == v1alpha1.PhaseFailed && strings.Contains(s.LastError, `"`+name+`" is not allowed with --allow-command`) && strings.Contains(s.LastError, why)
		}
	}
	harness.WaitStatus(t, key, 30*time.Second, "bad refused naming GIT_SSH_COMMAND, ok Ready", func(o *v1alpha1.ProjectMCP) bool {
		return refused("bad", "GIT_SSH_COMMAND", "git runs the commands")(o) && harness.PhaseIs("ok", v1alpha1.PhaseReady)(o)
	})
	ag := harness.ConnectAgent(t, key, "2025-11-25", nil)
	if names := ag.Tools(t); !slices.Contains(names, "ok__echo") || slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, "bad__") }) {
		t.Fatalf("the session's tools: %v, want ok's and none of bad's", names)
	}
	if got := harness.Text(ag.Call(t, "ok__echo", map[string]any{"text": "served"})); got != "served" {
		t.Fatalf("ok__echo: %q", got)
	}

	harness.Update(t, key, func(o *v1alpha1.ProjectMCP) {
		for i := range o.Spec.Servers {
			if o.Spec.Servers[i].Name == "ok" {
				o.Spec.Servers[i].Stdio.Env = append(o.Spec.Servers[i].Stdio.Env, v1alpha1.NameValue{Name: "npm_config_registry", Value: "https://npm.example.com/"})
			}
		}
	})
	harness.WaitStatus(t, key, 30*time.Second, "ok refused naming npm_config_registry", refused("ok", "npm_config_registry", "another index"))
}
