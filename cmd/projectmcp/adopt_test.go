package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/config"
)

// servedProject creates a ProjectMCP with the spec .dsh/mcp.json text gives, and writes the
// endpoint a controller would into its status (no controller runs: connect and adopt read
// status only). It returns the project's endpoint.
func servedProject(t *testing.T, name, dsh string) string {
	t.Helper()
	env := apiServer(t)
	spec, err := config.Parse(config.DefaultPath, []byte(dsh))
	if err != nil {
		t.Fatal(err)
	}
	obj := &v1alpha1.ProjectMCP{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: *spec}
	env.DeleteOnCleanup(t, obj)
	ctx := context.Background()
	if err := env.Client.Create(ctx, obj); err != nil {
		t.Fatal(err)
	}
	obj.Status.Endpoint = "http://127.0.0.1:8484/projects/default/" + name + "/mcp"
	if err := env.Client.Status().Update(ctx, obj); err != nil {
		t.Fatal(err)
	}
	return obj.Status.Endpoint
}

// entryNames are the names under a client file's container, in the file's order, and those
// of them that point at projectmcp.
func entryNames(t *testing.T, path string, format clientFormat) (all, atProjectmcp []string) {
	t.Helper()
	src := []byte(readFile(t, path))
	entries, err := clientEntries(path, format, src)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range entries {
		all = append(all, m.key)
		if pointsAtProjectmcp(m.value) {
			atProjectmcp = append(atProjectmcp, m.key)
		}
	}
	return all, atProjectmcp
}

// A direct Claude Code config, with comments, odd formatting, a ${VAR} secret and an entry
// that points at projectmcp already, adopted: the dry run writes nothing and shows both
// files' change; --write moves the servers into .dsh/mcp.json as written and points the
// same names at their endpoints, so mcp__<server>__<tool> names stay; again, nothing is left.
func TestAdoptClaudeCode(t *testing.T) {
	project := filepath.Join(t.TempDir(), "adoptee")
	client := filepath.Join(project, ".mcp.json")
	before := `{
  // the team's servers
  "mcpServers": {
    "github": { "command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"],
                "env": {"GITHUB_TOKEN": "${GITHUB_TOKEN}"} },
    "docs":   {"type": "http", "url": "https://${DOCS_HOST:-mcp.example.com}/mcp",
               "headers": {"Authorization": "Bearer ${DOCS_TOKEN}"}},
    "other":  {"type": "http", "url": "http://127.0.0.1:8484/projects/default/web/mcp"}
  },
  "theme":"dark"
}
`
	writeFile(t, client, before)
	direct := []string{"github", "docs"} // the servers the file defines directly, in its order
	kc := "--kubeconfig=" + apiServer(t).Kubeconfig
	// The ProjectMCP the mirror makes of a folder without .dsh/mcp.json: no servers yet.
	endpoint := servedProject(t, "adoptee", `{"mcpServers": {}}`)

	stdout, _ := runCode(t, exitOK, "adopt", "--project", project, "--auth", "none", kc)
	dsh := filepath.Join(project, ".dsh", "mcp.json")
	for _, want := range []string{
		"--- " + dsh + "\n+++ " + dsh + "\n@@ -0,0 +1,21 @@\n+{\n",
		"+        \"GITHUB_TOKEN\": \"${GITHUB_TOKEN}\"\n",
		"--- " + client + "\n+++ " + client + "\n",
		"-    \"github\": { \"command\": \"npx\", \"args\": [\"-y\", \"@modelcontextprotocol/server-github\"],\n",
		"+    \"github\": {\n+      \"type\": \"http\",\n+      \"url\": \"" + v1alpha1.ServerEndpoint(endpoint, "github") + "\"\n+    },\n",
		client + `: replaced "docs" (` + v1alpha1.ServerEndpoint(endpoint, "docs") + "): moved to .dsh/mcp.json\n",
		client + ": left \"other\": it points at projectmcp already\n",
		"Dry run: nothing written; --write applies it.\n",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the dry run lacks %q:\n%s", want, stdout)
		}
	}
	if _, err := os.Stat(dsh); !os.IsNotExist(err) || readFile(t, client) != before {
		t.Fatalf("the dry run wrote something: %v", err)
	}

	stdout, _ = runCode(t, exitOK, "adopt", "--project", project, "--auth", "none", "--write", kc)
	if strings.Contains(stdout, "Dry run") || strings.Contains(stdout, "+++") || !strings.Contains(stdout, dsh+": added \"github\"\n") {
		t.Fatalf("--write printed:\n%s", stdout)
	}
	wantDsh := `{
  "mcpServers": {
    "github": {
      "command": "npx",
      "args": [
        "-y",
        "@modelcontextprotocol/server-github"
      ],
      "env": {
        "GITHUB_TOKEN": "${GITHUB_TOKEN}"
      }
    },
    "docs": {
      "type": "http",
      "url": "https://${DOCS_HOST:-mcp.example.com}/mcp",
      "headers": {
        "Authorization": "Bearer ${DOCS_TOKEN}"
      }
    }
  }
}
`
	if d := cmp.Diff(wantDsh, readFile(t, dsh)); d != "" {
		t.Errorf(".dsh/mcp.json (-want +got):\n%s", d)
	}
	wantClient := `{
  // the team's servers
  "mcpServers": {
    "github": {
      "type": "http",
      "url": "` + v1alpha1.ServerEndpoint(endpoint, "github") + `"
    },
    "docs":   {
      "type": "http",
      "url": "` + v1alpha1.ServerEndpoint(endpoint, "docs") + `"
    },
    "other":  {"type": "http", "url": "http://127.0.0.1:8484/projects/default/web/mcp"}
  },
  "theme":"dark"
}
`
	if d := cmp.Diff(wantClient, readFile(t, client)); d != "" {
		t.Errorf("the client's file (-want +got):\n%s", d)
	}
	// The agent's entry names are the direct config's: its tool names do not change.
	all, served := entryNames(t, client, mustClient(t, "claude-code"))
	if !slices.Equal(all, []string{"github", "docs", "other"}) || !slices.Equal(served, append(direct, "other")) {
		t.Errorf("entries %v, at projectmcp %v; the direct config had %v", all, served, direct)
	}

	stdout, _ = runCode(t, exitOK, "adopt", "--project", project, "--write", kc)
	if !strings.Contains(stdout, "defines no server that can move: nothing to adopt") {
		t.Errorf("adopting again: %s", stdout)
	}
}

