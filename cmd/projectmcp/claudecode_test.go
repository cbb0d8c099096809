package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/testenv"
	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// claudeCodeBin is the real Claude Code from test/node's package-lock.json, installed by npm.
func claudeCodeBin(t *testing.T) string {
	t.Helper()
	_, dir := testenv.NodeScripts(t)
	bin := filepath.Join(dir, "node_modules", ".bin", "claude")
	if out, err := exec.Command(bin, "--version").CombinedOutput(); err != nil {
		t.Fatalf("%s --version: %v: %s", bin, err, out)
	}
	return bin
}

// helperOnPath puts `projectmcp` (this test binary, see TestMain) on a PATH of its own, as an
// install puts it on a user's, and returns that PATH and the file each run appends the
// endpoint it was run for to.
func helperOnPath(t *testing.T) (path, runs string) {
	t.Helper()
	dir := t.TempDir()
	runs = filepath.Join(dir, "runs")
	script := fmt.Sprintf("#!/bin/sh\necho \"$CLAUDE_CODE_MCP_SERVER_URL\" >> %s\n%s=1 exec %s \"$@\"\n", runs, mainEnvVar, os.Args[0])
	if err := os.WriteFile(filepath.Join(dir, "projectmcp"), []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	return dir + ":/usr/bin:/bin", runs
}

// startProject creates a ProjectMCP of the servers given in namespace default and runs a
// controller for it (its gateway on a loopback port, with the flags given), and returns the
// ProjectMCP once every server is ready.
func startProject(t *testing.T, env *testenv.Env, name string, servers []v1alpha1.MCPServer, gatewayFlags ...string) *v1alpha1.ProjectMCP {
	t.Helper()
	obj := &v1alpha1.ProjectMCP{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: v1alpha1.ProjectMCPSpec{Servers: servers}}
	env.DeleteOnCleanup(t, obj)
	if err := env.Client.Create(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
	startMain(t, t.TempDir(), nil, append([]string{os.Args[0], "controller", "--kubeconfig=" + env.Kubeconfig,
		"--gateway-bind-address", "127.0.0.1:0", "--leader-elect=false", "--metrics-bind-address", "0", "--health-probe-bind-address", "0"},
		gatewayFlags...)...)
	waitReady(t, env, obj)
	return obj
}

// waitReady waits until every server of the ProjectMCP is ready, and reads it into obj.
func waitReady(t *testing.T, env *testenv.Env, obj *v1alpha1.ProjectMCP) {
	t.Helper()
	testutil.EventuallyOK(t, 60*time.Second, "every server of "+obj.Name+" ready", func() error {
		if err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		if want := fmt.Sprintf("%d/%d", len(obj.Spec.Servers), len(obj.Spec.Servers)); obj.Status.Endpoint != "" && obj.Status.ReadyServers == want {
			return nil
		}
		return fmt.Errorf("status %+v", obj.Status)
	})
}

// claudeWorld is what Claude Code runs in: `projectmcp` on its PATH, the user's kubeconfig, a
// cache and a TMPDIR of the test's, and a scripted model.
type claudeWorld struct {
	path, runs, cache, tmp, kubeconfig string
	model                              *testutil.MessagesAPI
}

func newClaudeWorld(t *testing.T, env *testenv.Env) *claudeWorld {
	t.Helper()
	c := &claudeWorld{cache: t.TempDir(), tmp: t.TempDir(), kubeconfig: env.Kubeconfig, model: testutil.NewMessagesAPI(t, echoModel)}
	c.path, c.runs = helperOnPath(t)
	return c
}

// env is Claude Code's whole environment with home as HOME: nothing of the test's own.
func (c *claudeWorld) env(home string) []string {
	return []string{"PATH=" + c.path, "HOME=" + home, "TMPDIR=" + c.tmp, "KUBECONFIG=" + c.kubeconfig, "XDG_CACHE_HOME=" + c.cache,
		"ANTHROPIC_BASE_URL=" + c.model.URL, "ANTHROPIC_API_KEY=test",
		// MCP tools offered with the others, not behind a search tool the scripted model does not use.
		"ENABLE_TOOL_SEARCH=false",
		"DISABLE_AUTOUPDATER=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_TELEMETRY=1", "DISABLE_ERROR_REPORTING=1"}
}

// claudeHome is a HOME for Claude Code, in which the user has trusted the project folder (as
// answering Claude Code's trust dialog once does) when trusted is set.
func claudeHome(t *testing.T, project string, trusted bool) string {
	t.Helper()
	home := t.TempDir()
	state := map[string]any{"hasCompletedOnboarding": true}
	if trusted {
		state["projects"] = map[string]any{project: map[string]any{"hasTrustDialogAccepted": true}}
	}
	b, err := json.Marshal(state)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".claude.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	return home
}

// echoModel is the scripted model: asked "call TOOL with TEXT", it calls that tool with
// {"text": TEXT}, and once it has the tool's result it answers "done". Any other request
// (Claude Code's own side questions) gets a short text.
func echoModel(req *testutil.ModelRequest) testutil.ModelTurn {
	last := req.Last()
	if last.Role != "user" {
		return testutil.ModelTurn{Text: "ok"}
	}
	for _, b := range last.Blocks() {
		if b.Type == "tool_result" {
			return testutil.ModelTurn{Text: "done"}
		}
	}
	for _, b := range last.Blocks() {
		tool, text, ok := strings.Cut(strings.TrimPrefix(b.Text, "call "), " with ")
		if b.Type == "text" && strings.HasPrefix(b.Text, "call ") && ok {
			if !req.Offers(tool) {
				return testutil.ModelTurn{Text: "no tool " + tool}
			}
			return testutil.ModelTurn{ToolName: tool, ToolInput: map[string]any{"text": text}}
		}
	}
	return testutil.ModelTurn{Text: "ok"}
}

// claudeSession is one Claude Code session in print mode, fed user turns on its standard
// input as stream-json.
type claudeSession struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    testutil.SyncBuffer
	errs   testutil.SyncBuffer
	exited chan struct{}
	turns  int
	debug  string // Claude Code's debug log
}

func startClaude(t *testing.T, bin, dir string, env []string) *claudeSession {
	t.Helper()
	debug := filepath.Join(t.TempDir(), "debug.log")
	s := &claudeSession{exited: make(chan struct{}), debug: debug}
	s.cmd = exec.Command(bin, "-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose",
		"--allowedTools", "mcp__a,mcp__b,mcp__projectmcp", "--model", "claude-sonnet-4-5", "--debug-file", debug)
	s.cmd.Dir, s.cmd.Env = dir, env
	s.cmd.Stdout, s.cmd.Stderr = &s.out, &s.errs
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var err error
	if s.stdin, err = s.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = s.cmd.Wait()
		close(s.exited)
	}()
	t.Cleanup(func() {
		_ = s.stdin.Close()
		select {
		case <-s.exited:
		case <-time.After(20 * time.Second):
			_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
			<-s.exited
		}
		if t.Failed() {
			t.Logf("claude stdout:\n%s\nclaude stderr:\n%s\nits MCP log:\n%s", s.out.String(), s.errs.String(), mcpLines(debug))
		}
	})
	return s
}

