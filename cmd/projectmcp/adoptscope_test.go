package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/config"
)

// claudeJSON is a ~/.claude.json as Claude Code writes it, with the project folder's local
// scope (two servers), another folder's, and the user scope (two servers) among its other keys.
func claudeJSON(project string) string {
	return `{
  "numStartups": 42,
  "theme": "dark",
  "projects": {
    "/elsewhere": {
      "allowedTools": [],
      "mcpServers": {
        "other": {"type": "stdio", "command": "other-server"}
      }
    },
    "` + project + `": {
      "allowedTools": ["Bash(ls:*)"],
      "mcpServers": {
        "memory": {
          "type": "stdio",
          "command": "npx",
          "args": ["-y", "@modelcontextprotocol/server-memory"],
          "env": {}
        },
        "notes": {
          "type": "http",
          "url": "https://notes.example.com/mcp"
        }
      },
      "hasTrustDialogAccepted": true
    }
  },
  "mcpServers": {
    "fetch": {
      "type": "stdio",
      "command": "uvx",
      "args": ["mcp-server-fetch"]
    },
    "search": {"type": "http", "url": "https://search.example.com/mcp"}
  },
  "userID": "abc"
}
`
}

// adopt --scope local and --scope user move the servers of Claude Code's scopes kept in
// ~/.claude.json into .dsh/mcp.json and point the project's .mcp.json at their endpoints under
// the same names; the local scope's entries are removed from ~/.claude.json (Claude Code
// prefers them to the project's), every other byte of it (another folder's servers, the other
// scope) and its mode kept. Each report line names the file and scope the entry came from.
func TestAdoptScopes(t *testing.T) {
	const endpoint = "http://127.0.0.1:8484/projects/default/corpus/mcp"
	for _, tc := range []struct {
		scope, moved, removed string // moved: the servers; removed: the text gone from ~/.claude.json
	}{
		{"local", "memory notes", `
        "memory": {
          "type": "stdio",
          "command": "npx",
          "args": ["-y", "@modelcontextprotocol/server-memory"],
          "env": {}
        },
        "notes": {
          "type": "http",
          "url": "https://notes.example.com/mcp"
        }
      `},
		// The user scope's entries stay: every other folder uses them, and the project's come first.
		{"user", "fetch search", ""},
	} {
		t.Run(tc.scope, func(t *testing.T) {
			home := t.TempDir()
			t.Setenv("HOME", home)
			project := filepath.Join(t.TempDir(), "corpus")
			if err := os.Mkdir(project, 0o755); err != nil {
				t.Fatal(err)
			}
			claude := filepath.Join(home, ".claude.json")
			before := claudeJSON(project)
			if err := os.WriteFile(claude, []byte(before), 0o600); err != nil {
				t.Fatal(err)
			}
			args := []string{"adopt", "--scope", tc.scope, "--project", project, "--endpoint", endpoint, "--auth", "none"}

			stdout, _ := runCode(t, exitOK, args...)
			if readFile(t, claude) != before || strings.Contains(stdout, "--- "+claude+"\n") != (tc.removed != "") {
				t.Fatalf("the dry run wrote ~/.claude.json, or does not show its change:\n%s", stdout)
			}

			stdout, _ = runCode(t, exitOK, append(args, "--write")...)
			from := claude + " (" + tc.scope + " scope)"
			spec, err := config.Parse(config.DefaultPath, []byte(readFile(t, filepath.Join(project, config.DefaultPath))))
			if err != nil {
				t.Fatal(err)
			}
			names, _ := entryNames(t, filepath.Join(project, ".mcp.json"), mustClient(t, "claude-code"))
			var got []string
			for _, s := range spec.Servers {
				got = append(got, s.Name)
			}
			for _, name := range strings.Fields(tc.moved) {
				want := from + `: removed "` + name + `": moved to .dsh/mcp.json, its entry in ` + filepath.Join(project, ".mcp.json") + " points at it\n"
				if tc.scope == "user" {
					want = from + `: kept "` + name + `": your other folders use it; in this one the entry in ` + filepath.Join(project, ".mcp.json") + " comes first\n"
				}
				if !strings.Contains(stdout, want) {
					t.Errorf("the report lacks %q:\n%s", want, stdout)
				}
				if !strings.Contains(stdout, v1alpha1.ServerEndpoint(endpoint, name)) {
					t.Errorf("the report does not name %s's endpoint:\n%s", name, stdout)
				}
			}
			if strings.Join(got, " ") != tc.moved || strings.Join(names, " ") != tc.moved {
				t.Errorf(".dsh/mcp.json has %v and .mcp.json %v, want %s in both", got, names, tc.moved)
			}
			want := before
			if tc.removed != "" {
				want = strings.Replace(before, tc.removed, "", 1)
			}
			if d := cmp.Diff(want, readFile(t, claude)); d != "" {
				t.Errorf("~/.claude.json (-want +got):\n%s", d)
			}
			if info, err := os.Stat(claude); err != nil || info.Mode().Perm() != 0o600 {
				t.Errorf("~/.claude.json's mode is not kept: %v %v", info.Mode(), err)
			}

			if tc.scope == "local" {
				stdout, _ = runCode(t, exitOK, append(args, "--write")...)
				if !strings.Contains(stdout, from+" defines no server that can move") {
					t.Errorf("adopting again:\n%s", stdout)
				}
			}
		})
	}
}