// Adopting into an existing .dsh/mcp.json: a server it has with the same definition is fine,
// one it has with another stays in the client's file, named with both files, and the others
// move.
func TestAdoptConflicts(t *testing.T) {
	project := filepath.Join(t.TempDir(), "conflicted")
	dsh := filepath.Join(project, ".dsh", "mcp.json")
	client := filepath.Join(project, ".mcp.json")
	dshBefore := "{\n  \"mcpServers\": {\n    \"memory\": {\"command\": \"npx\", \"args\": [\"-y\", \"@modelcontextprotocol/server-memory\"]}\n  }\n}\n"
	writeFile(t, dsh, dshBefore)
	same := `{"mcpServers": {"memory": {"args": ["-y", "@modelcontextprotocol/server-memory"], "command": "npx"}, "time": {"command": "uvx", "args": ["mcp-server-time"]}}}`
	writeFile(t, client, same)
	stdout, _ := runCode(t, exitOK, "adopt", "--project", project, "--endpoint", "http://127.0.0.1:8484/projects/default/conflicted/mcp", "--auth", "none", "--write")
	if !strings.Contains(stdout, dsh+`: unchanged "memory" (there already, the same)`) || !strings.Contains(stdout, dsh+`: added "time"`) {
		t.Fatalf("stdout: %s", stdout)
	}
	wantDsh := "{\n  \"mcpServers\": {\n    \"memory\": {\"command\": \"npx\", \"args\": [\"-y\", \"@modelcontextprotocol/server-memory\"]},\n" +
		"    \"time\": {\n      \"command\": \"uvx\",\n      \"args\": [\n        \"mcp-server-time\"\n      ]\n    }\n  }\n}\n"
	if d := cmp.Diff(wantDsh, readFile(t, dsh)); d != "" {
		t.Errorf(".dsh/mcp.json (-want +got):\n%s", d)
	}

	differs := `{"mcpServers": {"time": {"command": "uvx", "args": ["mcp-server-time", "--local-timezone=UTC"]}, "fetch": {"command": "uvx", "args": ["mcp-server-fetch"]}}}`
	writeFile(t, client, differs)
	stdout, _ = runCode(t, exitOK, "adopt", "--project", project, "--endpoint", "http://127.0.0.1:8484/projects/default/conflicted/mcp", "--auth", "none", "--write")
	if want := client + `: left "time": server "time" is defined differently in ` + client + ` and in ` + dsh; !strings.Contains(stdout, want) {
		t.Errorf("stdout lacks %q:\n%s", want, stdout)
	}
	if !strings.Contains(stdout, dsh+`: added "fetch"`) {
		t.Errorf("the entry without a conflict did not move:\n%s", stdout)
	}
	got := readFile(t, client)
	if !strings.Contains(got, `"time": {"command": "uvx", "args": ["mcp-server-time", "--local-timezone=UTC"]}`) || strings.Contains(got, "mcp-server-fetch") {
		t.Errorf("the client's file:\n%s", got)
	}
	if strings.Contains(readFile(t, dsh), "--local-timezone") {
		t.Error("the conflicting definition reached .dsh/mcp.json")
	}
}