// end closes the session's input, as a user's last turn does, and waits for it to exit.
func (s *claudeSession) end(t *testing.T) {
	t.Helper()
	_ = s.stdin.Close()
	select {
	case <-s.exited:
	case <-time.After(20 * time.Second):
		t.Fatal("claude did not exit within 20s of the end of its input")
	}
}

// mcpLines are the lines of Claude Code's debug log about MCP servers.
func mcpLines(debug string) string {
	b, _ := os.ReadFile(debug)
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "MCP server") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// awaitLog waits until Claude Code's debug log has a line containing what.
func (s *claudeSession) awaitLog(t *testing.T, what string) {
	t.Helper()
	testutil.EventuallyOK(t, 30*time.Second, "Claude Code's debug log to say "+what, func() error {
		if b, _ := os.ReadFile(s.debug); !strings.Contains(string(b), what) {
			return errors.New("not yet")
		}
		return nil
	})
}

// turn sends a user message and waits for the session's result of it.
func (s *claudeSession) turn(t *testing.T, text string) {
	t.Helper()
	msg := map[string]any{"type": "user", "message": map[string]any{"role": "user", "content": text}}
	b, err := json.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.stdin.Write(append(b, '\n')); err != nil {
		t.Fatal(err)
	}
	s.turns++
	testutil.EventuallyOK(t, 45*time.Second, "Claude Code's result of "+text, func() error {
		if n := strings.Count(s.out.String(), `"type":"result"`); n >= s.turns {
			return nil
		}
		select {
		case <-s.exited:
			t.Fatalf("claude exited (%v) before its result of %q", s.cmd.ProcessState, text)
		default:
		}
		return errors.New("no result yet")
	})
}

