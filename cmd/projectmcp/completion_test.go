package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
)

// Each shell's script is printed; bash's is valid bash that registers the completion.
func TestCompletionScripts(t *testing.T) {
	for shell, marker := range map[string]string{
		"bash": "# bash completion V2 for projectmcp",
		"zsh":  "#compdef projectmcp",
		"fish": "# fish completion for projectmcp",
	} {
		stdout, _ := runCode(t, exitOK, "completion", shell)
		if !strings.HasPrefix(stdout, marker) {
			t.Errorf("%s: the script starts %q", shell, stdout[:min(len(stdout), 60)])
		}
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Fatal("bash is needed to check the bash script")
	}
	script, _ := runCode(t, exitOK, "completion", "bash")
	out, err := exec.Command("bash", "-c", script+"\ncomplete -p projectmcp").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "complete -o default -F __start_projectmcp projectmcp") {
		t.Fatalf("sourcing the bash script: %v\n%s", err, out)
	}
}

// completions lists what the shell would offer for a command line (cobra's __complete, which
// the scripts call), without the trailing directive line.
func completions(t *testing.T, args ...string) []string {
	t.Helper()
	stdout, _ := runCode(t, exitOK, append([]string{"__complete"}, args...)...)
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		if !strings.HasPrefix(line, ":") {
			out = append(out, strings.SplitN(line, "\t", 2)[0])
		}
	}
	return out
}

// Commands, flags, flag values and ProjectMCP names (from the cluster) complete.
func TestCompletionCandidates(t *testing.T) {
	if got := completions(t, "re"); !slices.Equal(got, []string{"reconnect", "render"}) {
		t.Errorf("commands starting with re: %v", got)
	}
	if got := completions(t, "connect", "--client", ""); !slices.Equal(got, clientNames()) {
		t.Errorf("--client values: %v", got)
	}
	if got := completions(t, "completion", ""); !slices.Equal(got, []string{"bash", "zsh", "fish"}) {
		t.Errorf("shells: %v", got)
	}
	if got := completions(t, "status", "--kube"); !slices.Contains(got, "--kubeconfig") {
		t.Errorf("flags: %v", got)
	}

	env := apiServer(t)
	ctx := context.Background()
	for _, name := range []string{"shop", "web"} {
		obj := &v1alpha1.ProjectMCP{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}
		env.DeleteOnCleanup(t, obj)
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	for _, cmd := range []string{"status", "reconnect", "connect"} {
		got := completions(t, cmd, "--kubeconfig", env.Kubeconfig, "")
		if !slices.Contains(got, "shop") || !slices.Contains(got, "web") {
			t.Errorf("%s NAME: %v", cmd, got)
		}
	}
}

// version reports what the binary was built from and what it speaks, read from the build.
func TestVersion(t *testing.T) {
	stdout, _ := runCode(t, exitOK, "version")
	fields := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		k, v, _ := strings.Cut(line, ":")
		fields[k] = strings.TrimSpace(v)
	}
	api, sdk := required(t, "k8s.io/api"), required(t, "github.com/modelcontextprotocol/go-sdk")
	want := map[string]string{
		"go":           runtime.Version(),
		"kubernetes":   "v1." + strings.TrimPrefix(api, "v0.") + " (k8s.io/api " + api + ")",
		"mcp protocol": strings.Join(mcp.SupportedProtocolVersions(), ", ") + " (go-sdk " + sdk + ")",
	}
	for k, v := range want {
		if fields[k] != v {
			t.Errorf("%s: %q, want %q\n%s", k, fields[k], v, stdout)
		}
	}
	if !strings.Contains(fields["mcp protocol"], "2025-11-25") || !strings.Contains(fields["mcp protocol"], "2026-07-28") {
		t.Errorf("the revisions the gateway serves must be listed: %s", fields["mcp protocol"])
	}
	if fields["projectmcp"] == "" || fields["commit"] == "" {
		t.Errorf("version or commit missing:\n%s", stdout)
	}
}

// required is the version go.mod requires of a module.
func required(t *testing.T, module string) string {
	t.Helper()
	data, err := os.ReadFile("../../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s+` + regexp.QuoteMeta(module) + ` (v\S+)`).FindStringSubmatch(string(data))
	if m == nil {
		t.Fatalf("go.mod does not require %s", module)
	}
	return m[1]
}

// The commit comes from the build's VCS stamp; a binary built without one says so.
func TestVersionCommit(t *testing.T) {
	info := &debug.BuildInfo{Main: debug.Module{Version: "v0.3.0"}, Settings: []debug.BuildSetting{
		{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "0123abcd"}, {Key: "vcs.modified", Value: "true"}},
		Deps: []*debug.Module{{Path: "k8s.io/api", Version: "v0.36.1", Replace: &debug.Module{Path: "k8s.io/api", Version: "v0.37.0"}}}}
	v := readVersion(info)
	if v.Version != "v0.3.0" || v.Commit != "0123abcd (modified)" || v.Kubernetes != "v1.37.0 (k8s.io/api v0.37.0)" || v.MCPSDK != "unknown" {
		t.Fatalf("%+v", v)
	}
	info.Settings = info.Settings[:2]
	if v := readVersion(info); v.Commit != "0123abcd" {
		t.Fatalf("a clean tree: %q", v.Commit)
	}
	if v := readVersion(nil); v.Version != "unknown" || v.Commit != "unknown" || len(v.MCP) == 0 {
		t.Fatalf("no build information: %+v", v)
	}
}

// -v and the zap flags decide what is logged: dev is quiet unless asked, -vv adds debug
// levels, an explicit --zap-log-level wins over -v.
func TestVerbosity(t *testing.T) {
	cases := []struct {
		args       []string
		quiet      bool
		info, dbg1 bool
	}{
		{nil, true, false, false},
		{[]string{"-v"}, true, true, false},
		{[]string{"-vv"}, true, true, true},
		{[]string{"--zap-log-level=info"}, true, true, false},
		{nil, false, true, false},
		{[]string{"-vv"}, false, true, true},
		{[]string{"-vvv", "--zap-log-level=error"}, false, false, false},
	}
	for _, c := range cases {
		var g globalFlags
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		g.bind(fs)
		f := defaultControllerFlags()
		f.bind(fs)
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		log := g.logger(&f.zap, fs, &buf, c.quiet)
		log.Info("info line")
		log.V(1).Info("debug line")
		if got := strings.Contains(buf.String(), "info line"); got != c.info {
			t.Errorf("%v quiet=%v: info logged %v, want %v", c.args, c.quiet, got, c.info)
		}
		if got := strings.Contains(buf.String(), "debug line"); got != c.dbg1 {
			t.Errorf("%v quiet=%v: V(1) logged %v, want %v", c.args, c.quiet, got, c.dbg1)
		}
	}
}
