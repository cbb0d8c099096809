package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/gateway"
	"github.com/dsh-dev/projectmcp/internal/metrics"
	"github.com/dsh-dev/projectmcp/internal/testenv/harness"
	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// A stateful session's tools/call is forwarded at the JSON-RPC message level when the server
// speaks 2025-11-25 (the fast path), and through the SDK when it speaks 2026-07-28. Whatever
// the path, the session sees what it would see talking to the server directly.

// upstream is one kind of server connection, with direct sessions to a server of that kind.
type upstream struct {
	name   string
	newest bool // the server speaks 2026-07-28: calls of such sessions take the fast path
	// deaf: the server never sees a cancellation (the SDK's stateless HTTP server, even
	// talked to directly)
	deaf bool
	// stateless: the server cannot ask a 2025-11-25 client anything directly (no stream to ask
	// on), so only the calls that reach it through the endpoint can (the other session's)
	stateless bool
	// start starts a fixture server of this kind and returns its spec and a function that
	// opens a direct session, speaking the given revision, to a server started the same way.
	start func(t *testing.T, name string) (v1alpha1.MCPServer, func(version string) *mcp.ClientSession)
}

var upstreams = []upstream{
	{name: "stdio-2026", newest: true, start: func(t *testing.T, name string) (v1alpha1.MCPServer, func(string) *mcp.ClientSession) {
		return harness.FixtureServer(t, name), func(v string) *mcp.ClientSession { return directWith(t, agentClient("agent"), name, v) }
	}},
	{name: "stdio-2025", start: func(t *testing.T, name string) (v1alpha1.MCPServer, func(string) *mcp.ClientSession) {
		return harness.FixtureServer(t, name, "--protocol", "2025-11-25"), func(v string) *mcp.ClientSession {
			return directWith(t, agentClient("agent"), name, "2025-11-25")
		}
	}},
	{name: "http-2025", start: func(t *testing.T, name string) (v1alpha1.MCPServer, func(string) *mcp.ClientSession) {
		s := harness.HTTPFixture(t, name)
		return s, func(v string) *mcp.ClientSession {
			return harness.MustDial(t, agentClient("agent"), s.HTTP.URL, v, nil)
		}
	}},
	{name: "http-2026", newest: true, deaf: true, stateless: true, start: func(t *testing.T, name string) (v1alpha1.MCPServer, func(string) *mcp.ClientSession) {
		s := harness.HTTPFixture(t, name, "--stateless")
		return s, func(v string) *mcp.ClientSession {
			return harness.MustDial(t, agentClient("agent"), s.HTTP.URL, v, nil)
		}
	}},
}

// rawJSON renders a result in full, _meta included, for comparing two sessions' views.
func rawJSON(t *testing.T, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestGatewayCallsEveryUpstream(t *testing.T) {
	for i, up := range upstreams {
		t.Run(up.name, func(t *testing.T) { // not parallel: each checks the path counters
			name := fmt.Sprintf("u%d", i)
			server, dial := up.start(t, name)
			ns := harness.NewNamespace(t)
			key := harness.Create(t, ns, "calls", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{server}})
			harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
			for _, revision := range []string{"2025-11-25", "2026-07-28"} {
				t.Run(revision, func(t *testing.T) {
					version, header := revision, http.Header(nil)
					if revision == "2026-07-28" {
						version, header = "", http.Header{gateway.SessionHeader: {"calls"}}
					}
					// The fast path: a session and a server of the same revision, on a
					// connection that takes raw requests. A session calling a server of the
					// other revision takes it too: a 2025-11-25 session's result reshaped, a
					// 2026-07-28 session's call bridged (bridge.go).
					path := "raw"
					exact := revision == "2025-11-25"
					input, resume := metrics.FastPath.WithLabelValues("input"), metrics.FastPath.WithLabelValues("resume")
					before, resumedBefore := promtest.ToFloat64(input), promtest.ToFloat64(resume)
					checkCalls(t, key, name, dial(version), version, header, path, exact, up.deaf, !up.newest)
					// sample, elicit and roots: a 2026-07-28 server asks a 2025-11-25 session
					// for input, and the SDK calls again and asks the session itself.
					want := 3.0 // sample, elicit, roots
					if up.stateless {
						want = 1 // the other session's sample
					}
					if asked := promtest.ToFloat64(input) - before; path == "raw" && revision == "2025-11-25" && up.newest && asked < want {
						t.Fatalf("calls handed to the SDK because the server asked for input: %v", asked)
					}
					// A 2025-11-25 server asks a stateless session during the call: the
					// session is asked in the call's result and resumes the call the gateway
					// holds (sample, elicit and the other session's sample; roots are the
					// shared connection's, never asked of a session).
					if resumed := promtest.ToFloat64(resume) - resumedBefore; revision == "2026-07-28" && !up.newest && resumed < 3 {
						t.Fatalf("calls resumed with the session's answers: %v", resumed)
					}
				})
			}
		})
	}
}

