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
			stdout, _ := runCode(t, exitOK, "adopt", "--project", project, "--client", c.client,
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
			checkGolden(t, filepath.Join(c.dir, "want.report"), []byte(report), true)
			checkGolden(t, filepath.Join(c.dir, "want.dsh.json"), dsh, dsh != nil)
			checkGolden(t, filepath.Join(c.dir, "want.client.json"), []byte(readFile(t, filepath.Join(project, c.file))), true)
		})
	}
}

type corpusCase struct{ name, dir, client, file string }

// corpusCases are the corpus's folders: test/configs/<client>/<case>.
func corpusCases(t *testing.T) []corpusCase {
	t.Helper()
	var cases []corpusCase
	for _, client := range []string{"claude-code", "vscode", "cursor"} {
		format := mustClient(t, client)
		dirs, err := os.ReadDir(filepath.Join(corpusDir, client))
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range dirs {
			dir := filepath.Join(corpusDir, client, d.Name())
			cases = append(cases, corpusCase{name: client + "/" + d.Name(), dir: dir, client: client, file: format.file})
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
