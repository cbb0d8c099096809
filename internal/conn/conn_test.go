package conn

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/httpcarrier"
	"github.com/dsh-dev/projectmcp/internal/policy"
	"github.com/dsh-dev/projectmcp/internal/proctest"
	"github.com/dsh-dev/projectmcp/internal/testutil"
	"github.com/dsh-dev/projectmcp/test/fixture"
)

// The test binary doubles as the fixture MCP server.
func TestMain(m *testing.M) {
	if trigger := os.Getenv(muteEnv); trigger != "" {
		muteStdio(trigger)
		return
	}
	if os.Getenv(fixture.EnvVar) != "" {
		fixture.Main()
		return
	}
	if size := os.Getenv(hostileEnv); size != "" {
		hostileStdio(size)
		return
	}
	code := m.Run()
	if code == 0 {
		// The HTTP fixture runs in this process; sessions its server side keeps after the
		// fixture's listener stops are the fixture's, not the supervisor's.
		if err := goleak.Find(goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
			goleak.IgnoreTopFunction("github.com/modelcontextprotocol/go-sdk/mcp.(*streamableServerConn).Read")); err != nil {
			os.Stderr.WriteString("FAIL: goroutines leaked:\n" + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}

func stdioServer(name string, args ...string) v1alpha1.MCPServer {
	return v1alpha1.MCPServer{Name: name, Stdio: &v1alpha1.StdioServer{
		Command: os.Args[0], Args: args, Env: []v1alpha1.NameValue{{Name: fixture.EnvVar, Value: "1"}},
	}}
}

// logSink collects log lines.
type logSink struct {
	mu    sync.Mutex
	lines []string
}

func (l *logSink) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, args)
	}, funcr.Options{Verbosity: 2})
}

func (l *logSink) all() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

func start(t *testing.T, opts Options) *Conn {
	t.Helper()
	if opts.ConnectTimeout == 0 {
		opts.ConnectTimeout = 5 * time.Second
	}
	if opts.Policy.InitialBackoff == 0 {
		opts.Policy = Policy{MaxAttempts: 2, InitialBackoff: 100 * time.Millisecond, MaxBackoff: 200 * time.Millisecond}
	}
	c := New(opts)
	t.Cleanup(c.Destroy)
	return c
}

func waitPhase(t *testing.T, c *Conn, phase v1alpha1.ServerPhase) Snapshot {
	t.Helper()
	deadline := time.After(15 * time.Second)
	for {
		ch := c.Changed()
		s := c.Snapshot()
		if s.Phase == phase {
			return s
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("timed out waiting for %s; now %s (%s)", phase, s.Phase, s.LastError)
		}
	}
}

func waitFor(t *testing.T, c *Conn, what string, cond func(Snapshot) bool) Snapshot {
	t.Helper()
	deadline := time.After(3 * time.Minute) // long enough for a first npx download

	for {
		ch := c.Changed()
		if s := c.Snapshot(); cond(s) {
			return s
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("timed out waiting for %s; state %+v", what, c.Snapshot())
		}
	}
}

func call(t *testing.T, c *Conn, tool string, args map[string]any) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := c.Call(ctx, &mcp.CallToolParams{Name: tool, Arguments: args}, nil)
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	if res.IsError || len(res.Content) == 0 {
		t.Fatalf("%s: error result %+v", tool, res)
	}
	return res.Content[0].(*mcp.TextContent).Text
}

func names(tools []*mcp.Tool) []string {
	out := make([]string, len(tools))
	for i, t := range tools {
		out[i] = t.Name
	}
	return out
}

// A server sending a progress token of a type we never use (an object) must not crash anything.
func TestProgressWithOddTokenIgnored(t *testing.T) {
	r := newProgressRelay("odd")
	r.relay(&mcp.ProgressNotificationParams{ProgressToken: map[string]any{}})
	r.relay(&mcp.ProgressNotificationParams{ProgressToken: []any{1}})
}

// A tool is offered when it passes the server's allow and deny patterns.
func TestOffered(t *testing.T) {
	f := &v1alpha1.ToolFilter{Allow: []string{"get_*", "echo"}, Deny: []string{"get_secret*"}}
	for name, want := range map[string]bool{"echo": true, "get_a": true, "get_secret_key": false, "put": false} {
		if Offered(f, name) != want {
			t.Errorf("Offered(%q) != %v", name, want)
		}
	}
	if !Offered(nil, "x") || !Offered(&v1alpha1.ToolFilter{Deny: []string{"y"}}, "x") {
		t.Error("no filter or deny-only must offer other tools")
	}
}

