package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/gateway"
	"github.com/dsh-dev/projectmcp/internal/testenv/harness"
	"github.com/dsh-dev/projectmcp/internal/testutil"
	"github.com/dsh-dev/projectmcp/test/fixture"
)

// What a session sees through the endpoint is what it sees talking to each server directly,
// apart from the documented names: prompts (projected like tools) and resources (URIs
// unchanged), side by side with a direct session to the same fixture.

// direct is a Go SDK session straight to a fixture process with the given name, speaking the
// given revision ("" for the SDK's default).
func direct(t testing.TB, name, version string) *mcp.ClientSession {
	t.Helper()
	return directWith(t, mcp.NewClient(&mcp.Implementation{Name: "direct", Version: "1"}, nil), name, version)
}

// directWith is direct with a client of the test's own.
func directWith(t testing.TB, client *mcp.Client, name, version string) *mcp.ClientSession {
	t.Helper()
	return directArgs(t, client, version, "--name", name)
}

// directArgs is directWith for a fixture started with args.
func directArgs(t testing.TB, client *mcp.Client, version string, args ...string) *mcp.ClientSession {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), fixture.EnvVar+"=1")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: time.Second}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// asJSON renders v for comparing what two sessions see: without the top-level _meta (each
// server stamps its own serverInfo there; the endpoint is the server a session talks to), with
// the given replacements (projected names) applied.
func asJSON(t testing.TB, v any, rename ...string) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if json.Unmarshal(data, &m) == nil && m != nil {
		delete(m, "_meta")
		data, _ = json.Marshal(m)
	}
	s := string(data)
	for i := 0; i+1 < len(rename); i += 2 {
		s = strings.ReplaceAll(s, rename[i], rename[i+1])
	}
	return s
}

func codeOf(err error) int64 {
	var wire *jsonrpc.Error
	if errors.As(err, &wire) {
		return wire.Code
	}
	return 0
}

