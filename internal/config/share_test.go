package config

import (
	"strings"
	"testing"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
)

// Every scope reads into spec.servers[].share, an entry without the key leaves it unset (the
// controller then chooses), and render writes it back as the file said.
func TestParseShare(t *testing.T) {
	src := `{"mcpServers": {
  "a": {"command": "x", "share": "project"},
  "b": {"command": "x", "share": "principal"},
  "c": {"url": "https://h/mcp", "share": "session"},
  "d": {"command": "x", "share": "worktree"},
  "e": {"command": "x"}
}}`
	spec, err := Parse(file, []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]v1alpha1.Share{"a": v1alpha1.ShareProject, "b": v1alpha1.SharePrincipal, "c": v1alpha1.ShareSession, "d": v1alpha1.ShareWorktree, "e": ""}
	for _, s := range spec.Servers {
		if s.Share != want[s.Name] {
			t.Errorf("server %q: share %q, want %q", s.Name, s.Share, want[s.Name])
		}
	}
	out, err := Render(spec, "shop", "")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(out), "share: "); got != 4 {
		t.Fatalf("render wrote share %d times, want 4 (e has none):\n%s", got, out)
	}
	for _, line := range []string{"share: principal", "share: worktree"} {
		if !strings.Contains(string(out), line) {
			t.Errorf("render lacks %q:\n%s", line, out)
		}
	}
}

// A share the reader cannot carry is refused at its value, naming the value, the server and
// the scopes; the whole file is refused, so the last good spec keeps running.
func TestParseShareErrors(t *testing.T) {
	share := func(v string) string { return `{"mcpServers": {"pw": {"command": "x", "share": ` + v + `}}}` }
	cases := []struct{ name, src, at, want string }{
		{"unknown", share(`"everyone"`), `"everyone"`, `"share" in server "pw" is "everyone"; the scopes are "project", "principal", "session", "worktree"`},
		{"typo", share(`"sesion"`), `"sesion"`, `"share" in server "pw" is "sesion"; did you mean "session"?`},
		{"capitalised", share(`"Project"`), `"Project"`, `"share" in server "pw" is "Project"; did you mean "project"?`},
		{"not a string", share(`true`), `true`, `"share" in server "pw" must be a string, not a boolean`},
		{"empty", share(`""`), `""`, `"share" in server "pw" is ""; the scopes are`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec, err := Parse(file, []byte(tc.src))
			if spec != nil {
				t.Fatalf("a failed parse must return no spec, got %+v", spec)
			}
			line, col := position(t, tc.src, tc.at)
			assertError(t, err, line, col, tc.want)
		})
	}
}

// share "worktree" is refused, naming the server, where the servers do not run beside the
// sessions' folders (a mirror for a cluster, render); projectmcp dev's place keeps it.
func TestExpandPlaceWorktree(t *testing.T) {
	spec := func() *v1alpha1.ProjectMCPSpec {
		return &v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{
			{Name: "build", Share: v1alpha1.ShareWorktree, Stdio: &v1alpha1.StdioServer{Command: "make-mcp"}},
			{Name: "pw", Share: v1alpha1.ShareSession, Stdio: &v1alpha1.StdioServer{Command: "npx"}},
		}}
	}
	if err := ExpandPlace(spec(), Place{ProjectDir: "/src/shop", UserHome: "/home/ann", Local: true}); err != nil {
		t.Fatalf("dev's place refused worktree: %v", err)
	}
	err := ExpandPlace(spec(), Place{ProjectDir: "/src/shop"})
	want := `.dsh/mcp.json: server "build": share "worktree" is for projectmcp dev alone`
	if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), `"pw"`) {
		t.Fatalf("a cluster's place: error %v, want one saying %q and naming no other server", err, want)
	}
}
