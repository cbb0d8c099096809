package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/testutil"
	"github.com/dsh-dev/projectmcp/test/fixture"
)

// Every projectmcp command line the README and the pages of docs/ show runs as written: in
// bash, with `projectmcp` on PATH (this test binary), in a home folder whose ~/.kube/config
// reaches the test's API server, each checked for its exit code and a line of its output. A
// line of the docs no test runs, or a line here the docs no longer show, fails
// TestReadmeExamples.

// The quick start's lines, run by TestDevEndToEnd against `projectmcp dev` itself.
const (
	readmeDevLine     = "cd ~/src/shop && projectmcp dev   # serves the servers in ./.dsh/mcp.json"
	readmeConnectLine = "projectmcp connect --write"
)

// readmeExample is a command line in the docs and the output it shows after it (console
// blocks), if any.
type readmeExample struct {
	page   string // where it is shown first
	line   string
	output []string
}

// docExamples are the examples of the README and of the pages of docs/, in page order.
func docExamples(t *testing.T) []readmeExample {
	t.Helper()
	var out []readmeExample
	for _, p := range docPages(t) {
		for _, e := range readmeExamples(p.text) {
			e.page = p.name
			out = append(out, e)
		}
	}
	return out
}

// readmeExamples lists the lines of ```sh and ```console blocks (in a console block, those
// after the "$ " prompt) that run projectmcp: where it is the command, at the start, after
// "&&", ";" or "|", or inside "$(...)" or "<(...)".
func readmeExamples(text string) []readmeExample {
	var out []readmeExample
	var cur *readmeExample
	lang := ""
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if fence, ok := strings.CutPrefix(trimmed, "```"); ok {
			if lang == "" {
				lang = fence
				if lang == "" {
					lang = "text"
				}
			} else {
				lang = ""
			}
			cur = nil
			continue
		}
		if lang != "sh" && lang != "console" {
			continue
		}
		// In a console block only a line after the prompt is a command; the rest is output.
		cmd, prompted := strings.CutPrefix(trimmed, "$ ")
		isCommand := prompted || lang == "sh"
		switch {
		case isCommand && runsProjectmcp.MatchString(cmd):
			out = append(out, readmeExample{line: cmd})
			cur = &out[len(out)-1]
		case isCommand:
			cur = nil
		case cur != nil && lang == "console":
			cur.output = append(cur.output, line)
		}
	}
	return out
}

var runsProjectmcp = regexp.MustCompile(`(^|&&|;|\||\$\(|<\()\s*projectmcp(\s|$)`)

// readmeShell runs README lines as a user's shell would.
type readmeShell struct {
	home string
	env  []string
}

func newReadmeShell(t *testing.T, kubeconfig string) *readmeShell {
	t.Helper()
	home, bin := t.TempDir(), t.TempDir()
	wrapper := "#!/bin/sh\nexec " + shellQuote(os.Args[0]) + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(bin, "projectmcp"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	if kubeconfig != "" {
		data, err := os.ReadFile(kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(home, ".kube", "config"), string(data))
	}
	env := []string{"HOME=" + home, "PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH")}
	return &readmeShell{home: home, env: env}
}

// environ is the test's environment less what would point projectmcp elsewhere than ~/.kube.
func (s *readmeShell) environ() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KUBECONFIG=") && !strings.HasPrefix(kv, "KUBERNETES_SERVICE_HOST=") {
			out = append(out, kv)
		}
	}
	return append(append(out, mainEnvVar+"=1"), s.env...)
}

// run runs line in bash in dir (relative to the home folder) to its end.
func (s *readmeShell) run(t *testing.T, dir, line string) (int, string) {
	t.Helper()
	cmd := exec.Command("bash", "-c", line)
	cmd.Dir = filepath.Join(s.home, dir)
	cmd.Env = s.environ()
	out, err := cmd.CombinedOutput()
	if err != nil && cmd.ProcessState == nil {
		t.Fatalf("%s: %v", line, err)
	}
	return cmd.ProcessState.ExitCode(), string(out)
}

