package main

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
)

// Where a server holds a credential written literally, named without its value.
func TestLiteralSecrets(t *testing.T) {
	stdio := func(args []string, env ...v1alpha1.NameValue) v1alpha1.MCPServer {
		return v1alpha1.MCPServer{Stdio: &v1alpha1.StdioServer{Command: "npx", Args: args, Env: env}}
	}
	remote := func(url string, headers ...v1alpha1.NameValue) v1alpha1.MCPServer {
		return v1alpha1.MCPServer{HTTP: &v1alpha1.HTTPServer{URL: url, Headers: headers}}
	}
	for name, c := range map[string]struct {
		server v1alpha1.MCPServer
		want   []string
	}{
		"references only": {stdio([]string{"--api-key=${KEY}", "--token", "${TOKEN}"}, v1alpha1.NameValue{Name: "GITHUB_TOKEN", Value: "${GITHUB_TOKEN}"}), nil},
		"plain args":      {stdio([]string{"-y", "@scope/server", "--port", "8080", "--keyboard-layout"}), nil},
		"flag=value":      {stdio([]string{"-y", "--api-key=sk-abc"}), []string{"args[1]"}},
		"flag=word":       {stdio([]string{"--password=hunter2"}), []string{"args[0] (--password)"}},
		"flag value":      {stdio([]string{"--token", "abc123", "--verbose"}), []string{"args[1] (after --token)"}},
		"flag then flag":  {stdio([]string{"--auth", "--verbose"}), nil},
		"token shape":     {stdio([]string{"ghp_0123456789abcdef"}), []string{"args[0]"}},
		"bearer arg":      {stdio([]string{"--header", "Authorization: x", "Bearer abc"}), []string{"args[2]"}},
		"env by name":     {stdio(nil, v1alpha1.NameValue{Name: "API_KEY", Value: "abc"}, v1alpha1.NameValue{Name: "DEBUG", Value: "1"}), []string{"env.API_KEY"}},
		"env by shape":    {stdio(nil, v1alpha1.NameValue{Name: "GH", Value: "github_pat_xyz"}), []string{"env.GH"}},
		"empty env":       {stdio(nil, v1alpha1.NameValue{Name: "API_KEY", Value: ""}), nil},
		"header":          {remote("https://h/mcp", v1alpha1.NameValue{Name: "Authorization", Value: "Bearer abc"}), []string{"headers.Authorization"}},
		"header ref":      {remote("https://h/mcp", v1alpha1.NameValue{Name: "Authorization", Value: "Bearer ${T}"}), nil},
		"query":           {remote("https://h/mcp?api_key=abc&team=x"), []string{"the url's query parameter api_key"}},
		"query ref":       {remote("https://h/mcp?token=${T}"), nil},
		"password":        {remote("https://u:pw@h/mcp"), []string{"the url's password"}},
	} {
		if got := literalSecrets(c.server); !slices.Equal(got, c.want) {
			t.Errorf("%s: %q, want %q", name, got, c.want)
		}
	}
}