// toolResults are the tool results Claude Code sent the model, in order, as "ok: TEXT" or
// "error: TEXT"; each once, however many requests carry it.
func toolResults(m *testutil.MessagesAPI) []string {
	var out []string
	seen := map[string]bool{}
	for _, req := range m.Requests() {
		for _, b := range req.Last().Blocks() {
			if b.Type != "tool_result" || seen[b.ToolUseID] {
				continue
			}
			seen[b.ToolUseID] = true
			verdict := "ok: "
			if b.IsError {
				verdict = "error: "
			}
			out = append(out, verdict+b.ResultText())
		}
	}
	return out
}

// A laptop session outlives its token: the real Claude Code, with the entry `connect --write`
// wrote (a headersHelper running `projectmcp token`), calls a project's tool through a gateway
// that checks tokens; then the token stops passing (its ServiceAccount made anew, as a token
// past its lifetime does: the API server's shortest lifetime, 10 minutes, is too long for a
// test), and in the same session the next call works: the gateway answers 401, Claude Code
// runs the helper again, the helper finds its cached token refused and mints a new one.
func TestClaudeCodeSessionOutlivesItsToken(t *testing.T) {
	env := apiServer(t)
	bin := claudeCodeBin(t)
	ctx := context.Background()
	const name = "long-session"
	serviceAccountToken(t, "default", "coder", name) // the ServiceAccount and its grant
	// The gateway's 401 names its protected-resource metadata, and that an OAuth issuer signs
	// users in: Claude Code still runs the helper, not an OAuth sign-in (which needs a person).
	obj := startProject(t, env, name, []v1alpha1.MCPServer{fixtureServer("a")}, "--gateway-auth", "kubernetes",
		"--gateway-audience", "projectmcp", "--gateway-review-ttl", "1s", "--gateway-oauth-issuer", "https://issuer.example.invalid")
	project := filepath.Join(t.TempDir(), name)
	runCode(t, exitOK, "connect", "--project", project, "--write", "--token-service-account", "default/coder", "--token-audience", "projectmcp",
		"--kubeconfig="+env.Kubeconfig)
	c := newClaudeWorld(t, env)

	// In a folder the user has not trusted, print mode runs no headersHelper of its .mcp.json:
	// the server does not connect and its tools are not offered (what docs/install.md says).
	untrusted := startClaude(t, bin, project, c.env(claudeHome(t, project, false)))
	untrusted.turn(t, "call mcp__a__echo with untrusted")
	untrusted.end(t)
	if _, err := os.Stat(c.runs); !errors.Is(err, os.ErrNotExist) || len(toolResults(c.model)) != 0 {
		t.Fatalf("in an untrusted folder the helper ran (%v) or a tool was called (%q); the docs' step of trusting the folder is not needed", err, toolResults(c.model))
	}

	claude := startClaude(t, bin, project, c.env(claudeHome(t, project, true)))
	claude.turn(t, "call mcp__a__echo with first")
	if got := toolResults(c.model); len(got) != 1 || !echoResult(got[0], "first") {
		t.Fatalf("the first call's results: %q, want the tool's echo of \"first\"", got)
	}

	// The token stops passing: the gateway refuses it once its verdict is stale.
	old := cachedTokenOf(t, c.cache)
	if err := env.Client.Delete(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "coder", Namespace: "default"}}); err != nil {
		t.Fatal(err)
	}
	recreated := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "coder", Namespace: "default"}}
	env.DeleteOnCleanup(t, recreated)
	if err := env.Client.Create(ctx, recreated); err != nil {
		t.Fatal(err)
	}
	url := v1alpha1.ServerEndpoint(obj.Status.Endpoint, "a")
	testutil.Eventually(t, 30*time.Second, "the gateway refusing the old token", func() bool {
		return pingWith(t, url, "Bearer "+old) == http.StatusUnauthorized
	})

	claude.turn(t, "call mcp__a__echo with second")
	if got := toolResults(c.model); len(got) != 2 || !echoResult(got[1], "second") {
		t.Fatalf("the results: %q, want the second call to work in the same session", got)
	}
	if fresh := cachedTokenOf(t, c.cache); fresh == old {
		t.Error("the cached token is the refused one; the helper did not mint a new one")
	}
	// For a's entry the helper ran at connect and once more after the 401 (the entry for the
	// servers without one of their own runs it at connect too, for its own URL).
	var forA int
	for _, ran := range strings.Fields(readFile(t, c.runs)) {
		if ran == url {
			forA++
		}
	}
	if forA != 2 {
		t.Errorf("the helper ran %d times for %s, want twice: %s", forA, url, readFile(t, c.runs))
	}
}