func TestGatewayPromptsAndResourcesMatchDirect(t *testing.T) {
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "protocol", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "a"), harness.FixtureServer(t, "b")}})
	harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	for _, version := range []string{"2025-11-25", ""} {
		d := direct(t, "a", version)
		ag := harness.ConnectAgent(t, key, version, http.Header{gateway.SessionHeader: {"protocol-" + version}})
		s := ag.Session
		name := "revision " + version

		// Instructions: each server's, under its name.
		if got := s.InitializeResult().Instructions; !strings.Contains(got, "## a\n\n"+d.InitializeResult().Instructions) ||
			!strings.Contains(got, "## b\n\nThe fixture server b") {
			t.Fatalf("%s: instructions %q", name, got)
		}

		// Prompts: listed under projected names, otherwise as the server lists them.
		want, err := d.ListPrompts(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.ListPrompts(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		byName := map[string]*mcp.Prompt{}
		for _, p := range got.Prompts {
			byName[p.Name] = p
		}
		for _, p := range want.Prompts {
			gp := byName["a__"+p.Name]
			if gp == nil || asJSON(t, gp, `"a__`+p.Name+`"`, `"`+p.Name+`"`) != asJSON(t, p) {
				t.Fatalf("%s: prompt %s through the endpoint %s, directly %s", name, p.Name, asJSON(t, gp), asJSON(t, p))
			}
		}
		if byName["b__greet"] == nil {
			t.Fatalf("%s: b's prompts must be listed: %v", name, byName)
		}
		args := map[string]string{"name": "Ada"}
		wantRes, err := d.GetPrompt(ctx, &mcp.GetPromptParams{Name: "greet", Arguments: args})
		if err != nil {
			t.Fatal(err)
		}
		gotRes, err := s.GetPrompt(ctx, &mcp.GetPromptParams{Name: "a__greet", Arguments: args})
		if err != nil || asJSON(t, gotRes) != asJSON(t, wantRes) {
			t.Fatalf("%s: prompts/get through the endpoint %s (%v), directly %s", name, asJSON(t, gotRes), err, asJSON(t, wantRes))
		}
		_, errDirect := d.GetPrompt(ctx, &mcp.GetPromptParams{Name: "greet"})
		_, errGateway := s.GetPrompt(ctx, &mcp.GetPromptParams{Name: "a__greet"})
		if errDirect == nil || errGateway == nil || codeOf(errGateway) != codeOf(errDirect) {
			t.Fatalf("%s: a missing argument: directly %v, through the endpoint %v", name, errDirect, errGateway)
		}

		// Resources and templates: URIs unchanged, reads routed to the owner.
		wantList, err := d.ListResources(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		gotList, err := s.ListResources(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range wantList.Resources {
			i := slices.IndexFunc(gotList.Resources, func(g *mcp.Resource) bool { return g.URI == r.URI })
			if i < 0 || asJSON(t, gotList.Resources[i]) != asJSON(t, r) {
				t.Fatalf("%s: resource %s through the endpoint: %s", name, r.URI, asJSON(t, gotList.Resources))
			}
		}
		if !slices.ContainsFunc(gotList.Resources, func(g *mcp.Resource) bool { return g.URI == "fixture://b/readme" }) {
			t.Fatalf("%s: b's resources must be listed", name)
		}
		tmpls, err := s.ListResourceTemplates(ctx, nil)
		if err != nil || len(tmpls.ResourceTemplates) != 2 {
			t.Fatalf("%s: templates %s (%v)", name, asJSON(t, tmpls), err)
		}
		for _, uri := range []string{"fixture://a/readme", "fixture://a/items/42"} {
			want, err := d.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
			if err != nil {
				t.Fatal(err)
			}
			got, err := s.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
			if err != nil || asJSON(t, got) != asJSON(t, want) {
				t.Fatalf("%s: read %s through the endpoint %s (%v), directly %s", name, uri, asJSON(t, got), err, asJSON(t, want))
			}
		}
		if got, err := s.ReadResource(ctx, &mcp.ReadResourceParams{URI: "fixture://b/items/7"}); err != nil || got.Contents[0].Text != "item 7" {
			t.Fatalf("%s: a template of b must route to b: %v %v", name, asJSON(t, got), err)
		}
		if _, err := s.ReadResource(ctx, &mcp.ReadResourceParams{URI: "fixture://nobody/x"}); err == nil {
			t.Fatalf("%s: a URI no server claims must be an error", name)
		}
	}
}

// Prompts follow the lifecycle contracts of tools (docs/lifecycle-contracts.md): a prompt added upstream reaches a live session
// with list_changed; a disconnected server's prompts stay listed and fail fast naming the
// server; a Failed server's are withdrawn.
func TestGatewayPromptsSeedRules(t *testing.T) {
	ns := harness.NewNamespace(t)
	broken := filepath.Join(t.TempDir(), "broken")
	srv := harness.FixtureServer(t, "a", "--fail-if-exists", broken)
	key := harness.Create(t, ns, "prompts", v1alpha1.ProjectMCPSpec{
		Reconnect: &v1alpha1.ReconnectPolicy{MaxAttempts: ptr.To[int32](1),
			InitialBackoff: &metav1.Duration{Duration: 3 * time.Second}, MaxBackoff: &metav1.Duration{Duration: 3 * time.Second}},
		Servers: []v1alpha1.MCPServer{srv},
	})
	harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	changed := make(chan struct{}, 16)
	client := mcp.NewClient(&mcp.Implementation{Name: "prompts", Version: "1"}, &mcp.ClientOptions{
		PromptListChangedHandler: func(context.Context, *mcp.PromptListChangedRequest) { changed <- struct{}{} },
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := harness.MustDial(t, client, harness.EndpointOf(key), "2025-11-25", nil)
	prompts := func() []string {
		res, err := s.ListPrompts(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		return harness.NamesOf(res.Prompts, func(p *mcp.Prompt) string { return p.Name })
	}
	waitPrompts := func(what string, cond func([]string) bool) {
		t.Helper()
		for names := prompts(); !cond(names); names = prompts() {
			select {
			case <-changed:
			case <-ctx.Done():
				t.Fatalf("timed out waiting for %s: %v", what, names)
			}
		}
	}
	if _, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "a__add_prompt", Arguments: map[string]any{"name": "extra"}}); err != nil {
		t.Fatal(err)
	}
	waitPrompts("the added prompt", harness.Has("a__extra"))

	if err := os.WriteFile(broken, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_ = syscall.Kill(harness.ReadPIDs(t, srv).PID, syscall.SIGKILL)
	harness.WaitStatus(t, key, 10*time.Second, "Disconnected", harness.PhaseIs("a", v1alpha1.PhaseDisconnected))
	if names := prompts(); !slices.Contains(names, "a__greet") {
		t.Fatalf("prompts must stay listed while the server is disconnected: %v", names)
	}
	_, err := s.GetPrompt(ctx, &mcp.GetPromptParams{Name: "a__greet", Arguments: map[string]string{"name": "x"}})
	if err == nil || !strings.Contains(err.Error(), `"a"`) {
		t.Fatalf("prompts/get while disconnected must fail naming the server: %v", err)
	}
	waitPrompts("a's prompts withdrawn when Failed", harness.HasNot("a__greet"))
}

// listener is a stateful session that records log messages and resource updates.
type listener struct {
	s       *mcp.ClientSession
	logs    chan *mcp.LoggingMessageParams
	updates chan string
}

func listen(t testing.TB, endpoint string) *listener {
	t.Helper()
	l := &listener{logs: make(chan *mcp.LoggingMessageParams, 16), updates: make(chan string, 16)}
	client := mcp.NewClient(&mcp.Implementation{Name: "listener", Version: "1"}, &mcp.ClientOptions{
		LoggingMessageHandler:  func(_ context.Context, r *mcp.LoggingMessageRequest) { l.logs <- r.Params },
		ResourceUpdatedHandler: func(_ context.Context, r *mcp.ResourceUpdatedNotificationRequest) { l.updates <- r.Params.URI },
	})
	l.s = harness.MustDial(t, client, endpoint, "2025-11-25", nil)
	return l
}

// nothing fails when a value arrives on ch within a short while.
func nothing[T any](t testing.TB, what string, ch <-chan T) {
	t.Helper()
	select {
	case v := <-ch:
		t.Fatalf("%s: got %v", what, v)
	case <-time.After(300 * time.Millisecond):
	}
}

func receive[T any](t testing.TB, what string, ch <-chan T) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: nothing arrived", what)
	}
	var zero T
	return zero
}

// Completion is routed by its reference and answers as the server does directly; log messages
// reach each session whose level admits them, named after their server; resource updates
// reach only the sessions that subscribed, until they unsubscribe.
func TestGatewayCompletionLoggingSubscriptions(t *testing.T) {
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "notices", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "a")}})
	harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	verbose, quiet := listen(t, harness.EndpointOf(key)), listen(t, harness.EndpointOf(key))

	d := direct(t, "a", "2025-11-25")
	arg := mcp.CompleteParamsArgument{Name: "name", Value: "A"}
	want, err := d.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "greet"}, Argument: arg})
	if err != nil {
		t.Fatal(err)
	}
	got, err := verbose.s.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "a__greet"}, Argument: arg})
	if err != nil || asJSON(t, got) != asJSON(t, want) {
		t.Fatalf("completion through the endpoint %s (%v), directly %s", asJSON(t, got), err, asJSON(t, want))
	}
	if _, err := verbose.s.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "nope"}, Argument: arg}); err == nil {
		t.Fatal("completing an unknown prompt must be an error")
	}

	if err := verbose.s.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
		t.Fatal(err)
	}
	if err := quiet.s.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "error"}); err != nil {
		t.Fatal(err)
	}
	logAt := func(level, text string) {
		t.Helper()
		if _, err := verbose.s.CallTool(ctx, &mcp.CallToolParams{Name: "a__log", Arguments: map[string]any{"level": level, "text": text}}); err != nil {
			t.Fatal(err)
		}
	}
	logAt("warning", "w")
	if m := receive(t, "a warning at level info", verbose.logs); m.Data != "w" || m.Logger != "a/fixture" || m.Level != "warning" {
		t.Fatalf("log message %+v", m)
	}
	nothing(t, "a warning at level error", quiet.logs)
	logAt("error", "e")
	receive(t, "an error at level info", verbose.logs)
	if m := receive(t, "an error at level error", quiet.logs); m.Data != "e" {
		t.Fatalf("log message %+v", m)
	}

	const uri = "fixture://a/readme"
	if err := verbose.s.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	touch := func() {
		t.Helper()
		if _, err := quiet.s.CallTool(ctx, &mcp.CallToolParams{Name: "a__touch_resource", Arguments: map[string]any{"uri": uri}}); err != nil {
			t.Fatal(err)
		}
	}
	// A 2026-07-28 server learns of a subscription through its client's listen request, which
	// the SDK renews in the background: touch until the first update arrives.
	var updated string
	for deadline := time.Now().Add(10 * time.Second); updated == "" && time.Now().Before(deadline); {
		touch()
		select {
		case updated = <-verbose.updates:
		case <-time.After(500 * time.Millisecond):
		}
	}
	if updated != uri {
		t.Fatalf("the update of a subscribed resource: %q", updated)
	}
	for len(verbose.updates) > 0 { // the touches that came after the first update's
		<-verbose.updates
	}
	time.Sleep(300 * time.Millisecond)
	for len(verbose.updates) > 0 {
		<-verbose.updates
	}
	nothing(t, "an update without a subscription", quiet.updates)
	if err := verbose.s.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	touch()
	nothing(t, "an update after unsubscribing", verbose.updates)
	// A URI the project's only server does not list is that server's to answer, as it would
	// be directly: the fixture takes any subscription.
	if err := verbose.s.Subscribe(ctx, &mcp.SubscribeParams{URI: "fixture://nobody/x"}); err != nil {
		t.Fatalf("subscribing a URI the only server does not list: %v", err)
	}
}