// checkCalls compares calls through the endpoint with the same calls on a direct session d.
// exact: the results must be equal with _meta (the fast path passes them through whole, and
// the SDK path adds nothing a direct session of the same revision does not see). sharedRoots:
// the server speaks 2025-11-25, whose roots are the shared connection's.
func checkCalls(t *testing.T, key types.NamespacedName, name string, d *mcp.ClientSession, version string, header http.Header, path string, exact, deaf, sharedRoots bool) {
	s := harness.MustDial(t, agentClient("agent"), harness.EndpointOf(key), version, header)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	counter := metrics.FastPath.WithLabelValues(path)
	before := promtest.ToFloat64(counter)
	render := rawJSON
	if !exact { // the session and the server speak different revisions: each its own fields
		render = func(t *testing.T, v any) string {
			return strings.Replace(asJSON(t, v), `,"resultType":"complete"`, "", 1)
		}
	}

	// Results, success and failure, exactly as the server gives them; but roots: a
	// 2025-11-25 server's roots belong to the connection every session shares, so through the
	// endpoint it gets the project's (none here), never the session's.
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"echo", map[string]any{"text": "round trip"}},
		{"echo", nil}, // no arguments at all
		{"fail", map[string]any{"message": "nope"}},
		{"progress_token", nil}, // the server is asked for progress only when the session asks
		{"sample", map[string]any{"text": "hi"}},
		{"elicit", map[string]any{"text": "hi"}},
		{"roots", map[string]any{"text": "hi"}},
	} {
		want, werr := d.CallTool(ctx, &mcp.CallToolParams{Name: c.tool, Arguments: c.args})
		asks := slices.Contains([]string{"sample", "elicit", "roots"}, c.tool)
		if asks && werr != nil {
			continue // directly, a stateless server cannot ask a 2025-11-25 client; through the endpoint it can
		}
		got, gerr := s.CallTool(ctx, &mcp.CallToolParams{Name: name + "__" + c.tool, Arguments: c.args})
		if c.tool == "roots" && sharedRoots {
			if gerr != nil || harness.Text(got) != `{"roots":[]}` {
				t.Fatalf("roots through the endpoint: %s (%v), want the project's (none)", rawJSON(t, got), gerr)
			}
			continue
		}
		if fmt.Sprint(werr) != fmt.Sprint(gerr) || render(t, got) != render(t, want) {
			t.Fatalf("%s%v: through the endpoint %s (%v), directly %s (%v)", c.tool, c.args, rawJSON(t, got), gerr, rawJSON(t, want), werr)
		}
	}
	// The server's requests made during a call reach the session that made it (a stateless
	// session's in the call's result, when the server sends requests of its own: input.go).
	other := harness.MustDial(t, agentClient("other"), harness.EndpointOf(key), version, http.Header{gateway.SessionHeader: {"other"}})
	if got, err := other.CallTool(ctx, &mcp.CallToolParams{Name: name + "__sample", Arguments: map[string]any{"text": "hi"}}); err != nil || !strings.Contains(harness.Text(got), "other") {
		t.Fatalf("sampling for the other session went elsewhere: %q (%v)", harness.Text(got), err)
	}
	// An unknown tool gets the SDK's own error, whatever the path.
	_, werr := d.CallTool(ctx, &mcp.CallToolParams{Name: "nothing"})
	_, gerr := s.CallTool(ctx, &mcp.CallToolParams{Name: name + "__nothing"})
	if werr == nil || gerr == nil || codeOf(werr) != codeOf(gerr) {
		t.Fatalf("an unknown tool: through the endpoint %v, directly %v", gerr, werr)
	}

	// A call the session gives up on is cancelled at the server, and the session goes on.
	cancelled := strings.Count(harness.Logs.String(), "fixture "+name+": hang cancelled")
	hctx, hcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err := s.CallTool(hctx, &mcp.CallToolParams{Name: name + "__hang", Arguments: map[string]any{}})
	hcancel()
	if err == nil {
		t.Fatal("a cancelled call must not succeed")
	}
	if !deaf {
		testutil.Eventually(t, 10*time.Second, "the server to see the cancellation", func() bool {
			return strings.Count(harness.Logs.String(), "fixture "+name+": hang cancelled") > cancelled
		})
	}
	if got := harness.Text(callOK(t, s, name+"__echo", map[string]any{"text": "after"})); got != "after" {
		t.Fatalf("the session must go on: %q", got)
	}

	// Progress reaches the session that called, with its own token (a string or a number). The
	// client hands notifications to its handler apart from the call's result, so a call's last
	// progress may come after its result: each call is told apart by the total the server
	// reports (its sleep), and waited for by its progress, not by the result.
	var mu sync.Mutex
	var progress []*mcp.ProgressNotificationParams
	watcher := harness.MustDial(t, mcp.NewClient(&mcp.Implementation{Name: "watcher", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			defer mu.Unlock()
			progress = append(progress, r.Params)
		},
	}), harness.EndpointOf(key), version, header)
	type sleep struct {
		token any
		ms    int
	}
	calls := []sleep{{"tok-1", 450}, {7, 460}}
	for _, c := range calls {
		params := &mcp.CallToolParams{Name: name + "__sleep", Arguments: map[string]any{"ms": c.ms}}
		params.SetProgressToken(c.token)
		if res, err := watcher.CallTool(ctx, params); err != nil || res.IsError {
			t.Fatalf("sleep: %v %+v", err, res)
		}
		testutil.Eventually(t, 10*time.Second, fmt.Sprintf("two progress notifications of token %v", c.token), func() bool {
			mu.Lock()
			defer mu.Unlock()
			n := 0
			for _, p := range progress {
				if p.Total == float64(c.ms) {
					n++
				}
			}
			return n >= 2
		})
	}
	mu.Lock()
	for _, p := range progress {
		i := slices.IndexFunc(calls, func(c sleep) bool { return float64(c.ms) == p.Total })
		if i < 0 || fmt.Sprint(p.ProgressToken) != fmt.Sprint(calls[i].token) {
			t.Errorf("progress %+v: must carry its own call's token", p)
		}
	}
	mu.Unlock()

	// The path taken: raw when the session and the server speak the same revision, else the
	// SDK, which translates between them; the SDK too on a connection that takes no raw
	// requests.
	if n := promtest.ToFloat64(counter) - before; n < 5 {
		t.Fatalf("calls on the %q path: %v", path, n)
	}
}

