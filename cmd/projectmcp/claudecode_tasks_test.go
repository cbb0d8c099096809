package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/testenv"
	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// The real Claude Code, which has no Tasks, calls a tool that runs only as a task (the npm
// server-everything's simulate-research-query, execution.taskSupport "required") through the
// per-server entry `connect --write` wrote: the gateway runs the task for it, and the model
// gets the task's report as the tool's result. Directly, Claude Code's call of it fails.
func TestClaudeCodeCallsATaskTool(t *testing.T) {
	env := apiServer(t)
	bin := claudeCodeBin(t)
	node, dir := testenv.NodeScripts(t)
	const name = "research"
	everything := filepath.Join(dir, "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js")
	startProject(t, env, name, []v1alpha1.MCPServer{{Name: "a", Stdio: &v1alpha1.StdioServer{Command: node, Args: []string{everything, "stdio"}}}})

	project := filepath.Join(t.TempDir(), name)
	runCode(t, exitOK, "connect", "--project", project, "--write", "--kubeconfig="+env.Kubeconfig)
	world := newClaudeWorld(t, env)
	world.model = testutil.NewMessagesAPI(t, researchModel)
	session := startClaude(t, bin, project, world.env(claudeHome(t, project, true)))
	session.turn(t, "call mcp__a__simulate-research-query with tide pools")
	got := toolResults(world.model)
	if len(got) != 1 || !strings.HasPrefix(got[0], "ok: ") || !strings.Contains(got[0], "# Research Report: tide pools") {
		t.Fatalf("the tool's results: %q, want the task's report", got)
	}
	session.end(t)
}

// researchModel is echoModel calling the research tool: its argument is the topic.
func researchModel(req *testutil.ModelRequest) testutil.ModelTurn {
	turn := echoModel(req)
	if text, ok := turn.ToolInput["text"]; ok {
		turn.ToolInput = map[string]any{"topic": text}
	}
	return turn
}