// requireFreePorts fails clearly when a default port the README's commands bind is taken.
func requireFreePorts(t *testing.T, addrs ...string) {
	t.Helper()
	for _, addr := range addrs {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("the README's commands bind %s as written, and it is in use: %v", addr, err)
		}
		ln.Close()
	}
}

func TestReadmeExamples(t *testing.T) {
	examples := docExamples(t)
	shown := map[string]readmeExample{}
	for _, e := range examples {
		if _, ok := shown[e.line]; !ok || len(e.output) > 0 {
			shown[e.line] = e // the one with output, where a line is shown twice
		}
	}
	ran := map[string]bool{readmeDevLine: true, readmeConnectLine: true} // TestDevEndToEnd
	example := func(line string) readmeExample {
		t.Helper()
		e, ok := shown[line]
		if !ok {
			t.Fatalf("neither README.md nor docs/ shows %q any more: update TestReadmeExamples", line)
		}
		ran[line] = true
		return e
	}
	for line := range ran {
		example(line)
	}

	env := apiServer(t)
	requireFreePorts(t, "127.0.0.1:8080", "127.0.0.1:8081", "127.0.0.1:8484")
	sh := newReadmeShell(t, env.Kubeconfig)
	writeFile(t, filepath.Join(sh.home, "src", "shop", ".dsh", "mcp.json"), fixtureConfig("memory", "everything"))
	writeFile(t, filepath.Join(sh.home, "src", "web", ".dsh", "mcp.json"), fixtureConfig("docs"))
	for _, name := range []string{"shop", "web"} {
		env.DeleteOnCleanup(t, &v1alpha1.ProjectMCP{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}})
	}
	ctx := context.Background()

	// The controller, as the docs start it, serves the rest.
	ctlLine := example("projectmcp controller --kubeconfig ~/.kube/config").line
	ctl := startShell(t, sh, "", ctlLine)
	ctl.waitFor(t, 60*time.Second, `"Sharing projects by bucket Leases"`)
	ctl.waitFor(t, 60*time.Second, `"Took a bucket"`)

	mirrorLine := example("projectmcp mirror --project ~/src/shop --project ~/src/web").line
	mirror := startShell(t, sh, "", mirrorLine)
	mirror.waitFor(t, 30*time.Second, filepath.Join(sh.home, "src", "web", ".dsh", "mcp.json"))
	testutil.EventuallyOK(t, 60*time.Second, "shop and web mirrored and Ready", func() error {
		for name, ready := range map[string]string{"shop": "2/2", "web": "1/1"} {
			obj := &v1alpha1.ProjectMCP{}
			if err := env.Client.Get(ctx, types.NamespacedName{Namespace: "default", Name: name}, obj); err != nil {
				return err
			}
			if obj.Status.ReadyServers != ready || obj.Status.Endpoint == "" {
				return fmt.Errorf("%s: %+v", name, obj.Status)
			}
		}
		return nil
	})
	if code := mirror.stop(t, syscall.SIGINT, 30*time.Second); code != exitOK {
		t.Fatalf("%s: exit %d after Ctrl-C, want 0", mirrorLine, code)
	}

	// A file of the corpus (test/configs), as teams commit them, adopts whole with the README's
	// adopt line: exit 0, each entry's line as the corpus has it (run in the folder, adopt names
	// the files relative to it).
	mixed := filepath.Join(corpusDir, "claude-code", "mixed")
	writeFile(t, filepath.Join(sh.home, "src", "corpus", ".mcp.json"), readFile(t, filepath.Join(mixed, ".mcp.json")))
	adoptLine := example("projectmcp adopt --write").line + " --endpoint http://127.0.0.1:8484/projects/default/corpus/mcp --auth none"
	code, out := sh.run(t, "src/corpus", adoptLine)
	for _, want := range strings.Split(strings.TrimSpace(readFile(t, filepath.Join(mixed, "want.report"))), "\n") {
		if want = strings.TrimPrefix(want, "$PROJECT/"); code != exitOK || !strings.Contains(out, want) {
			t.Errorf("%s on the corpus's mixed file: exit %d, want 0 and the line %q:\n%s", adoptLine, code, want, out)
		}
	}

	// Lines that run to their end: where, and a line their output must have. A console block's
	// first output line must be the command's first line too.
	// shop's agent config defines its servers directly, as .dsh/mcp.json does: adopt points
	// them at their endpoints.
	writeFile(t, filepath.Join(sh.home, "src", "shop", ".mcp.json"), fixtureConfig("memory", "everything"))
	for _, c := range []struct{ line, dir, want string }{
		{"cd ~/src/shop && projectmcp adopt   # prints the change of .dsh/mcp.json and .mcp.json; writes nothing", "", "Dry run: nothing written"},
		{"projectmcp adopt --write", "src/shop", `.mcp.json: replaced "memory" (http://127.0.0.1:8484/projects/default/shop/servers/memory/mcp): moved to .dsh/mcp.json`},
		{"projectmcp status shop", "", "SERVER"},
		{"projectmcp reconnect shop --server memory --wait 30s", "", "handled: "},
		{"projectmcp connect --client vscode --write", "src/shop", `.vscode/mcp.json: created "memory" (http://127.0.0.1:8484/projects/default/shop/servers/memory/mcp)`},
		{"projectmcp connect --client cursor --write", "src/shop", `.cursor/mcp.json: created "everything" (http://127.0.0.1:8484/projects/default/shop/servers/everything/mcp)`},
		{"projectmcp connect web --client json", "", `"url": "http://127.0.0.1:8484/projects/default/web/servers/docs/mcp"`},
		{"projectmcp render .dsh/mcp.json --namespace team-a > projectmcp.yaml", "src/shop", ""},
		{"source <(projectmcp completion bash)", "", ""},
		{"projectmcp version", "", "mcp protocol:"},
	} {
		e := example(c.line)
		code, out := sh.run(t, c.dir, e.line)
		if code != exitOK || !strings.Contains(out, c.want) {
			t.Errorf("%s: exit %d, want 0 and a line with %q:\n%s", e.line, code, c.want, out)
		}
		if len(e.output) > 0 && strings.Split(out, "\n")[0] != e.output[0] {
			t.Errorf("%s: %s shows the first line %q, the command printed %q", e.line, e.page, e.output[0], strings.Split(out, "\n")[0])
		}
	}
	// What the redirected and sourced lines did.
	if got := readFile(t, filepath.Join(sh.home, "src", "shop", "projectmcp.yaml")); !strings.Contains(got, "name: shop\n") || !strings.Contains(got, "namespace: team-a\n") {
		t.Errorf("render wrote:\n%s", got)
	}
	if code, out := sh.run(t, "", example("source <(projectmcp completion bash)").line+"\ncomplete -p projectmcp"); code != 0 || !strings.Contains(out, "__start_projectmcp") {
		t.Errorf("the completion was not registered: %d %s", code, out)
	}

	if code := ctl.stop(t, syscall.SIGTERM, 30*time.Second); code != exitOK {
		t.Fatalf("%s: exit %d after SIGTERM, want 0", ctlLine, code)
	}
	for _, e := range examples {
		if !ran[e.line] {
			t.Errorf("%s shows %q, which no test runs: add it to TestReadmeExamples", e.page, e.line)
		}
	}
}

// startShell starts a long-running README line in bash, in its own process group.
func startShell(t *testing.T, sh *readmeShell, dir, line string) *mainProcess {
	t.Helper()
	return startMainEnv(t, filepath.Join(sh.home, dir), sh.environ(), "bash", "-c", line)
}

// fixtureConfig is a .dsh/mcp.json whose servers are the project's fixture.
func fixtureConfig(servers ...string) string {
	var entries []string
	for _, s := range servers {
		entries = append(entries, fmt.Sprintf(`%q: {"command": %q, "args": ["--name", %q], "env": {%q: "1"}}`, s, os.Args[0], s, fixture.EnvVar))
	}
	return `{"mcpServers": {` + strings.Join(entries, ", ") + `}}`
}