func callOK(t *testing.T, s *mcp.ClientSession, tool string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	return res
}

// A session busy with fast-path calls is not idle: the gateway's own session timeout (the
// SDK's sees only the requests it handles) counts them; once quiet, the session is released.
func TestGatewaySessionTimeoutCountsFastCalls(t *testing.T) {
	server := harness.HTTPFixture(t, "a")
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "busy", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{server}})
	harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	_, base := serveGateway(t, gateway.Options{Registry: harness.Ctl.Registry, SessionTimeout: 1500 * time.Millisecond})
	s := harness.MustDial(t, agentClient("busy"), base+gateway.Path(key), "2025-11-25", nil)
	raw := metrics.FastPath.WithLabelValues("raw")
	before := promtest.ToFloat64(raw)
	for end := time.Now().Add(4 * time.Second); time.Now().Before(end); time.Sleep(300 * time.Millisecond) {
		if got := harness.Text(callOK(t, s, "a__echo", map[string]any{"text": "busy"})); got != "busy" {
			t.Fatalf("a busy session must stay: %q", got)
		}
	}
	if promtest.ToFloat64(raw)-before < 5 {
		t.Fatal("the calls must have taken the fast path")
	}
	harness.WaitStatus(t, key, 15*time.Second, "the quiet session released", func(o *v1alpha1.ProjectMCP) bool { return o.Status.SessionCount == 0 })
}