// echoResult reports whether a tool result is the echo tool's answer for text (its structured
// content, as Claude Code passes it on).
func echoResult(result, text string) bool {
	return strings.HasPrefix(result, "ok: ") && strings.Contains(result, `{"text":"`+text+`"}`)
}

// cachedTokenOf is the one token in `projectmcp token`'s cache.
func cachedTokenOf(t *testing.T, cache string) string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(cache, "projectmcp", "tokens", "*.json"))
	if err != nil || len(files) != 1 {
		t.Fatalf("cached tokens: %v (%v), want one", files, err)
	}
	var c cachedToken
	if err := json.Unmarshal([]byte(readFile(t, files[0])), &c); err != nil {
		t.Fatal(err)
	}
	return c.Token
}

// A server added to a project between two turns of one Claude Code session (as an edit of
// .dsh/mcp.json is applied to the ProjectMCP) is offered and callable in the next turn, through
// the entries `connect --write` wrote: one at the project's endpoint (--aggregate), whose tool
// list changes under the session (Claude Code refreshes it on tools/list_changed); or the
// default ones, one per server and one for the rest (the project's endpoint leaving out the
// servers with an entry of their own), through which the new server comes the same way.
func TestClaudeCodeSeesAServerAddedMidSession(t *testing.T) {
	env := apiServer(t)
	bin := claudeCodeBin(t)
	const name = "growing"
	obj := startProject(t, env, name, []v1alpha1.MCPServer{fixtureServer("a")})
	type mode struct {
		name string
		// entry and added are the entries, in .mcp.json, of a's tools and of the added b's:
		// the tools' prefix after mcp__. Per server, b has no entry of its own until connect
		// --write runs again, and comes through the entry for the rest.
		entry, added string
		args         []string
		world        *claudeWorld
		session      *claudeSession
	}
	modes := []*mode{
		{name: "aggregate", entry: "projectmcp__", added: "projectmcp__", args: []string{"--aggregate"}},
		{name: "per server", entry: "", added: "projectmcp__"},
	}
	for _, m := range modes {
		project := filepath.Join(t.TempDir(), name)
		runCode(t, exitOK, append([]string{"connect", "--project", project, "--write", "--kubeconfig=" + env.Kubeconfig}, m.args...)...)
		m.world = newClaudeWorld(t, env)
		m.session = startClaude(t, bin, project, m.world.env(claudeHome(t, project, true)))
		m.session.turn(t, "call mcp__"+m.entry+"a__echo with one")
		if got := toolResults(m.world.model); len(got) != 1 || !echoResult(got[0], "one") {
			t.Fatalf("%s: the first turn's results: %q, want a's echo", m.name, got)
		}
	}

	added := obj.DeepCopy()
	added.Spec.Servers = append(added.Spec.Servers, fixtureServer("b"))
	if err := env.Client.Patch(context.Background(), added, client.MergeFrom(obj)); err != nil {
		t.Fatal(err)
	}
	waitReady(t, env, added)

	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			tool := "mcp__" + m.added + "b__echo"
			// The promise is for the model requests after the client has been told and has
			// listed the tools again: Claude Code refreshes them in the background after the
			// gateway's list_changed and logs nothing when done, so a turn sent meanwhile may
			// start without the new tool. Turns are sent (the model answers "no tool" to one
			// without it, calling nothing) until one offers it, within the session.
			m.session.awaitLog(t, fmt.Sprintf("MCP server %q: Received tools/list_changed", strings.TrimSuffix(m.added, "__")))
			offered := func() bool {
				requests := m.world.model.Requests()
				return requests[len(requests)-1].Offers(tool)
			}
			for deadline := time.Now().Add(10 * time.Second); ; {
				m.session.turn(t, "call "+tool+" with two")
				if offered() || time.Now().After(deadline) {
					break
				}
			}
			if !offered() {
				t.Errorf("%s is not offered in the session's turns after the refresh", tool)
			}
			if got := toolResults(m.world.model); len(got) != 2 || !echoResult(got[1], "two") {
				t.Errorf("the next turn's results: %q, want b's echo", got)
			}
		})
	}
}