// VS Code's file: ${env:VAR} moves as ${VAR}; ${input:id} (a secret VS Code prompts for)
// moves as ${ID}, never resolved. Comments and trailing commas stay.
func TestAdoptVSCode(t *testing.T) {
	project := filepath.Join(t.TempDir(), "vs")
	client := filepath.Join(project, ".vscode", "mcp.json")
	prompted := `{
	"inputs": [{"type": "promptString", "id": "gh", "password": true}],
	"servers": {
		"github": {"command": "npx", "env": {"GITHUB_TOKEN": "${input:gh}"}},
	},
}
`
	writeFile(t, client, prompted)
	endpoint := "http://127.0.0.1:8484/projects/default/vs/mcp"
	runCode(t, exitOK, "adopt", "--project", project, "--client", "vscode", "--endpoint", endpoint, "--auth", "none", "--write")
	if dsh := readFile(t, filepath.Join(project, ".dsh", "mcp.json")); !strings.Contains(dsh, `"GITHUB_TOKEN": "${GH}"`) {
		t.Errorf(".dsh/mcp.json:\n%s", dsh)
	}
	if err := os.RemoveAll(filepath.Join(project, ".dsh")); err != nil {
		t.Fatal(err)
	}

	fromEnv := `// workspace servers
{
	"servers": {
		/* stdio */
		"github": {"type": "stdio", "command": "npx", "env": {"GITHUB_TOKEN": "${env:GITHUB_TOKEN}"}}, // mine
	},
}
`
	writeFile(t, client, fromEnv)
	runCode(t, exitOK, "adopt", "--project", project, "--client", "vscode", "--endpoint", endpoint, "--auth", "none", "--write")
	dsh := readFile(t, filepath.Join(project, ".dsh", "mcp.json"))
	if !strings.Contains(dsh, `"GITHUB_TOKEN": "${GITHUB_TOKEN}"`) || strings.Contains(dsh, "env:") {
		t.Errorf(".dsh/mcp.json:\n%s", dsh)
	}
	want := `// workspace servers
{
	"servers": {
		/* stdio */
		"github": {
			"type": "http",
			"url": "` + v1alpha1.ServerEndpoint(endpoint, "github") + `"
		}, // mine
	},
}
`
	if d := cmp.Diff(want, readFile(t, client)); d != "" {
		t.Errorf(".vscode/mcp.json (-want +got):\n%s", d)
	}
}

// Before the project is served there is no endpoint: adopt writes .dsh/mcp.json, leaves the
// client's file and says so; once the ProjectMCP is there, connect --write replaces each
// direct entry by its server's endpoint without --force, since it is the same server.
func TestAdoptThenConnect(t *testing.T) {
	project := filepath.Join(t.TempDir(), "later")
	client := filepath.Join(project, ".mcp.json")
	before := `{"mcpServers": {"memory": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"]}}}`
	writeFile(t, client, before)
	kc := "--kubeconfig=" + apiServer(t).Kubeconfig
	stdout, _ := runCode(t, exitOK, "adopt", "--project", project, "--write", kc)
	if !strings.Contains(stdout, "projectmcp default/later does not exist yet") || !strings.Contains(stdout, `"projectmcp connect --write"`) || readFile(t, client) != before {
		t.Fatalf("stdout: %s", stdout)
	}
	endpoint := servedProject(t, "later", readFile(t, filepath.Join(project, ".dsh", "mcp.json")))
	stdout, _ = runCode(t, exitOK, "connect", "--project", project, "--auth", "none", "--write", kc)
	if want := client + `: replaced "memory" (` + v1alpha1.ServerEndpoint(endpoint, "memory") + "): it was the same server, defined directly\n" +
		client + `: added "projectmcp" (` + endpoint + "?except=memory)\n"; stdout != want {
		t.Fatalf("connect printed %q, want %q", stdout, want)
	}
}