// A session's roots never reach a shared 2025-11-25 server, where roots belong to the
// connection every session of the project shares: the server's roots/list, asked during that
// session's call, gets the project's root (spec.project), and the session's
// notifications/roots/list_changed is not passed on.
func TestGatewaySessionRootsStayPrivate(t *testing.T) {
	for i, up := range upstreams {
		if up.newest {
			continue
		}
		t.Run(up.name, func(t *testing.T) {
			name := fmt.Sprintf("r%d", i)
			server, _ := up.start(t, name)
			ns := harness.NewNamespace(t)
			project := t.TempDir()
			key := harness.Create(t, ns, "roots", v1alpha1.ProjectMCPSpec{Project: project, Servers: []v1alpha1.MCPServer{server}})
			harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
			client := agentClient("roots")
			client.AddRoots(&mcp.Root{URI: "file:///", Name: "everything"})
			s := harness.MustDial(t, client, harness.EndpointOf(key), "2025-11-25", nil)
			got := harness.Text(callOK(t, s, name+"__roots", map[string]any{"text": "which?"}))
			if strings.Contains(got, `"file:///"`) || !strings.Contains(got, `"file://`+project+`"`) {
				t.Fatalf("the server must get the project's root %s, never the session's file:///: %s", project, got)
			}
			client.AddRoots(&mcp.Root{URI: "file:///etc", Name: "etc"})
			if got := harness.Text(callOK(t, s, name+"__echo", map[string]any{"text": "after"})); got != "after" {
				t.Fatalf("echo: %q", got)
			}
			time.Sleep(300 * time.Millisecond) // a notification passed on would be logged by now
			if strings.Contains(harness.Logs.String(), "fixture "+name+": roots changed") {
				t.Fatal("a session's roots/list_changed reached the shared server")
			}
		})
	}
}

// A project takes at most --max-sessions-per-project sessions: one more is refused at
// initialize (stateless: at its first request) with an error naming the limit, and a session
// that ends makes room.
func TestGatewaySessionsPerProjectBounded(t *testing.T) {
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "crowded", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "a")}})
	harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	harness.Ctl.Registry.LimitSessions(2)
	defer harness.Ctl.Registry.LimitSessions(0)
	first := harness.MustDial(t, agentClient("one"), harness.EndpointOf(key), "2025-11-25", nil)
	harness.MustDial(t, agentClient("two"), harness.EndpointOf(key), "2025-11-25", nil)
	_, err := harness.DialWith(agentClient("three"), harness.EndpointOf(key), "2025-11-25", nil)
	if err == nil || !strings.Contains(err.Error(), "--max-sessions-per-project") {
		t.Fatalf("a session past the limit: %v", err)
	}
	stateless, err := harness.DialWith(agentClient("four"), harness.EndpointOf(key), "", http.Header{gateway.SessionHeader: {"four"}})
	if err == nil {
		_, err = stateless.ListTools(context.Background(), nil)
		_ = stateless.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "--max-sessions-per-project") {
		t.Fatalf("a stateless session past the limit: %v", err)
	}
	_ = first.Close()
	harness.WaitStatus(t, key, 10*time.Second, "the closed session released", func(o *v1alpha1.ProjectMCP) bool { return o.Status.SessionCount == 1 })
	if s, err := harness.DialWith(agentClient("five"), harness.EndpointOf(key), "2025-11-25", nil); err != nil {
		t.Fatalf("a session after one ended: %v", err)
	} else {
		_ = s.Close()
	}
}

