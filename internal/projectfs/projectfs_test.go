package projectfs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// Resolve on real files and symlinks: links that stay inside the project are followed to
// their target, links out of it (a directory, a file, through .., absolute) and dangling links
// are refused naming the link and where it points, and a path that does not exist yet
// resolves to where it will be created.
func TestResolve(t *testing.T) {
	base := t.TempDir()
	outside := filepath.Join(base, "home", ".config")
	project := filepath.Join(base, "repo")
	for _, d := range []string{outside, filepath.Join(project, "shared"), filepath.Join(project, ".dsh")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{filepath.Join(outside, "mcp.json"), filepath.Join(project, "shared", "mcp.json"), filepath.Join(project, ".dsh", "mcp.json")} {
		if err := os.WriteFile(f, []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		".vscode":           outside,                                // a directory outside, absolute
		".cursor":           filepath.Join("..", "home", ".config"), // a directory outside, relative
		".mcp.json":         filepath.Join("shared", "mcp.json"),    // a file inside
		"in":                "shared",                               // a directory inside
		"shared/up.json":    filepath.Join("..", "..", "home", ".config", "mcp.json"),
		"shared/gone.json":  "nowhere.json",
		"shared/loop.json":  "loop.json",
		"shared/chain.json": filepath.Join("..", ".mcp.json"), // inside, through another inside link
		"shared/escape":     filepath.Join("..", ".vscode"),   // inside name, outside after the next hop
		".dsh/alias.json":   "mcp.json",
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(project, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mkfifo(filepath.Join(project, "fifo.json"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The project reached through a symlink of its own, as git-sync publishes a checkout.
	projectLink := filepath.Join(base, "current")
	if err := os.Symlink("repo", projectLink); err != nil {
		t.Fatal(err)
	}
	real, err := filepath.EvalSymlinks(project)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		rel     string
		want    string // the resolved path, relative to the project
		wantErr string
		link    bool // the error is a *LinkError
	}{
		{rel: ".dsh/mcp.json", want: ".dsh/mcp.json"},
		{rel: ".mcp.json", want: "shared/mcp.json"},
		{rel: "in/mcp.json", want: "shared/mcp.json"},
		{rel: "shared/chain.json", want: "shared/mcp.json"},
		{rel: ".dsh/alias.json", want: ".dsh/mcp.json"},
		{rel: ".claude/settings.json", want: ".claude/settings.json"},
		{rel: "in/new/mcp.json", want: "shared/new/mcp.json"},
		{rel: ".vscode/mcp.json", wantErr: ".vscode is a symlink to " + outside + ", outside the project folder", link: true},
		{rel: ".cursor/mcp.json", wantErr: ".cursor is a symlink to ../home/.config (" + outside + "), outside the project folder", link: true},
		{rel: "shared/up.json", wantErr: "shared/up.json is a symlink to ../../home/.config/mcp.json (" + filepath.Join(outside, "mcp.json") + "), outside the project folder", link: true},
		{rel: "shared/escape/mcp.json", wantErr: "shared/escape is a symlink to ../.vscode (" + outside + "), outside the project folder", link: true},
		{rel: "shared/gone.json", wantErr: "shared/gone.json is a symlink to nowhere.json, which does not exist", link: true},
		{rel: "shared/loop.json", wantErr: "shared/loop.json is a symlink to loop.json: "},
		{rel: "fifo.json", wantErr: "fifo.json is not a regular file (p---------)"},
		{rel: "shared", wantErr: "shared is not a regular file (d---------)"},
		{rel: "../home/.config/mcp.json", wantErr: "../home/.config/mcp.json is not a path inside the project folder"},
		{rel: outside, wantErr: "is not a path inside the project folder"},
	} {
		for _, dir := range []string{project, projectLink} {
			got, err := Resolve(dir, c.rel)
			if c.wantErr != "" {
				var le *LinkError
				if err == nil || !strings.Contains(err.Error(), c.wantErr) || errors.As(err, &le) != c.link {
					t.Errorf("Resolve(%s, %s) = %q, %v; want an error with %q (a LinkError: %v)", dir, c.rel, got, err, c.wantErr, c.link)
				}
				continue
			}
			if want := filepath.Join(real, c.want); err != nil || got != want {
				t.Errorf("Resolve(%s, %s) = %q, %v; want %q", dir, c.rel, got, err, want)
			}
		}
	}
	// A project folder that does not exist yet: everything in it is still to be created.
	missing := filepath.Join(base, "new")
	if got, err := Resolve(missing, ".mcp.json"); err != nil || got != filepath.Join(missing, ".mcp.json") {
		t.Errorf("Resolve in a missing folder = %q, %v", got, err)
	}
}

func TestInside(t *testing.T) {
	for _, c := range []struct {
		root, path string
		want       bool
	}{
		{"/p", "/p", true},
		{"/p", "/p/a/b", true},
		{"/p", "/p/../p/a", true},
		{"/p", "/pa", false},
		{"/p", "/", false},
		{"/p", "/p/..", false},
		{"/p/", "/p/..x", true},
	} {
		if got := Inside(c.root, c.path); got != c.want {
			t.Errorf("Inside(%s, %s) = %v, want %v", c.root, c.path, got, c.want)
		}
	}
}