// The scripted model calls the tool a user turn names when it is offered, says so when it is
// not, and ends the turn once it has a tool's result.
func TestEchoModel(t *testing.T) {
	user := func(content string) testutil.ModelMessage {
		return testutil.ModelMessage{Role: "user", Content: json.RawMessage(content)}
	}
	offered := []testutil.ModelTool{{Name: "mcp__a__echo"}}
	for _, tc := range []struct {
		name  string
		tools []testutil.ModelTool
		last  testutil.ModelMessage
		want  testutil.ModelTurn
	}{
		{"asked, offered", offered, user(`"call mcp__a__echo with hi there"`),
			testutil.ModelTurn{ToolName: "mcp__a__echo", ToolInput: map[string]any{"text": "hi there"}}},
		{"asked in a block", offered, user(`[{"type":"text","text":"call mcp__a__echo with x"}]`),
			testutil.ModelTurn{ToolName: "mcp__a__echo", ToolInput: map[string]any{"text": "x"}}},
		{"asked, not offered", nil, user(`"call mcp__a__echo with hi"`), testutil.ModelTurn{Text: "no tool mcp__a__echo"}},
		{"a result", offered, user(`[{"type":"tool_result","tool_use_id":"toolu_1","content":"hi"}]`), testutil.ModelTurn{Text: "done"}},
		{"anything else", offered, user(`"summarize this"`), testutil.ModelTurn{Text: "ok"}},
		{"no user turn", offered, testutil.ModelMessage{Role: "assistant", Content: json.RawMessage(`"x"`)}, testutil.ModelTurn{Text: "ok"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := echoModel(&testutil.ModelRequest{Tools: tc.tools, Messages: []testutil.ModelMessage{tc.last}})
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}