// A tool whose argument travels in an Mcp-Param header (x-mcp-header) on a 2026-07-28 HTTP
// server is called through the SDK, which writes the header, from a session of either revision:
// the message-level path does not write it, and the server refuses a call without it.
func TestGatewayParamHeaderTool(t *testing.T) {
	server := harness.HTTPFixture(t, "ph", "--stateless", "--param-header")
	key := harness.Create(t, harness.NewNamespace(t), "param-header", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{server}})
	harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args := map[string]any{"region": "eu-west"}
	d := harness.MustDial(t, agentClient("agent"), server.HTTP.URL, "", nil)
	if _, err := d.ListTools(ctx, nil); err != nil { // the SDK client writes the header of a tool it listed
		t.Fatal(err)
	}
	direct, err := d.CallTool(ctx, &mcp.CallToolParams{Name: "regional", Arguments: args})
	if err != nil || harness.Text(direct) != "region eu-west" {
		t.Fatalf("directly: %q %v", harness.Text(direct), err)
	}
	for _, revision := range []string{"2025-11-25", "2026-07-28"} {
		version, header := revision, http.Header(nil)
		if revision == "2026-07-28" {
			version, header = "", http.Header{gateway.SessionHeader: {"ph"}}
		}
		s := harness.MustDial(t, agentClient("agent"), harness.EndpointOf(key), version, header)
		if _, err := s.ListTools(ctx, nil); err != nil {
			t.Fatal(err)
		}
		got, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "ph__regional", Arguments: args})
		if err != nil || got.IsError || harness.Text(got) != harness.Text(direct) {
			t.Fatalf("session %s through the endpoint: %q %v", revision, harness.Text(got), err)
		}
	}
}

// Two stateless sessions whose calls to a 2025-11-25 HTTP server are in flight together each
// get the server's sampling request of their own call: it arrives on that call's stream. (One
// connection is shared by both; had the call gone through the SDK's client, whose handlers
// learn nothing of the call, the connection could only refuse the second as ambiguous.)
func TestGatewayStatelessSamplingAttributedByStream(t *testing.T) {
	server := harness.HTTPFixture(t, "st") // stateful: 2025-11-25
	key := harness.Create(t, harness.NewNamespace(t), "by-stream", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{server}})
	harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	var both sync.WaitGroup
	both.Add(2)
	client := func(name string) *mcp.Client {
		return mcp.NewClient(&mcp.Implementation{Name: name, Version: "1"}, &mcp.ClientOptions{
			CreateMessageHandler: func(ctx context.Context, r *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
				both.Done() // the other session's call is in flight too once both got here
				waited := make(chan struct{})
				go func() { both.Wait(); close(waited) }()
				select {
				case <-waited:
				case <-time.After(20 * time.Second):
					return nil, errors.New("the other session was never asked")
				}
				in := r.Params.Messages[0].Content.(*mcp.TextContent).Text
				return &mcp.CreateMessageResult{Role: "assistant", Model: "m", Content: &mcp.TextContent{Text: name + " samples " + in}}, nil
			},
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	results := make(chan string, 2)
	for _, name := range []string{"alpha", "beta"} {
		s := harness.MustDial(t, client(name), harness.EndpointOf(key), "", http.Header{gateway.SessionHeader: {name}})
		go func() {
			res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "st__sample", Arguments: map[string]any{"text": "hi"}})
			if err != nil {
				results <- name + ": " + err.Error()
				return
			}
			results <- name + ": " + harness.Text(res)
		}()
	}
	got := []string{<-results, <-results}
	slices.Sort(got)
	for i, name := range []string{"alpha", "beta"} {
		if !strings.Contains(got[i], name+": ") || !strings.Contains(got[i], name+" samples hi") {
			t.Fatalf("each session must answer its own call's sampling: %q", got)
		}
	}
}