// Tools are listed on connect, filtered, and re-listed when the server says they changed.
func TestStdioToolsFilterAndListChanged(t *testing.T) {
	srv := stdioServer("a")
	srv.Tools = &v1alpha1.ToolFilter{Deny: []string{"crash", "hang"}}
	c := start(t, Options{Server: srv})
	s := waitPhase(t, c, v1alpha1.PhaseReady)
	if slices.Contains(names(s.Tools), "crash") || !slices.Contains(names(s.Tools), "echo") || s.RawToolCount != len(s.Tools)+2 {
		t.Fatalf("filter not applied: %v (raw %d)", names(s.Tools), s.RawToolCount)
	}
	if got := call(t, c, "echo", map[string]any{"text": "hi"}); got != "hi" {
		t.Fatalf("echo = %q", got)
	}
	call(t, c, "add_tool", map[string]any{"name": "late"})
	waitFor(t, c, "the added tool", func(s Snapshot) bool { return slices.Contains(names(s.Tools), "late") })
	call(t, c, "remove_tool", map[string]any{"name": "late"})
	waitFor(t, c, "the removed tool", func(s Snapshot) bool { return !slices.Contains(names(s.Tools), "late") })
}

// A server that exits is noticed even when a grandchild keeps its stdout open, and Destroy
// ends the grandchild too.
func TestDeathSeenThroughGrandchildAndGroupKilled(t *testing.T) {
	dir := t.TempDir()
	pidFile := dir + "/pids.json"
	c := start(t, Options{Server: stdioServer("a", "--grandchild", "--grandchild-holds-stdout", "--pid-file", pidFile)})
	waitPhase(t, c, v1alpha1.PhaseReady)
	var pids fixture.PIDs
	data, _ := os.ReadFile(pidFile)
	if err := json.Unmarshal(data, &pids); err != nil || pids.Grandchild == 0 {
		t.Fatalf("pid file: %s %v", data, err)
	}
	_ = syscall.Kill(pids.PID, syscall.SIGKILL)
	s := waitPhase(t, c, v1alpha1.PhaseDisconnected)
	if !strings.Contains(s.LastError, "exited") {
		t.Fatalf("lastError = %q", s.LastError)
	}
	c.Destroy()
	deadline := time.Now().Add(10 * time.Second)
	for proctest.Alive(pids.Grandchild) {
		if time.Now().After(deadline) {
			t.Fatal("the grandchild survived Destroy")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A missing variable is a permanent failure that names the variable, without spending the
// reconnect budget.
func TestMissingVariableFailsAtOnce(t *testing.T) {
	srv := stdioServer("a")
	srv.Stdio.Env = append(srv.Stdio.Env, v1alpha1.NameValue{Name: "K", Value: "${GITHUB_TOKEN}"})
	c := start(t, Options{Server: srv, Policy: Policy{MaxAttempts: 5, InitialBackoff: time.Second, MaxBackoff: time.Second}})
	s := waitPhase(t, c, v1alpha1.PhaseFailed)
	if !s.Permanent || !strings.Contains(s.LastError, `"GITHUB_TOKEN"`) || s.ReconnectAttempts != 0 {
		t.Fatalf("want a permanent failure naming GITHUB_TOKEN, got %+v", s)
	}
}

// A command outside the controller's allowlist is refused with a clear, permanent error.
func TestCommandAllowlist(t *testing.T) {
	c := start(t, Options{Server: stdioServer("a"), Settings: Settings{AllowCommands: []string{"/usr/local/bin/*", "npx"}}})
	s := waitPhase(t, c, v1alpha1.PhaseFailed)
	if !s.Permanent || !strings.Contains(s.LastError, "is not allowed here") || !strings.Contains(s.LastError, os.Args[0]) {
		t.Fatalf("want a refusal naming the command, got %+v", s)
	}
	ok := start(t, Options{Server: stdioServer("b"), Settings: Settings{AllowCommands: []string{"/tmp/*", os.Args[0]}}})
	waitPhase(t, ok, v1alpha1.PhaseReady)
}

// stderr reaches the log, scrubbed of secret values and rate-limited.
func TestStderrLoggedScrubbedAndLimited(t *testing.T) {
	sink := &logSink{}
	srv := stdioServer("a")
	srv.Stdio.Args = []string{"--name", "${NAME}"}
	c := start(t, Options{Server: srv, Log: sink.logger(), Variables: func(context.Context) (map[string]string, error) {
		return map[string]string{"NAME": "topsecret-name"}, nil
	}})
	waitPhase(t, c, v1alpha1.PhaseReady)
	call(t, c, "stderr", map[string]any{"text": "leak topsecret-name here", "lines": 200})
	c.Destroy() // the count of dropped lines is logged at the next window or when stderr ends
	logged := sink.all()
	if strings.Contains(logged, "topsecret-name") {
		t.Fatal("a secret value reached the log")
	}
	if n := strings.Count(logged, "leak [redacted] here"); n == 0 || n > stderrLinesPerSecond*2 {
		t.Fatalf("want between 1 and %d stderr lines logged, got %d", stderrLinesPerSecond*2, n)
	}
	if !strings.Contains(logged, "suppressed") {
		t.Fatal("dropped lines must be counted in the log")
	}
}

// A stderr line of any length is read through (and logged by its beginning): the copy never
// stops reading, so the server never fails writing to stderr (a Go server dies of SIGPIPE on
// a closed stderr), and the lines after it reach the log.
func TestLongStderrLineKeepsServerAlive(t *testing.T) {
	sink := &logSink{}
	c := start(t, Options{Server: stdioServer("a"), Log: sink.logger()})
	ready := waitPhase(t, c, v1alpha1.PhaseReady)
	call(t, c, "stderr", map[string]any{"text": "long " + strings.Repeat("x", 1<<20), "lines": 1})
	call(t, c, "stderr", map[string]any{"text": "after the long line", "lines": 1})
	if s := c.Snapshot(); s.Phase != v1alpha1.PhaseReady || s.ReadySince != ready.ReadySince || s.PID != ready.PID {
		t.Fatalf("the server must live on: %s, pid %d (was %d): %s", s.Phase, s.PID, ready.PID, s.LastError)
	}
	waitLogged := time.Now().Add(10 * time.Second)
	for !strings.Contains(sink.all(), "after the long line") {
		if time.Now().After(waitLogged) {
			t.Fatal("the line after the long one never reached the log")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if logged := sink.all(); !strings.Contains(logged, "long xxxx") || strings.Contains(logged, strings.Repeat("x", v1alpha1.MaxErrorLength)) {
		t.Fatal("the long line must be logged by its beginning only")
	}
}

func TestHTTPTransports(t *testing.T) {
	cases := map[string]struct {
		args      []string
		path      string
		transport v1alpha1.HTTPTransport
	}{
		"streamable stateful (2025-11-25)":  {nil, "/mcp", v1alpha1.TransportStreamableHTTP},
		"streamable stateless (2026-07-28)": {[]string{"--stateless"}, "/mcp", v1alpha1.TransportStreamableHTTP},
		"legacy SSE":                        {[]string{"--sse"}, "/sse", v1alpha1.TransportSSE},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			base := fixture.StartHTTP(t, tc.args...)
			before := transportGoroutines()
			c := start(t, Options{Server: v1alpha1.MCPServer{Name: "r", HTTP: &v1alpha1.HTTPServer{URL: base + tc.path, Transport: tc.transport}}})
			s := waitPhase(t, c, v1alpha1.PhaseReady)
			if !slices.Contains(names(s.Tools), "echo") {
				t.Fatalf("tools: %v", names(s.Tools))
			}
			if got := call(t, c, "echo", map[string]any{"text": "over http"}); got != "over http" {
				t.Fatalf("echo = %q", got)
			}
			call(t, c, "add_tool", map[string]any{"name": "late"})
			waitFor(t, c, "list_changed over "+name, func(s Snapshot) bool { return slices.Contains(names(s.Tools), "late") })
			// Its requests and its event stream went on the carrier: net/http's Transport holds no
			// TCP connection for it, and so runs no reader and writer goroutines.
			if after := transportGoroutines(); after > before {
				t.Fatalf("the connection left %d goroutines of net/http's Transport running (%d before it)", after, before)
			}
		})
	}
}

// transportGoroutines counts the goroutines net/http's Transport runs for its TCP connections
// (a reader and a writer each).
func transportGoroutines() int {
	all := testutil.Stacks()
	return strings.Count(all, "net/http.(*persistConn).readLoop(") + strings.Count(all, "net/http.(*persistConn).writeLoop(")
}

// A server that forgets the session (HTTP 404) is re-initialized and the call retried.
func TestHTTPSessionLossReinitializes(t *testing.T) {
	base := fixture.StartHTTP(t)
	c := start(t, Options{Server: v1alpha1.MCPServer{Name: "r", HTTP: &v1alpha1.HTTPServer{URL: base + "/mcp"}}})
	waitPhase(t, c, v1alpha1.PhaseReady)
	call(t, c, "forget_sessions", nil)
	time.Sleep(200 * time.Millisecond) // the fixture swaps its handler just after answering
	if got := call(t, c, "echo", map[string]any{"text": "again"}); got != "again" {
		t.Fatalf("echo after 404 = %q", got)
	}
	if s := c.Snapshot(); s.Phase != v1alpha1.PhaseReady {
		t.Fatalf("phase %s after re-initialize", s.Phase)
	}
}

// Headers from spec, with ${VAR} expanded, reach the server on every request.
func TestHTTPHeaders(t *testing.T) {
	base := fixture.StartHTTP(t)
	target, _ := url.Parse(base)
	var mu sync.Mutex
	seen := map[string]bool{}
	proxy := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.Header.Get("Authorization")+"|"+r.Header.Get("X-Team")] = true
		mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	c := start(t, Options{
		Server: v1alpha1.MCPServer{Name: "r", HTTP: &v1alpha1.HTTPServer{URL: front.URL + "/mcp", Headers: []v1alpha1.NameValue{
			{Name: "Authorization", Value: "Bearer ${TOKEN}"}, {Name: "X-Team", Value: "${TEAM:-core}"},
		}}},
		Variables: func(context.Context) (map[string]string, error) { return map[string]string{"TOKEN": "t0k3n"}, nil },
	})
	waitPhase(t, c, v1alpha1.PhaseReady)
	call(t, c, "echo", map[string]any{"text": "x"})
	if res, err := forwardEcho(t, c, "y", AcceptsStateful); err != nil || textOf(res) != "y" { // on the carrier
		t.Fatalf("a forwarded call: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || !seen["Bearer t0k3n|core"] {
		t.Fatalf("headers seen: %v", seen)
	}
	front.CloseClientConnections()
}

// A connection asks for its lists at once, not one after another: each list request is held
// until another list is in flight beside it (or 2 s pass): one after another, no two would
// ever be seen together.
func TestListsAskedAtOnce(t *testing.T) {
	base := fixture.StartHTTP(t)
	target, _ := url.Parse(base)
	proxy := httputil.NewSingleHostReverseProxy(target)
	var mu sync.Mutex
	inFlight := map[string]int{}
	var together []string
	released := make(chan struct{})
	var release sync.Once
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body []byte
		if r.Body != nil {
			body, _ = io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		var msg struct {
			Method string `json:"method"`
		}
		_ = json.Unmarshal(body, &msg)
		if !strings.HasSuffix(msg.Method, "/list") || msg.Method == "roots/list" {
			proxy.ServeHTTP(w, r)
			return
		}
		mu.Lock()
		inFlight[msg.Method]++
		if len(inFlight) >= 2 && together == nil {
			together = slices.Sorted(maps.Keys(inFlight))
			release.Do(func() { close(released) })
		}
		mu.Unlock()
		select {
		case <-released:
		case <-time.After(2 * time.Second):
		}
		proxy.ServeHTTP(w, r)
		mu.Lock()
		if inFlight[msg.Method]--; inFlight[msg.Method] == 0 {
			delete(inFlight, msg.Method)
		}
		mu.Unlock()
	}))
	t.Cleanup(front.Close)
	c := start(t, Options{Settings: Settings{ConnectTimeout: time.Minute}, Server: v1alpha1.MCPServer{Name: "l", HTTP: &v1alpha1.HTTPServer{URL: front.URL + "/mcp"}}})
	s := waitPhase(t, c, v1alpha1.PhaseReady)
	mu.Lock()
	defer mu.Unlock()
	if len(together) < 2 || len(s.Prompts) == 0 || len(s.Tools) == 0 {
		t.Fatalf("lists in flight together: %v; prompts %d, tools %d", together, len(s.Prompts), len(s.Tools))
	}
	front.CloseClientConnections()
}

// Real third-party servers from the npm registry, started through npx (a wrapper that leaves
// grandchildren): they connect, list and answer, and Destroy ends the whole process group.
func TestNpmServers(t *testing.T) {
	if _, err := exec.LookPath("npx"); err != nil {
		t.Skip("npx is not on PATH")
	}
	cases := map[string]struct {
		pkg, tool string
		args      map[string]any
	}{
		"server-memory":     {"@modelcontextprotocol/server-memory", "read_graph", map[string]any{}},
		"server-everything": {"@modelcontextprotocol/server-everything", "echo", map[string]any{"message": "hi"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := start(t, Options{
				Server: v1alpha1.MCPServer{Name: "npm", Stdio: &v1alpha1.StdioServer{Command: "npx", Args: []string{"-y", tc.pkg}}},
				Settings: Settings{
					Isolation:      policy.Isolation{PassEnv: testutil.ShareNpmCache()},
					ConnectTimeout: 3 * time.Minute, // the first run downloads the package
				},
			})
			s := waitFor(t, c, "Ready", func(s Snapshot) bool { return s.Phase == v1alpha1.PhaseReady || s.Phase == v1alpha1.PhaseFailed })
			if s.Phase != v1alpha1.PhaseReady || !slices.Contains(names(s.Tools), tc.tool) {
				t.Fatalf("phase %s (%s), tools %v", s.Phase, s.LastError, names(s.Tools))
			}
			call(t, c, tc.tool, tc.args)
			c.Destroy()
			if proctest.GroupAlive(s.PID) {
				t.Fatalf("processes of group %d outlived Destroy", s.PID)
			}
		})
	}
}

// Destroy drains: a call already sent finishes, a call after Destroy began is refused with
// ErrDestroyed (the caller sends it to the replacement), and a hung call is cancelled after
// DrainTimeout.
func TestDestroyDrainsInFlightCalls(t *testing.T) {
	c := start(t, Options{Server: stdioServer("a"), Settings: Settings{ConnectTimeout: 5 * time.Second}})
	waitPhase(t, c, v1alpha1.PhaseReady)
	slow := make(chan error, 1)
	go func() {
		_, err := c.Call(context.Background(), &mcp.CallToolParams{Name: "sleep", Arguments: map[string]any{"ms": 400}}, nil)
		slow <- err
	}()
	hung := make(chan error, 1)
	go func() {
		_, err := c.Call(context.Background(), &mcp.CallToolParams{Name: "hang", Arguments: map[string]any{}}, nil)
		hung <- err
	}()
	time.Sleep(150 * time.Millisecond) // both calls are in flight
	destroyed := make(chan struct{})
	go func() { c.Destroy(); close(destroyed) }()
	time.Sleep(50 * time.Millisecond)
	if _, err := c.Call(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}}, nil); !errors.Is(err, ErrDestroyed) {
		t.Fatalf("a call after Destroy began must get ErrDestroyed: %v", err)
	}
	if err := <-slow; err != nil {
		t.Fatalf("a call in flight must finish during the drain: %v", err)
	}
	select {
	case err := <-hung:
		if err == nil {
			t.Fatal("a hung call must be cancelled after the drain")
		}
	case <-time.After(DrainTimeout + 10*time.Second):
		t.Fatal("the hung call was never cancelled")
	}
	<-destroyed
}