// A server the project's .mcp.json defines itself under the same name stays in ~/.claude.json,
// with a line saying to adopt the project's first; the others move.
func TestAdoptScopeClash(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	project := t.TempDir()
	claude := filepath.Join(home, ".claude.json")
	writeFile(t, claude, claudeJSON(project))
	writeFile(t, filepath.Join(project, ".mcp.json"), `{"mcpServers": {"notes": {"command": "my-notes"}}}`)
	stdout, _ := runCode(t, exitOK, "adopt", "--scope", "local", "--project", project, "--write",
		"--endpoint", "http://127.0.0.1:8484/projects/default/x/mcp", "--auth", "none")
	if !strings.Contains(stdout, claude+` (local scope): left "notes": `+filepath.Join(project, ".mcp.json")+" defines a server of that name too") {
		t.Errorf("the clash is not reported:\n%s", stdout)
	}
	if after := readFile(t, claude); !strings.Contains(after, `"notes"`) || strings.Contains(after, `"memory"`) {
		t.Errorf("~/.claude.json after:\n%s", after)
	}
}

// --scope is checked before any file is read.
func TestAdoptScopeUsage(t *testing.T) {
	for args, want := range map[string]string{
		"adopt --scope global":                `--scope must be project, local or user, not "global"`,
		"adopt --scope local --client cursor": "--scope local is Claude Code's: it goes with --client claude-code",
		"adopt --scope user --client vscode":  "--scope user is Claude Code's",
	} {
		_, stderr := runCode(t, exitUsage, strings.Fields(args)...)
		if !strings.Contains(stderr, want) {
			t.Errorf("%s: %q lacks %q", args, stderr, want)
		}
	}
}

// removeMembers takes out exactly the members named, each with the separator joining it to a
// kept one, whichever they are.
func TestRemoveMembers(t *testing.T) {
	for _, tc := range []struct{ src, drop, want string }{
		{`{"a": 1, "b": 2, "c": 3}`, "a", `{"b": 2, "c": 3}`},
		{`{"a": 1, "b": 2, "c": 3}`, "b", `{"a": 1, "c": 3}`},
		{`{"a": 1, "b": 2, "c": 3}`, "c", `{"a": 1, "b": 2}`},
		{`{"a": 1, "b": 2, "c": 3}`, "b c", `{"a": 1}`},
		{`{"a": 1, "b": 2, "c": 3}`, "a b", `{"c": 3}`},
		{`{"a": 1, "b": 2, "c": 3}`, "a c", `{"b": 2}`},
		{`{"a": 1, "b": 2, "c": 3}`, "a b c", `{}`},
		{"{\n  \"a\": {\"x\": [1]},\n  \"b\": 2\n}", "a", "{\n  \"b\": 2\n}"},
		{"{\n  \"a\": 1,\n  \"b\": {\n    \"y\": 2\n  }\n}", "b", "{\n  \"a\": 1\n}"},
		{`{"a": 1}`, "z", `{"a": 1}`},
		{`{}`, "a", `{}`},
	} {
		top, err := parseJSONC([]byte(tc.src))
		if err != nil {
			t.Fatal(err)
		}
		s := newSplicer([]byte(tc.src), top)
		drop := strings.Fields(tc.drop)
		s.removeMembers(top, func(k string) bool { return slices.Contains(drop, k) })
		if got := string(s.apply()); got != tc.want {
			t.Errorf("%s without %s = %s, want %s", tc.src, tc.drop, got, tc.want)
		}
	}
}