// agentClient is an agent that samples, elicits and has roots, each answer naming it.
func agentClient(name string) *mcp.Client {
	c := mcp.NewClient(&mcp.Implementation{Name: name, Version: "1"}, &mcp.ClientOptions{
		CreateMessageHandler: func(_ context.Context, r *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			in := r.Params.Messages[0].Content.(*mcp.TextContent).Text
			return &mcp.CreateMessageResult{Role: "assistant", Model: "test-model", Content: &mcp.TextContent{Text: name + " samples " + in}}, nil
		},
		ElicitationHandler: func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": name + " answers " + r.Params.Message}}, nil
		},
	})
	c.AddRoots(&mcp.Root{URI: "file:///work/" + name, Name: name})
	return c
}

// A server's sampling, elicitation and roots requests made inside a call reach the session
// that made the call, and come back as they do directly; a session that did not declare the
// capability makes the server's request fail clearly.
func TestGatewayServerRequests(t *testing.T) {
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "server-requests", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "a")}})
	harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	d := directWith(t, agentClient("agent"), "a", "")
	s := harness.MustDial(t, agentClient("agent"), harness.EndpointOf(key), "2025-11-25", nil)
	other := harness.MustDial(t, agentClient("other"), harness.EndpointOf(key), "2025-11-25", nil)

	// A 2026-07-28 client is served statelessly: the server's input requests travel back in
	// the call's result and the client's next call carries the answers.
	stateless := harness.MustDial(t, agentClient("agent"), harness.EndpointOf(key), "", http.Header{gateway.SessionHeader: {"server-requests"}})

	for _, tool := range []string{"sample", "elicit", "roots"} {
		args := map[string]any{"text": "hi"}
		want, err := d.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
		if err != nil || want.IsError {
			t.Fatalf("%s directly: %v %q", tool, err, harness.Text(want))
		}
		for revision, session := range map[string]*mcp.ClientSession{"2025-11-25": s, "2026-07-28": stateless} {
			got, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "a__" + tool, Arguments: args})
			if err != nil || got.IsError || harness.Text(got) != harness.Text(want) {
				t.Fatalf("%s through the endpoint (%s) %q (%v), directly %q", tool, revision, harness.Text(got), err, harness.Text(want))
			}
		}
		// The other session's calls reach the other session, never this one.
		if got, err := other.CallTool(ctx, &mcp.CallToolParams{Name: "a__" + tool, Arguments: args}); err != nil || !strings.Contains(harness.Text(got), "other") {
			t.Fatalf("%s from the other session went elsewhere: %q (%v)", tool, harness.Text(got), err)
		}
	}

	plain := harness.ConnectAgent(t, key, "2025-11-25", nil) // declares neither sampling nor elicitation
	res, err := plain.Session.CallTool(ctx, &mcp.CallToolParams{Name: "a__sample", Arguments: map[string]any{"text": "hi"}})
	failure := fmt.Sprint(err)
	if err == nil && res.IsError {
		failure = harness.Text(res)
	}
	if !strings.Contains(failure, "sampling") {
		t.Fatalf("sampling for a session without the capability must fail clearly: %q (%v)", harness.Text(res), err)
	}
}

