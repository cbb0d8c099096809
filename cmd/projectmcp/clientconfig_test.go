package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const testEndpoint = "http://127.0.0.1:8484/projects/default/shop/mcp"

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// writeOne merges one entry, as connect --aggregate does, and says what became of it.
func writeOne(path string, format clientFormat, name string, entry serverEntry, bearer, force bool) (string, error) {
	results, err := writeClientConfig(projectFile{shown: path, real: path}, format, []wantEntry{{name: name, entry: entry}}, bearer, force)
	if err != nil {
		return "", err
	}
	return results[0].outcome, nil
}

func mustClient(t *testing.T, name string) clientFormat {
	t.Helper()
	f, err := lookupClient(name)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// An existing Claude Code .mcp.json keeps its other entries, key order, indentation and the
// text around them byte for byte; the new entry lands last, indented like its siblings.
func TestWriteClaudeCodeConfigKeepsTheRest(t *testing.T) {
	path := filepath.Join(t.TempDir(), ".mcp.json")
	before := `{
    "mcpServers": {
        "github": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"],
                   "env": {"GITHUB_TOKEN": "${GITHUB_TOKEN}"}},
        "memory": {
            "command": "npx"
        }
    },
    "zzz": [1, 2.50, true, null]
}
`
	writeFile(t, path, before)
	f := mustClient(t, "claude-code")
	outcome, err := writeOne(path, f, "projectmcp", f.entry(testEndpoint, false), false, false)
	if err != nil || outcome != "added" {
		t.Fatalf("outcome %q, err %v", outcome, err)
	}
	want := `{
    "mcpServers": {
        "github": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"],
                   "env": {"GITHUB_TOKEN": "${GITHUB_TOKEN}"}},
        "memory": {
            "command": "npx"
        },
        "projectmcp": {
            "type": "http",
            "url": "` + testEndpoint + `"
        }
    },
    "zzz": [1, 2.50, true, null]
}
`
	if d := cmp.Diff(want, readFile(t, path)); d != "" {
		t.Fatalf("merged file (-want +got):\n%s", d)
	}
	if info, _ := os.Stat(path); info.Mode().Perm() != 0o600 {
		t.Errorf("the file's mode changed to %v", info.Mode().Perm())
	}

	// The same entry again: nothing to do, the file is not touched.
	outcome, err = writeOne(path, f, "projectmcp", f.entry(testEndpoint, false), false, false)
	if err != nil || outcome != "unchanged" {
		t.Fatalf("again: outcome %q, err %v", outcome, err)
	}

	// A different entry of the same name is refused, and the file stays as it was.
	other := f.entry("http://127.0.0.1:9999/projects/default/shop/mcp", false)
	_, err = writeOne(path, f, "projectmcp", other, false, false)
	if !errors.Is(err, errEntryExists) || !strings.Contains(err.Error(), `"projectmcp" in "mcpServers"`) || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("a conflicting entry must be refused naming it and --force: %v", err)
	}
	if got := readFile(t, path); got != want {
		t.Fatalf("a refused write changed the file:\n%s", got)
	}

	// --force replaces that entry alone.
	outcome, err = writeOne(path, f, "projectmcp", other, false, true)
	if err != nil || outcome != "replaced" {
		t.Fatalf("force: outcome %q, err %v", outcome, err)
	}
	if got := readFile(t, path); got != strings.Replace(want, "8484", "9999", 1) {
		t.Fatalf("after --force:\n%s", got)
	}
}

