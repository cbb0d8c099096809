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