// A session that cancels a call cancels it upstream: the server's handler sees it.
func TestGatewayCancellationReachesServer(t *testing.T) {
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "cancel", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "hanger")}})
	harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	ag := harness.ConnectAgent(t, key, "2025-11-25", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := ag.Session.CallTool(ctx, &mcp.CallToolParams{Name: "hanger__hang", Arguments: map[string]any{}}); err == nil {
		t.Fatal("a cancelled call must not succeed")
	}
	testutil.Eventually(t, 10*time.Second, "the server to see the cancellation", func() bool {
		return strings.Contains(harness.Logs.String(), "fixture hanger: hang cancelled")
	})
}

// Aggregated lists page like a server's: 1,000 tools and more come in pages with cursors. A prompt
// that vanished and a method nobody serves get clear JSON-RPC errors, and the session goes on.
func TestGatewayPagingAndBadRequests(t *testing.T) {
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "paging", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "a", "--extra-tools", "1000", "--page-size", "400")}})
	harness.WaitStatus(t, key, 60*time.Second, "Ready", harness.IsReady)
	ag := harness.ConnectAgent(t, key, "2025-11-25", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	first, err := ag.Session.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	all := ag.Tools(t) // follows the cursors
	if first.NextCursor == "" || len(first.Tools) >= len(all) {
		t.Fatalf("a long list must come in pages: %d of %d tools, cursor %q", len(first.Tools), len(all), first.NextCursor)
	}
	if len(all) < 1000 || !slices.Contains(all, "a__tool_999") {
		t.Fatalf("all pages: %d tools", len(all))
	}

	_, err = ag.Session.GetPrompt(ctx, &mcp.GetPromptParams{Name: "a__vanished"})
	if err == nil || codeOf(err) == 0 {
		t.Fatalf("a prompt no server offers must be a JSON-RPC error: %v", err)
	}
	if _, err := ag.Session.ReadResource(ctx, &mcp.ReadResourceParams{URI: "fixture://a/nothing"}); err == nil {
		t.Fatal("a URI no server claims must be an error")
	}
	if got := harness.Text(ag.Call(t, "a__echo", map[string]any{"text": "still here"})); got != "still here" {
		t.Fatalf("the session must go on after bad requests: %q", got)
	}
}