type fakeCaller struct{ Caller }

// A server's request is attributed to the caller of the request it came with, else to the
// only session in flight; with none or several, the server gets a clear error.
func TestCallerFor(t *testing.T) {
	f := newFlight("a", nil, nil)
	c := &responder{flight: f}
	if _, err := c.callerFor(context.Background(), "sampling/createMessage"); err == nil || !strings.Contains(err.Error(), "no agent session") {
		t.Fatalf("no session in flight: %v", err)
	}
	one, two := &fakeCaller{}, &fakeCaller{}
	f.callers[one] = 1
	if got, err := c.callerFor(context.Background(), "x"); err != nil || got != one {
		t.Fatalf("the only session in flight: %v %v", got, err)
	}
	f.callers[two] = 2
	if _, err := c.callerFor(context.Background(), "elicitation/create"); err == nil || !strings.Contains(err.Error(), "2 agent sessions") {
		t.Fatalf("two sessions in flight: %v", err)
	}
	if got, err := c.callerFor(WithCaller(context.Background(), two), "x"); err != nil || got != two {
		t.Fatalf("the caller the request came with: %v %v", got, err)
	}
	// roots/list answers with the project's own roots, with no session in flight and with one
	// (roots belong to the shared connection, never to a session); none is an empty list.
	project := []*mcp.Root{{URI: "file:///work/shop", Name: "shop"}}
	idle := &responder{flight: newFlight("a", nil, nil), roots: project}
	if res := idle.rootsList(); len(res.Roots) != 1 || res.Roots[0] != project[0] {
		t.Fatalf("roots with no session: %+v", res)
	}
	c.roots = project
	delete(f.callers, two) // one session in flight
	if res := c.rootsList(); len(res.Roots) != 1 || res.Roots[0] != project[0] {
		t.Fatalf("roots with a session in flight: %+v", res)
	}
	if res := (&responder{}).rootsList(); res.Roots == nil || len(res.Roots) != 0 {
		t.Fatalf("no roots must be an empty list: %+v", res)
	}
}