// VS Code's .vscode/mcp.json is JSON with comments: comments, trailing commas and the other
// servers survive; with a token-checking gateway the token prompt joins "inputs" once.
func TestWriteVSCodeConfigKeepsCommentsAndInputs(t *testing.T) {
	path := filepath.Join(t.TempDir(), ".vscode", "mcp.json")
	before := `// Servers for this workspace.
{
	"inputs": [
		{"type": "promptString", "id": "gh", "description": "GitHub token", "password": true},
	],
	"servers": {
		/* the docs server */
		"docs": {"type": "http", "url": "https://docs.example.com/mcp"}, // keep me
	},
}
`
	writeFile(t, path, before)
	f := mustClient(t, "vscode")
	outcome, err := writeOne(path, f, "projectmcp", f.entry(testEndpoint, true), true, false)
	if err != nil || outcome != "added" {
		t.Fatalf("outcome %q, err %v", outcome, err)
	}
	want := `// Servers for this workspace.
{
	"inputs": [
		{"type": "promptString", "id": "gh", "description": "GitHub token", "password": true},
		{
			"type": "promptString",
			"id": "projectmcp-token",
			"description": "Kubernetes bearer token for the projectmcp gateway (kubectl create token ...)",
			"password": true
		},
	],
	"servers": {
		/* the docs server */
		"docs": {"type": "http", "url": "https://docs.example.com/mcp"},
		"projectmcp": {
			"type": "http",
			"url": "` + testEndpoint + `",
			"headers": {
				"Authorization": "Bearer ${input:projectmcp-token}"
			}
		}, // keep me
	},
}
`
	if d := cmp.Diff(want, readFile(t, path)); d != "" {
		t.Fatalf("merged file (-want +got):\n%s", d)
	}
	// Again: the entry is equal and the input is there, so nothing changes.
	if outcome, err := writeOne(path, f, "projectmcp", f.entry(testEndpoint, true), true, false); err != nil || outcome != "unchanged" {
		t.Fatalf("again: outcome %q, err %v", outcome, err)
	}
	// Without a token the entry differs: refused, then replaced with force.
	if _, err := writeOne(path, f, "projectmcp", f.entry(testEndpoint, false), false, false); !errors.Is(err, errEntryExists) {
		t.Fatalf("want a refusal, got %v", err)
	}
	if _, err := writeOne(path, f, "projectmcp", f.entry(testEndpoint, false), false, true); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, path); !strings.Contains(got, "\t\t\"projectmcp\": {\n\t\t\t\"type\": \"http\",\n\t\t\t\"url\": \""+testEndpoint+"\"\n\t\t}, // keep me") {
		t.Fatalf("after --force:\n%s", got)
	}
}

// The shapes a config file can have around the entry.
func TestWriteClientConfigShapes(t *testing.T) {
	claude := mustClient(t, "claude-code")
	entry := claude.entry(testEndpoint, false)
	cases := map[string]struct{ before, want string }{
		"no servers key yet": {
			before: "{\n  \"theme\": \"dark\"\n}\n",
			want:   "{\n  \"theme\": \"dark\",\n  \"mcpServers\": {\n    \"projectmcp\": {\n      \"type\": \"http\",\n      \"url\": \"" + testEndpoint + "\"\n    }\n  }\n}\n",
		},
		"empty servers": {
			before: "{\n  \"mcpServers\": {}\n}",
			want:   "{\n  \"mcpServers\": {\n    \"projectmcp\": {\n      \"type\": \"http\",\n      \"url\": \"" + testEndpoint + "\"\n    }\n  }\n}",
		},
		"empty file object": {
			before: "{}",
			want:   "{\n  \"mcpServers\": {\n    \"projectmcp\": {\n      \"type\": \"http\",\n      \"url\": \"" + testEndpoint + "\"\n    }\n  }\n}",
		},
		"one line": {
			before: `{"mcpServers": {"a": {"command": "x"}}}`,
			want:   `{"mcpServers": {"a": {"command": "x"}, "projectmcp": {"type":"http","url":"` + testEndpoint + `"}}}`,
		},
		"byte order mark": {
			before: "\xef\xbb\xbf{\"mcpServers\": {}}",
			want:   "\xef\xbb\xbf{\"mcpServers\": {\n  \"projectmcp\": {\n    \"type\": \"http\",\n    \"url\": \"" + testEndpoint + "\"\n  }\n}}",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), ".mcp.json")
			writeFile(t, path, tc.before)
			if _, err := writeOne(path, claude, "projectmcp", entry, false, false); err != nil {
				t.Fatal(err)
			}
			got := readFile(t, path)
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Fatalf("(-want +got):\n%s", d)
			}
			var v map[string]any
			if err := json.Unmarshal([]byte(strings.TrimPrefix(got, "\xef\xbb\xbf")), &v); err != nil {
				t.Fatalf("the result is not JSON: %v", err)
			}
		})
	}

	// No file: created, with its folder, holding exactly what connect prints.
	dir := t.TempDir()
	vscode := mustClient(t, "vscode")
	path := filepath.Join(dir, ".vscode", "mcp.json")
	if outcome, err := writeOne(path, vscode, "projectmcp", vscode.entry(testEndpoint, true), true, false); err != nil || outcome != "created" {
		t.Fatalf("outcome %q, err %v", outcome, err)
	}
	printed, _ := vscode.snippet([]wantEntry{{name: "projectmcp", entry: vscode.entry(testEndpoint, true)}}, true)
	if got := readFile(t, path); got != string(printed)+"\n" {
		t.Fatalf("created file:\n%s\nprinted:\n%s", got, printed)
	}
}