// connect --write's replace rules on a real file: the same server defined directly, and an
// entry of an earlier connect through another address, give way; another entry stays; a
// disabled server gets none; the entry for the rest leaves out the servers with one of their
// own; an entry of a server's name that is something else is refused, naming it and the file,
// until --force.
func TestConnectReplaceRules(t *testing.T) {
	dshText := `{"mcpServers": {
		"memory": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"]},
		"docs": {"url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer ${DOCS_TOKEN}"}},
		"off": {"command": "npx", "disabled": true}}}`
	endpoint := servedProject(t, "rules", dshText)
	project := filepath.Join(t.TempDir(), "rules")
	client := filepath.Join(project, ".mcp.json")
	before := `{
    "mcpServers": {
        "memory": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"]},
        "docs": {"type": "http", "url": "http://10.0.0.7:8484/projects/default/rules/servers/docs/mcp"},
        "mine": {"command": "./tool"}
    }
}
`
	writeFile(t, client, before)
	kc := "--kubeconfig=" + apiServer(t).Kubeconfig
	stdout, _ := runCode(t, exitOK, "connect", "--project", project, "--auth", "none", "--write", kc)
	for _, want := range []string{
		client + `: replaced "docs" (` + v1alpha1.ServerEndpoint(endpoint, "docs") + "): it pointed at the same projectmcp endpoint\n",
		client + `: replaced "memory" (` + v1alpha1.ServerEndpoint(endpoint, "memory") + "): it was the same server, defined directly\n",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	want := `{
    "mcpServers": {
        "memory": {
            "type": "http",
            "url": "` + v1alpha1.ServerEndpoint(endpoint, "memory") + `"
        },
        "docs": {
            "type": "http",
            "url": "` + v1alpha1.ServerEndpoint(endpoint, "docs") + `"
        },
        "mine": {"command": "./tool"},
        "projectmcp": {
            "type": "http",
            "url": "` + endpoint + `?except=docs,memory"
        }
    }
}
`
	if d := cmp.Diff(want, readFile(t, client)); d != "" {
		t.Fatalf("(-want +got):\n%s", d)
	}
	if stdout, _ := runCode(t, exitOK, "connect", "--project", project, "--auth", "none", "--write", kc); strings.Count(stdout, "unchanged") != 3 {
		t.Errorf("again: %s", stdout)
	}

	// A "memory" that is another server: refused without --force, the file as it was.
	foreign := strings.Replace(before, "server-memory", "server-everything", 1)
	writeFile(t, client, foreign)
	_, stderr := runCode(t, exitFailure, "connect", "--project", project, "--auth", "none", "--write", kc)
	if !strings.Contains(stderr, client+": refusing to overwrite a different entry of the same name (--force replaces it): \"memory\" in \"mcpServers\" is") ||
		readFile(t, client) != foreign {
		t.Fatalf("stderr: %s", stderr)
	}
	stdout, _ = runCode(t, exitOK, "connect", "--project", project, "--auth", "none", "--write", "--force", kc)
	if !strings.Contains(stdout, `replaced "memory" (`+v1alpha1.ServerEndpoint(endpoint, "memory")+"): --force") || readFile(t, client) != want {
		t.Fatalf("--force: %s\n%s", stdout, readFile(t, client))
	}
}

// The replace decision, alone.
func TestDecideEntry(t *testing.T) {
	for _, c := range []struct {
		exists, equal bool
		ours          string
		force         bool
		outcome, why  string
		refused       bool
	}{
		{outcome: "added"},
		{exists: true, equal: true, outcome: "unchanged"},
		{exists: true, equal: true, force: true, outcome: "unchanged"},
		{exists: true, ours: "it pointed at the same projectmcp endpoint", outcome: "replaced", why: "it pointed at the same projectmcp endpoint"},
		{exists: true, ours: "mine", force: true, outcome: "replaced", why: "mine"},
		{exists: true, force: true, outcome: "replaced", why: "--force"},
		{exists: true, refused: true},
	} {
		outcome, why, refused := decideEntry(c.exists, c.equal, c.ours, c.force)
		if outcome != c.outcome || why != c.why || refused != c.refused {
			t.Errorf("%+v: got %q %q %v", c, outcome, why, refused)
		}
	}
}

// References as each client writes them, in .dsh/mcp.json's form.
func TestDshReferences(t *testing.T) {
	for _, c := range []struct{ client, in, want, err string }{
		{"claude-code", "Bearer ${TOKEN}", "Bearer ${TOKEN}", ""},
		{"claude-code", "${HOST:-localhost}:${PORT}", "${HOST:-localhost}:${PORT}", ""},
		{"claude-code", "${env:X}", "${env:X}", ""}, // Claude Code's own: the parser refuses it after
		{"vscode", "Bearer ${env:TOKEN}", "Bearer ${TOKEN}", ""},
		{"cursor", "${env:A}/${env:B}", "${A}/${B}", ""},
		{"vscode", "${input:tok}", "${TOK}", ""},
		{"vscode", "Bearer ${input:github-token}", "Bearer ${GITHUB_TOKEN}", ""},
		{"vscode", "${input:1st}", "${_1ST}", ""},
		{"cursor", "${workspaceFolder}/bin", "${PROJECT_DIR}/bin", ""},
		{"vscode", "--root=${workspaceFolder}", "--root=${PROJECT_DIR}", ""},
		{"cursor", "${userHome}/notes", "${USER_HOME}/notes", ""},
		{"claude-code", "${userHome}", "${userHome}", ""}, // Claude Code has no such variable: an environment variable's name
		{"vscode", "${workspaceFolderBasename}", "", `it uses ${workspaceFolderBasename} (a part of the folder vscode has open; .dsh/mcp.json has ${PROJECT_DIR} for the folder itself)`},
		{"vscode", "${file}", "", `it uses ${file} (a variable of vscode)`},
		{"vscode", "plain $HOME", "plain $HOME", ""},
	} {
		got, err := dshReferences(mustClient(t, c.client), "e", c.in)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s %q: error %v, want %q", c.client, c.in, err, c.err)
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("%s %q: %q %v, want %q", c.client, c.in, got, err, c.want)
		}
	}
}