// With an allowlist, a ${VAR} cannot turn an allowed command into another, and LD_PRELOAD is
// refused.
func TestCommandAllowlistAfterExpansion(t *testing.T) {
	srv := stdioServer("a")
	srv.Stdio.Command = "${CMD}"
	vars := func(context.Context) (map[string]string, error) { return map[string]string{"CMD": "/bin/sh"}, nil }
	c := start(t, Options{Server: srv, Variables: vars, Settings: Settings{AllowCommands: []string{"${CMD}", "/opt/mcp/*"}}})
	if s := waitPhase(t, c, v1alpha1.PhaseFailed); !s.Permanent || !strings.Contains(s.LastError, "is not allowed here") || strings.Contains(s.LastError, "/bin/sh") {
		t.Fatalf("want a refusal naming the command as written, got %+v", s)
	}
	preload := stdioServer("b")
	preload.Stdio.Env = append(preload.Stdio.Env, v1alpha1.NameValue{Name: "LD_PRELOAD", Value: "/tmp/x.so"})
	p := start(t, Options{Server: preload, Settings: Settings{AllowCommands: []string{os.Args[0]}}})
	if s := waitPhase(t, p, v1alpha1.PhaseFailed); !strings.Contains(s.LastError, "LD_PRELOAD") {
		t.Fatalf("LD_PRELOAD must be refused with an allowlist: %+v", s)
	}
}