// Files that cannot take an entry are refused with the file, line and column, unchanged.
func TestWriteClientConfigRefusesBadFiles(t *testing.T) {
	claude := mustClient(t, "claude-code")
	cases := map[string]struct{ content, want string }{
		"not JSON":         {"{\n  \"mcpServers\": {,\n}", `.mcp.json:2:18: expected a key in quotes or }`},
		"array":            {"[]", "the top level must be a JSON object"},
		"servers a string": {`{"mcpServers": "x"}`, `"mcpServers" must be an object`},
		"duplicate key":    {`{"a": 1, "a": 2}`, `1:10: duplicate key "a"`},
		"open comment":     {"{} /* x", "unterminated comment"},
		"trailing data":    {"{} x", `1:4: unexpected 'x' after the document`},
		"unterminated":     {`{"mcpServers": {"a": "b`, "unterminated string"},
		"bare word":        {`{"a": nope}`, `1:7: expected a value, found "n"`},
		"deep":             {strings.Repeat("[", 2000), "nested deeper than 1000 levels"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), ".mcp.json")
			writeFile(t, path, tc.content)
			_, err := writeOne(path, claude, "projectmcp", claude.entry(testEndpoint, false), false, false)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("want an error naming %s and %q, got %v", path, tc.want, err)
			}
			if got := readFile(t, path); got != tc.content {
				t.Fatalf("a refused file changed: %q", got)
			}
		})
	}
}

// The reader never panics, accepts whatever encoding/json accepts, and what it reads decodes
// to the same value.
func FuzzParseJSONC(f *testing.F) {
	for _, s := range []string{`{}`, `{"a": [1, {"b": null}], "c": "\u00e9\"x"}`, "// c\n{\"a\": 1,}", `[1,2,]`, `"s"`, `1e5`, `{"a"}`, "{/*", `{"a":-}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := parseJSONC([]byte(s))
		if !json.Valid([]byte(s)) {
			return
		}
		var std any
		_ = json.Unmarshal([]byte(s), &std)
		if err != nil {
			// encoding/json accepts duplicate keys; the reader refuses them on purpose.
			if strings.Contains(err.Error(), "duplicate key") {
				return
			}
			t.Fatalf("valid JSON refused: %v", err)
		}
		if d := cmp.Diff(std, v.decode([]byte(s))); d != "" {
			t.Fatalf("decoded differently (-encoding/json +reader):\n%s", d)
		}
	})
}

// A write syncs the finished temporary file before renaming it over the config, then the
// config's directory; a directory it creates is synced into its parent first. So after a crash
// the file holds the old content or the new.
func TestWriteClientConfigSyncs(t *testing.T) {
	type synced struct{ path, content string }
	var syncs []synced
	real := syncFile
	t.Cleanup(func() { syncFile = real })
	syncFile = func(f *os.File) error {
		s := synced{path: f.Name()}
		if info, err := f.Stat(); err == nil && !info.IsDir() {
			s.content = readFile(t, f.Name())
		}
		syncs = append(syncs, s)
		return real(f)
	}
	project := t.TempDir()
	path := filepath.Join(project, ".vscode", "mcp.json")
	f := mustClient(t, "vscode")
	check := func(what string, want ...string) {
		t.Helper()
		content := readFile(t, path)
		var got []string
		for _, s := range syncs {
			switch {
			case s.content == "":
				got = append(got, "dir "+s.path)
			case filepath.Dir(s.path) == filepath.Dir(path) && strings.HasPrefix(filepath.Base(s.path), ".mcp.json.") && s.content == content:
				got = append(got, "the finished temporary file")
			default:
				got = append(got, "file "+s.path)
			}
		}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("%s: syncs (-want +got):\n%s", what, d)
		}
		syncs = nil
	}
	if _, err := writeOne(path, f, "projectmcp", f.entry(testEndpoint, false), false, false); err != nil {
		t.Fatal(err)
	}
	check("a new file in a new directory", "dir "+project, "the finished temporary file", "dir "+filepath.Dir(path))
	if _, err := writeOne(path, f, "projectmcp", f.entry("http://127.0.0.1:9999/projects/default/shop/mcp", false), false, true); err != nil {
		t.Fatal(err)
	}
	check("an existing file replaced", "the finished temporary file", "dir "+filepath.Dir(path))
}
