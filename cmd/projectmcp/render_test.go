package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite config/samples/mcp_v1alpha1_projectmcp.yaml from the example")

const (
	example = "../../examples/demo/.dsh/mcp.json"
	sample  = "../../config/samples/mcp_v1alpha1_projectmcp.yaml"
)

// The bundled sample is the rendering of the bundled example; the envtest suite checks that
// the API server accepts the sample, so together they show render's output is admissible.
func TestRenderExampleMatchesSample(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"render", example}, &out, &errb); code != 0 {
		t.Fatalf("render exited %d: %s", code, errb.String())
	}
	if *update {
		if err := os.WriteFile(sample, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(sample)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(string(want), out.String()); d != "" {
		t.Fatalf("render output differs from %s (run go test ./cmd/projectmcp -run Render -update):\n%s", sample, d)
	}
	if !strings.Contains(out.String(), "name: demo\n") {
		t.Fatalf("the name must come from the project directory:\n%s", out.String())
	}
}

// Flags go anywhere on the line, before or after FILE, in either spelling.
func TestRenderFlags(t *testing.T) {
	for _, args := range [][]string{
		{"render", "--name", "web", "--namespace", "team-a", "--project", "https://git.example/web", example},
		{"render", example, "--name", "web", "-n", "team-a", "--project=https://git.example/web"},
		{"-n", "team-a", "render", "--name=web", example, "--project", "https://git.example/web"},
	} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 0 {
			t.Fatalf("%q exited %d: %s", args, code, errb.String())
		}
		for _, want := range []string{"name: web\n", "namespace: team-a\n", "project: https://git.example/web\n"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%q: output lacks %q:\n%s", args, want, out.String())
			}
		}
	}
}

func TestRenderBadInput(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "mcp.json")
	if err := os.WriteFile(bad, []byte("{\"mcpServers\": {\"github\": {\n  \"comand\": \"npx\"}}}"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		args []string
		code int
		want string
	}{
		"invalid config": {[]string{"render", bad}, 1, bad + `:2:3: unknown key "comand" in server "github"; did you mean "command"?`},
		"missing file":   {[]string{"render", filepath.Join(dir, "nope.json")}, 1, "no such file or directory"},
		"bad name":       {[]string{"render", "--name", "Not_Valid", example}, 1, `invalid name "Not_Valid"`},
		"bad namespace":  {[]string{"render", "--namespace", "a.b", example}, 1, `invalid namespace "a.b"`},
		"no file":        {[]string{"render"}, 2, "projectmcp render: missing argument FILE\nUsage: projectmcp render FILE [flags]"},
		"two files":      {[]string{"render", example, example}, 2, `projectmcp render: unexpected argument "` + example + `": render takes FILE`},
		"unknown flag":   {[]string{"render", example, "--nmae", "x"}, 2, "projectmcp render: unknown flag: --nmae\n"}, //nolint:misspell // a misspelt flag is the case under test
		"no flag value":  {[]string{"render", example, "--name"}, 2, "projectmcp render: flag needs an argument: --name\n"},
		"unknown cmd":    {[]string{"rendr"}, 2, `projectmcp: unknown command "rendr" (did you mean "render"?)`},
		"no cmd":         {nil, 2, "projectmcp: a command is required"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := run(tc.args, &out, &errb); code != tc.code {
				t.Fatalf("exit code %d, want %d; stderr: %s", code, tc.code, errb.String())
			}
			if out.Len() != 0 {
				t.Fatalf("nothing may reach stdout on failure, got:\n%s", out.String())
			}
			if !strings.Contains(errb.String(), tc.want) {
				t.Fatalf("stderr lacks %q:\n%s", tc.want, errb.String())
			}
		})
	}
}

// A rendered object is for a cluster: ${PROJECT_DIR} becomes --project (spec.project), and a
// file naming ${USER_HOME}, which no server there has, is refused naming the server and field,
// as is a server shared per worktree (the sessions' folders are on other machines).
func TestRenderPlaceVariables(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "mcp.json")
	writeFile(t, file, `{"mcpServers": {"fs": {"command": "fs-server", "args": ["${PROJECT_DIR}/docs"]}}}`)
	stdout, _ := runCode(t, 0, "render", file, "--project", "/srv/shop")
	if !strings.Contains(stdout, "- /srv/shop/docs\n") {
		t.Errorf("${PROJECT_DIR} is not spec.project:\n%s", stdout)
	}
	_, stderr := runCode(t, 1, "render", file)
	if !strings.Contains(stderr, `server "fs": its args[0] refers to ${PROJECT_DIR}, the project folder`) {
		t.Errorf("without --project: %s", stderr)
	}
	writeFile(t, file, `{"mcpServers": {"notes": {"command": "notes", "args": ["${USER_HOME}/notes"]}}}`)
	_, stderr = runCode(t, 1, "render", file, "--project", "/srv/shop")
	if !strings.Contains(stderr, `server "notes": its args[0] refers to ${USER_HOME}, the user's home, which only projectmcp dev's servers have`) {
		t.Errorf("${USER_HOME}: %s", stderr)
	}
	writeFile(t, file, `{"mcpServers": {"build": {"command": "make-mcp", "share": "worktree"}, "pw": {"command": "pw", "share": "session"}}}`)
	_, stderr = runCode(t, 1, "render", file, "--project", "/srv/shop")
	if !strings.Contains(stderr, `server "build": share "worktree" is for projectmcp dev alone`) {
		t.Errorf("share worktree: %s", stderr)
	}
}