// With an allowlist, a variable that would have the allowed command run or fetch other code
// fails the server at once (permanent), its lastError naming the variable and why; one that
// does not passes.
func TestAllowlistRefusesVariables(t *testing.T) {
	for name, why := range map[string]string{
		"GIT_SSH_COMMAND":     "git runs the commands",
		"npm_config_registry": "fetch code from another index",
		"PIP_INDEX_URL":       "fetch code from another index",
		"PATH":                "chooses the program",
	} {
		srv := stdioServer("a")
		srv.Stdio.Env = append(srv.Stdio.Env, v1alpha1.NameValue{Name: name, Value: "x"})
		c := start(t, Options{Server: srv, Settings: Settings{AllowCommands: []string{os.Args[0]}}})
		s := waitPhase(t, c, v1alpha1.PhaseFailed)
		if !s.Permanent || !strings.Contains(s.LastError, fmt.Sprintf("%q is not allowed with --allow-command", name)) || !strings.Contains(s.LastError, why) {
			t.Errorf("%s: want a permanent refusal naming it and why, got %+v", name, s)
		}
	}
	srv := stdioServer("b")
	srv.Stdio.Env = append(srv.Stdio.Env, v1alpha1.NameValue{Name: "GITHUB_TOKEN", Value: "x"})
	waitPhase(t, start(t, Options{Server: srv, Settings: Settings{AllowCommands: []string{os.Args[0]}}}), v1alpha1.PhaseReady)
}

