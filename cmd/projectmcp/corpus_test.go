package main

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/dsh-dev/projectmcp/internal/config"
)

// corpusDir holds the agent configs of real-world shapes (test/configs/README.md).
const corpusDir = "../../test/configs"

// Every file of the corpus adopts with exit 0: what adopt prints, the .dsh/mcp.json it
// writes and the client's file afterwards are the folder's want.* files, and what it wrote
// is a .dsh/mcp.json the reader accepts.
func TestAdoptCorpus(t *testing.T) {
	for _, c := range corpusCases(t) {
		t.Run(c.name, func(t *testing.T) {
			project := filepath.Join(t.TempDir(), "corpus")
			if err := os.CopyFS(project, os.DirFS(c.dir)); err != nil {
				t.Fatal(err)
			}
			home := corpusHome(t, c, project)
			stdout, _ := runCode(t, exitOK, "adopt", "--project", project, "--client", c.client, "--scope", c.scope,
				"--endpoint", "http://127.0.0.1:8484/projects/default/corpus/mcp", "--auth", "none", "--write")
			dsh, err := os.ReadFile(filepath.Join(project, config.DefaultPath))
			switch {
			case errors.Is(err, fs.ErrNotExist):
			case err != nil:
				t.Fatal(err)
			default:
				if _, err := config.Parse(config.DefaultPath, dsh); err != nil {
					t.Errorf("adopt wrote a .dsh/mcp.json the reader refuses: %v", err)
				}
			}
			report := strings.ReplaceAll(stdout, project, "$PROJECT")
			if home != "" {
				report = strings.ReplaceAll(report, home, "$HOME")
			}
			checkGolden(t, filepath.Join(c.dir, "want.report"), []byte(report), true)
			checkGolden(t, filepath.Join(c.dir, "want.dsh.json"), dsh, dsh != nil)
			client, err := os.ReadFile(filepath.Join(project, c.file))
			checkGolden(t, filepath.Join(c.dir, "want.client.json"), client, err == nil)
			if c.scope != "project" {
				after := strings.ReplaceAll(readFile(t, filepath.Join(home, claudeUserFile)), project, "$PROJECT")
				checkGolden(t, filepath.Join(c.dir, "want.claude.json"), []byte(after), true)
			}
		})
	}
}

// corpusHome makes the HOME a case of the local or user scope adopts from: the case's
// home/.claude.json, with $PROJECT standing for the project folder (Claude Code files a
// folder's local scope under its absolute path). It returns the HOME, or "" for the project
// scope.
func corpusHome(t *testing.T, c corpusCase, project string) string {
	t.Helper()
	if c.scope == "project" {
		return ""
	}
	home := t.TempDir()
	t.Setenv("HOME", home)
	src := readFile(t, filepath.Join(c.dir, "home", claudeUserFile))
	writeFile(t, filepath.Join(home, claudeUserFile), strings.ReplaceAll(src, "$PROJECT", project))
	return home
}

// corpusCase is one folder of the corpus; scope is Claude Code's scope it adopts from.
type corpusCase struct{ name, dir, client, file, scope string }

// corpusScopes are the corpus's folders of Claude Code's scopes kept in ~/.claude.json.
var corpusScopes = map[string]string{"claude-code-local": "local", "claude-code-user": "user"}

// corpusCases are the corpus's folders: test/configs/<client>/<case>.
func corpusCases(t *testing.T) []corpusCase {
	t.Helper()
	var cases []corpusCase
	for _, folder := range []string{"claude-code", "vscode", "cursor", "claude-code-local", "claude-code-user"} {
		client, scope := folder, "project"
		if s, ok := corpusScopes[folder]; ok {
			client, scope = "claude-code", s
		}
		format := mustClient(t, client)
		dirs, err := os.ReadDir(filepath.Join(corpusDir, folder))
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range dirs {
			dir := filepath.Join(corpusDir, folder, d.Name())
			cases = append(cases, corpusCase{name: folder + "/" + d.Name(), dir: dir, client: client, file: format.file, scope: scope})
		}
	}
	if len(cases) == 0 {
		t.Fatal("the corpus is empty")
	}
	return cases
}

// checkGolden compares got with the file want names, or with its absence when !exists;
// -update rewrites (or removes) the file instead.
func checkGolden(t *testing.T, want string, got []byte, exists bool) {
	t.Helper()
	if *update {
		if !exists {
			if err := os.Remove(want); err != nil && !errors.Is(err, fs.ErrNotExist) {
				t.Fatal(err)
			}
			return
		}
		if err := os.WriteFile(want, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	data, err := os.ReadFile(want)
	switch {
	case !exists && errors.Is(err, fs.ErrNotExist):
	case !exists:
		t.Errorf("%s exists, but adopt wrote no such file", want)
	case err != nil:
		t.Errorf("%v (-update writes it)", err)
	default:
		if d := cmp.Diff(string(data), string(got)); d != "" {
			t.Errorf("%s (-want +got):\n%s", want, d)
		}
	}
}