func TestLineDiff(t *testing.T) {
	for name, c := range map[string]struct{ before, after, want string }{
		"equal":   {"a\nb\n", "a\nb\n", ""},
		"created": {"", "a\nb\n", "--- f\n+++ f\n@@ -0,0 +1,2 @@\n+a\n+b\n"},
		"changed": {"1\n2\n3\n4\n5\n6\n7\n8\n9\n", "1\n2\n3\n4\nfive\n6\n7\n8\n9\n",
			"--- f\n+++ f\n@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+five\n 6\n 7\n 8\n"},
		"two hunks": {"a\n1\n2\n3\n4\n5\n6\n7\n8\nb\n", "A\n1\n2\n3\n4\n5\n6\n7\n8\nB\n",
			"--- f\n+++ f\n@@ -1,4 +1,4 @@\n-a\n+A\n 1\n 2\n 3\n@@ -7,4 +7,4 @@\n 6\n 7\n 8\n-b\n+B\n"},
		"no final newline": {"a", "b", "--- f\n+++ f\n@@ -1,1 +1,1 @@\n-a\n+b\n"},
	} {
		if got := lineDiff("f", []byte(c.before), []byte(c.after)); got != c.want {
			t.Errorf("%s:\n%s\nwant:\n%s", name, got, c.want)
		}
	}
}

// connect --write after a server was added: the new server gets its own entry, and the entry
// for the rest, written before with the old list, gives way to one that leaves it out too, so
// no tool is offered twice.
func TestConnectMovesAnAddedServer(t *testing.T) {
	endpoint := servedProject(t, "moves", `{"mcpServers": {"a": {"command": "npx"}}}`)
	project := filepath.Join(t.TempDir(), "moves")
	client := filepath.Join(project, ".mcp.json")
	env := apiServer(t)
	kc := "--kubeconfig=" + env.Kubeconfig
	stdout, stderr := runCode(t, exitOK, "connect", "--project", project, "--auth", "none", "--write", kc)
	if want := client + `: created "projectmcp" (` + endpoint + "?except=a)\n"; !strings.HasSuffix(stdout, want) {
		t.Fatalf("first connect printed %q, want it to end in %q", stdout, want)
	}
	if want := `"projectmcp" is the project's endpoint without the servers that have an entry here`; !strings.Contains(stderr, want) {
		t.Errorf("connect does not say what the extra entry is: stderr lacks %q:\n%s", want, stderr)
	}
	ctx := context.Background()
	obj := &v1alpha1.ProjectMCP{}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: "default", Name: "moves"}, obj); err != nil {
		t.Fatal(err)
	}
	obj.Spec.Servers = append(obj.Spec.Servers, v1alpha1.MCPServer{Name: "b", Stdio: &v1alpha1.StdioServer{Command: "npx"}})
	if err := env.Client.Update(ctx, obj); err != nil {
		t.Fatal(err)
	}
	stdout, _ = runCode(t, exitOK, "connect", "--project", project, "--auth", "none", "--write", kc)
	for _, want := range []string{
		client + `: unchanged "a" (` + v1alpha1.ServerEndpoint(endpoint, "a") + ")\n",
		client + `: added "b" (` + v1alpha1.ServerEndpoint(endpoint, "b") + ")\n",
		client + `: replaced "projectmcp" (` + endpoint + "?except=a,b): it pointed at the same projectmcp endpoint\n",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("second connect lacks %q:\n%s", want, stdout)
		}
	}
}