// A server listing more than the bound is refused with a clear error, not kept in memory.
func TestListBounded(t *testing.T) {
	c := start(t, Options{Server: stdioServer("a"), Settings: Settings{MaxListItems: 10},
		Policy: Policy{MaxAttempts: 0, InitialBackoff: 100 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}})
	s := waitPhase(t, c, v1alpha1.PhaseFailed)
	if !strings.Contains(s.LastError, "more than 10 tools") {
		t.Fatalf("want the bound named in lastError, got %q", s.LastError)
	}
}

// Connections to one host share an HTTP transport: each keeps its own event stream, while its
// requests go over pooled keep-alive connections instead of an idle one of its own, and each
// still sends its own headers. The transport goes when its last connection does (and the
// package's goroutine check finds nothing of it left).
func TestHTTPTransportShared(t *testing.T) {
	base := fixture.StartHTTP(t)
	target, _ := url.Parse(base)
	proxy := httputil.NewSingleHostReverseProxy(target)
	var mu sync.Mutex
	dialed := 0
	seen := map[string]bool{}
	front := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.Header.Get("X-Conn")] = true
		mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	front.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			mu.Lock()
			dialed++
			mu.Unlock()
		}
	}
	front.Start()
	t.Cleanup(front.Close)
	const n = 6
	var conns []*Conn
	for i := range n {
		c := New(Options{Settings: Settings{ConnectTimeout: 5 * time.Second}, Server: v1alpha1.MCPServer{Name: "r", HTTP: &v1alpha1.HTTPServer{
			URL: front.URL + "/mcp", Headers: []v1alpha1.NameValue{{Name: "X-Conn", Value: strconv.Itoa(i)}}}}})
		conns = append(conns, c)
		waitPhase(t, c, v1alpha1.PhaseReady)
		call(t, c, "echo", map[string]any{"text": "x"})
	}
	mu.Lock()
	got, headers := dialed, len(seen)
	mu.Unlock()
	// With a transport each, every connection dialed at least two: its event stream and
	// its requests'.
	// A transport each meant at least two TCP connections each (the event stream and the
	// requests'); shared, the requests' are pooled (how many depends on how many requests
	// ran at once).
	t.Logf("%d connections dialed %d TCP connections", n, got)
	if headers != n {
		t.Errorf("the server saw %d connections' headers, want %d: %v", headers, n, seen)
	}
	if shared := httpcarrier.Shared(); shared != 1 {
		t.Errorf("%d transports for connections to one host, want 1", shared)
	}
	for _, c := range conns {
		c.Destroy()
	}
	if left := httpcarrier.Shared(); left != 0 {
		t.Errorf("%d transports left after every connection was destroyed", left)
	}
	front.CloseClientConnections()
}