// One file of every kind of entry: those that can move do, each other one stays in the
// client's file as it was, with one line saying why, and adopt exits 0. With
// --allow-literals, the entry holding a literal credential moves too.
func TestAdoptLeavesWhatCannotMove(t *testing.T) {
	project := filepath.Join(t.TempDir(), "mixed")
	client := filepath.Join(project, ".mcp.json")
	before := `{
  "mcpServers": {
    "memory": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"], "alwaysLoad": true, "timeout": 30000},
    "socket": {"type": "ws", "url": "ws://127.0.0.1:9000/mcp"},
    "keyed":  {"command": "npx", "args": ["-y", "some-server", "--api-key=sk-live-123"]},
    "bad__name": {"command": "npx"}
  }
}
`
	writeFile(t, client, before)
	endpoint := "http://127.0.0.1:8484/projects/default/mixed/mcp"
	stdout, _ := runCode(t, exitOK, "adopt", "--project", project, "--endpoint", endpoint, "--auth", "none", "--write")
	dsh := filepath.Join(project, ".dsh", "mcp.json")
	for _, want := range []string{
		dsh + `: added "memory"`,
		client + `: left "socket": .dsh/mcp.json would refuse it: server "socket" has type "ws" (WebSocket), which is not an MCP transport`,
		client + `: left "keyed": it holds what looks like a credential written literally (args[2])`,
		client + `: left "bad__name": .dsh/mcp.json would refuse it: server name "bad__name" contains "__"`,
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	got := readFile(t, client)
	for _, kept := range []string{`"socket": {"type": "ws", "url": "ws://127.0.0.1:9000/mcp"}`, `"--api-key=sk-live-123"]}`, `"bad__name": {"command": "npx"}`} {
		if !strings.Contains(got, kept) {
			t.Errorf("the client's file lost %s:\n%s", kept, got)
		}
	}
	if d := readFile(t, dsh); strings.Contains(d, "sk-live") || !strings.Contains(d, `"alwaysLoad": true`) {
		t.Errorf(".dsh/mcp.json:\n%s", d)
	}

	stdout, _ = runCode(t, exitOK, "adopt", "--project", project, "--endpoint", endpoint, "--auth", "none", "--write", "--allow-literals")
	if !strings.Contains(stdout, dsh+`: added "keyed"`) {
		t.Errorf("--allow-literals did not move the entry:\n%s", stdout)
	}
}

// An envFile's variables move as ${NAME} references and its values stay where they are;
// VS Code's dev is dropped with a note.
func TestAdoptEnvFile(t *testing.T) {
	project := filepath.Join(t.TempDir(), "envs")
	writeFile(t, filepath.Join(project, ".env"), "# local secrets\nexport GITHUB_TOKEN=ghp_secretvalue\nREGION = eu\n\nnot a line\n")
	writeFile(t, filepath.Join(project, ".vscode", "mcp.json"), `{
	"inputs": [],
	"servers": {
		"github": {"type": "stdio", "command": "npx", "envFile": "${workspaceFolder}/.env", "env": {"REGION": "us"},
			"dev": {"watch": "src/**"}, "sandboxEnabled": true, "sandbox": {"network": {"allowedDomains": ["api.github.com"]}}}
	}
}`)
	stdout, _ := runCode(t, exitOK, "adopt", "--project", project, "--client", "vscode", "--endpoint", "http://127.0.0.1:8484/projects/default/envs/mcp", "--auth", "none", "--write")
	dsh := readFile(t, filepath.Join(project, ".dsh", "mcp.json"))
	if strings.Contains(dsh, "ghp_") || !strings.Contains(dsh, `"GITHUB_TOKEN": "${GITHUB_TOKEN}"`) || !strings.Contains(dsh, `"REGION": "us"`) ||
		strings.Contains(dsh, "envFile") || strings.Contains(dsh, `"dev"`) || !strings.Contains(dsh, `"sandboxEnabled": true`) {
		t.Errorf(".dsh/mcp.json:\n%s", dsh)
	}
	for _, want := range []string{
		`note on "github": its envFile's variables (GITHUB_TOKEN, REGION) move as ${NAME} references`,
		"kubectl create secret generic NAME --from-env-file=" + filepath.Join(project, ".env"),
		`note on "github": its "dev" (VS Code's watch and debug of a server it runs) is dropped`,
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
}

// Claude Code acts on a server's alwaysLoad and timeout itself: connect writes them on that
// server's entry, as the spec carries them, and only for Claude Code, whose keys they are.
func TestConnectWritesClientHints(t *testing.T) {
	kc := "--kubeconfig=" + apiServer(t).Kubeconfig
	servedProject(t, "hinted", `{"mcpServers": {"m": {"command": "x", "alwaysLoad": true, "timeout": 5000}, "plain": {"command": "y"}}}`)
	stdout, _ := runCode(t, exitOK, "connect", "hinted", "--client", "claude-code", "--auth", "none", kc)
	if !strings.Contains(stdout, "/servers/m/mcp\",\n      \"alwaysLoad\": true,\n      \"timeout\": 5000\n") ||
		!strings.Contains(stdout, "/servers/plain/mcp\"\n") {
		t.Errorf("claude-code's entries:\n%s", stdout)
	}
	if stdout, _ := runCode(t, exitOK, "connect", "hinted", "--client", "vscode", "--auth", "none", kc); strings.Contains(stdout, "alwaysLoad") {
		t.Errorf("vscode's entries carry Claude Code's keys:\n%s", stdout)
	}
}