// A server that never answers one call costs the session an error naming it after the call
// timeout, and the session goes on.
func TestGatewayCallTimeout(t *testing.T) {
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "timeout", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "a")}})
	harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	ag := harness.ConnectAgent(t, key, "2025-11-25", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := ag.Session.CallTool(ctx, &mcp.CallToolParams{Name: "a__hang", Arguments: map[string]any{}})
	if err != nil || !res.IsError || !strings.Contains(harness.Text(res), `"a" did not answer within `+harness.CallTimeout.String()) {
		t.Fatalf("a call the server never answers: %q (%v)", harness.Text(res), err)
	}
	if got := harness.Text(ag.Call(t, "a__echo", map[string]any{"text": "after"})); got != "after" {
		t.Fatalf("the session must go on: %q", got)
	}
}

// A 2026-07-28 session cancels a call by ending its request (the revision has no
// notifications/cancelled for it): on the SDK's path too (a 2025-11-25 server's call, which
// the SDK translates), the server sees the cancellation at once, not at --call-timeout.
func TestGatewayStatelessDisconnectCancels(t *testing.T) {
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "disconnect", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "older", "--protocol", "2025-11-25")}})
	harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	ag := harness.ConnectAgent(t, key, "2026-07-28", http.Header{gateway.SessionHeader: {"disconnect"}})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := ag.Session.CallTool(ctx, &mcp.CallToolParams{Name: "older__hang", Arguments: map[string]any{}}); err == nil {
		t.Fatal("a call whose request ended must not succeed")
	}
	testutil.Eventually(t, 10*time.Second, "the server to see the cancellation", func() bool {
		return strings.Contains(harness.Logs.String(), "fixture older: hang cancelled")
	})
}