// A request's progress never reaches its caller after the request is done: done waits for a
// relay under way, and a relay after it finds nothing to call.
func TestNoProgressAfterDone(t *testing.T) {
	r := newProgressRelay("progress")
	entered, release := make(chan struct{}), make(chan struct{})
	calls := 0
	token, done := r.watch(func(*mcp.ProgressNotificationParams) {
		calls++
		close(entered)
		<-release
	})
	go r.relay(&mcp.ProgressNotificationParams{ProgressToken: token})
	<-entered
	finished := make(chan struct{})
	go func() { done(); close(finished) }()
	select {
	case <-finished:
		t.Fatal("done returned while the request's progress was being relayed")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	<-finished
	r.relay(&mcp.ProgressNotificationParams{ProgressToken: token})
	if calls != 1 {
		t.Fatalf("progress relayed %d times, want once", calls)
	}
}

// A request that finds the connection Ready but its session just gone (the supervisor is
// replacing it) is told the server is reconnecting, not that it is ready.
func TestRoundTripBetweenSessions(t *testing.T) {
	c := &Conn{ctx: context.Background(), state: Snapshot{Phase: v1alpha1.PhaseReady}, flight: newFlight("x", nil, nil)}
	c.opts.Server.Name = "x"
	_, err := roundTrip(c, context.Background(), func(context.Context, *mcp.ClientSession) (int, error) { return 0, nil })
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), `MCP server "x" is reconnecting`) {
		t.Fatalf("got %v", err)
	}
}
