package gateway_test

import (
	"context"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/gateway"
	"github.com/dsh-dev/projectmcp/internal/metrics"
	"github.com/dsh-dev/projectmcp/internal/testenv/harness"
	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// A stateless (2026-07-28) session calling a server that speaks 2025-11-25 is asked for the
// server's input in the call's result, and resumes the call the gateway holds with its
// answers (TestGatewayCallsEveryUpstream compares the results with a direct session's). Here:
// the rounds one by one, with a client that answers by hand, and everything that can be wrong
// with a resumption.

// byHand is a stateless agent that declares sampling, elicitation and roots but answers the
// server's input requests itself (the SDK's multi-round-trip loop is off).
func byHand(t *testing.T, endpoint, session string) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "by-hand", Version: "1"}, &mcp.ClientOptions{
		CreateMessageHandler: func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			t.Error("the SDK answered a sampling request by itself")
			return nil, nil
		},
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			t.Error("the SDK answered an elicitation by itself")
			return nil, nil
		},
		MultiRoundTrip: &mcp.MultiRoundTripOptions{Disabled: true},
	})
	return harness.MustDial(t, client, endpoint, "", http.Header{gateway.SessionHeader: {session}})
}

// asked calls tool and expects the server's one input request of method back, with a state.
func asked(t *testing.T, s *mcp.ClientSession, tool, method string) (id, state string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"text": "hi"}})
	if err != nil || !res.NeedsInput() || len(res.InputRequests) != 1 || !strings.HasPrefix(res.RequestState, "projectmcp-input.") {
		t.Fatalf("%s: want an input-required result with one request and the gateway's state, got %s (%v)", tool, rawJSON(t, res), err)
	}
	for id, req := range res.InputRequests {
		if got := map[string]string{"*mcp.ElicitParams": "elicitation/create", "*mcp.CreateMessageWithToolsParams": "sampling/createMessage",
			"*mcp.ListRootsParams": "roots/list"}[typeName(req)]; got != method {
			t.Fatalf("%s: the input request is %s, want %s", tool, typeName(req), method)
		}
		return id, res.RequestState
	}
	return "", ""
}

func typeName(v any) string {
	switch v.(type) {
	case *mcp.ElicitParams:
		return "*mcp.ElicitParams"
	case *mcp.CreateMessageWithToolsParams:
		return "*mcp.CreateMessageWithToolsParams"
	case *mcp.ListRootsParams:
		return "*mcp.ListRootsParams"
	}
	return "other"
}

// resume calls tool again with answers and state.
func resume(s *mcp.ClientSession, tool, state string, answers mcp.InputResponseMap) (*mcp.CallToolResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return s.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"text": "hi"}, InputResponses: answers, RequestState: state})
}

// refused expects a JSON-RPC invalid-params error whose message says want.
func refused(t *testing.T, what string, err error, want string) {
	t.Helper()
	if err == nil || codeOf(err) != jsonrpc.CodeInvalidParams || !strings.Contains(err.Error(), want) {
		t.Fatalf("%s: want a JSON-RPC invalid-params error saying %q, got %v", what, want, err)
	}
}

// heldCalls counts the goroutines of calls the gateway holds for their sessions.
func heldCalls() int {
	buf := make([]byte, 1<<22)
	return strings.Count(string(buf[:runtime.Stack(buf, true)]), "gateway.(*pendingCall).run")
}

func TestGatewayStatelessInputRounds(t *testing.T) {
	ns := harness.NewNamespace(t)
	old := "--protocol"
	key := harness.Create(t, ns, "input", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{
		harness.FixtureServer(t, "a", old, "2025-11-25"), harness.FixtureServer(t, "b", old, "2025-11-25"), harness.FixtureServer(t, "c", old, "2025-11-25")}})
	elsewhere := harness.Create(t, ns, "input-elsewhere", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "a", old, "2025-11-25")}})
	harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	harness.WaitStatus(t, elsewhere, 30*time.Second, "Ready", harness.IsReady)
	gw, base := serveGateway(t, gateway.Options{Registry: harness.Ctl.Registry, InputTimeout: time.Minute, MaxAwaitingInput: 2, CallTimeout: time.Minute})
	endpoint := base + gateway.Path(key)
	s, s2 := byHand(t, endpoint, "one"), byHand(t, endpoint, "two")
	answered, expired := metrics.InputRounds.WithLabelValues("answered"), metrics.InputRounds.WithLabelValues("expired")
	answeredBefore, expiredBefore := promtest.ToFloat64(answered), promtest.ToFloat64(expired)
	accept := func(id, answer string) mcp.InputResponseMap {
		return mcp.InputResponseMap{id: &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": answer}}}
	}

	// One round by hand, and every way to get the resumption wrong, each a JSON-RPC error
	// that leaves the held call as it was.
	id, state := asked(t, s, "a__elicit", "elicitation/create")
	_, err := resume(s, "a__elicit", state, nil)
	refused(t, "no answers", err, `no answer to the input request "`+id+`"`)
	_, err = resume(s, "a__elicit", state, mcp.InputResponseMap{id: &mcp.ListRootsResult{Roots: []*mcp.Root{}}})
	refused(t, "an answer of the wrong kind", err, "is not an answer to elicitation/create")
	answers := accept(id, "by hand")
	answers["nothing"] = &mcp.ElicitResult{Action: "decline"}
	_, err = resume(s, "a__elicit", state, answers)
	refused(t, "an answer to nothing", err, `inputResponses["nothing"] answers no input request`)
	_, err = resume(s2, "a__elicit", state, accept(id, "stolen"))
	refused(t, "another session's state", err, "issued to another session")
	_, err = resume(s, "a__sample", state, accept(id, "elsewhere"))
	refused(t, "another tool's state", err, `belongs to a call of "a__elicit"`)
	_, err = resume(s, "a__elicit", state[:len(state)-4]+"AAAA", accept(id, "guessed"))
	refused(t, "a guessed state", err, "unknown or has expired")
	there := byHand(t, base+gateway.Path(elsewhere), "one")
	otherID, otherState := asked(t, there, "a__elicit", "elicitation/create")
	_, err = resume(s, "a__elicit", otherState, accept(otherID, "crossed"))
	refused(t, "another project's state", err, "not issued by this project's endpoint")
	if res, err := resume(there, "a__elicit", otherState, accept(otherID, "there")); err != nil || !strings.Contains(harness.Text(res), "there") {
		t.Fatalf("the other project's call: %s (%v)", rawJSON(t, res), err)
	}

	res, err := resume(s, "a__elicit", state, accept(id, "by hand"))
	if err != nil || res.IsError || !strings.Contains(harness.Text(res), `"answer":"by hand"`) {
		t.Fatalf("the resumed call: %s (%v)", rawJSON(t, res), err)
	}
	_, err = resume(s, "a__elicit", state, accept(id, "again"))
	refused(t, "a state used once already", err, "unknown or has expired")

	// Roots are the shared connection's, never a session's: a 2025-11-25 server's roots/list
	// is answered with the project's root (none here) and never reaches the session.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err = s.CallTool(ctx, &mcp.CallToolParams{Name: "b__roots", Arguments: map[string]any{"text": "hi"}})
	if err != nil || res.NeedsInput() || harness.Text(res) != `{"roots":[]}` {
		t.Fatalf("roots: want the project's (none) without asking the session, got %s (%v)", rawJSON(t, res), err)
	}
	// Sampling by hand: the answer reaches the server as the session gave it.
	id, state = asked(t, s, "b__sample", "sampling/createMessage")
	res, err = resume(s, "b__sample", state, mcp.InputResponseMap{id: &mcp.CreateMessageWithToolsResult{
		Role: "assistant", Model: "hand", Content: []mcp.Content{&mcp.TextContent{Text: "sampled by hand"}}}})
	if err != nil || !strings.Contains(harness.Text(res), "sampled by hand") {
		t.Fatalf("sampling by hand: %s (%v)", rawJSON(t, res), err)
	}

	// The project's bound: two calls held, a third server's request gets an error at once
	// (the server's tool fails with it), and the held ones go on.
	idA, stateA := asked(t, s, "a__elicit", "elicitation/create")
	idB, stateB := asked(t, s2, "b__elicit", "elicitation/create")
	if n := gw.AwaitingInput(); n != 2 {
		t.Fatalf("calls held: %d, want 2", n)
	}
	res, err = s.CallTool(ctx, &mcp.CallToolParams{Name: "c__elicit", Arguments: map[string]any{"text": "hi"}})
	if !strings.Contains(failure(res, err), "2 calls of this project already wait for their sessions' input") {
		t.Fatalf("a call past the bound: %s (%v)", rawJSON(t, res), err)
	}
	for _, r := range []struct {
		s             *mcp.ClientSession
		tool, id, st  string
		answer, wants string
	}{{s, "a__elicit", idA, stateA, "first", "first"}, {s2, "b__elicit", idB, stateB, "second", "second"}} {
		if res, err := resume(r.s, r.tool, r.st, accept(r.id, r.answer)); err != nil || !strings.Contains(harness.Text(res), r.wants) {
			t.Fatalf("%s after the bound: %s (%v)", r.tool, rawJSON(t, res), err)
		}
	}

	// A call never resumed is cancelled upstream after the bound (a gateway with a short
	// one), its server's request answered with an error, and its state is gone.
	quick, quickBase := serveGateway(t, gateway.Options{Registry: harness.Ctl.Registry, InputTimeout: time.Second, CallTimeout: time.Minute})
	late := byHand(t, quickBase+gateway.Path(key), "late")
	failed := strings.Count(harness.Logs.String(), "fixture c: tools/call elicit failed")
	id, state = asked(t, late, "c__elicit", "elicitation/create")
	testutil.Eventually(t, 20*time.Second, "the server's request to get an error", func() bool {
		return strings.Count(harness.Logs.String(), "fixture c: tools/call elicit failed") > failed
	})
	_, err = resume(late, "c__elicit", state, accept(id, "too late"))
	refused(t, "an expired state", err, "unknown or has expired")
	if got := harness.Text(callOK(t, late, "c__echo", map[string]any{"text": "still here"})); got != "still here" {
		t.Fatalf("the session must go on: %q", got)
	}

	// A session that declared no sampling: the server's request fails naming it.
	plain := harness.MustDial(t, mcp.NewClient(&mcp.Implementation{Name: "plain", Version: "1"}, nil), endpoint, "", http.Header{gateway.SessionHeader: {"plain"}})
	res, err = plain.CallTool(ctx, &mcp.CallToolParams{Name: "a__sample", Arguments: map[string]any{"text": "hi"}})
	if !strings.Contains(failure(res, err), "did not declare the sampling capability") {
		t.Fatalf("sampling for a session without the capability: %s (%v)", rawJSON(t, res), err)
	}

	// Nothing stays behind: no call held, no goroutine running one.
	testutil.Eventually(t, 20*time.Second, "every held call to end", func() bool {
		return gw.AwaitingInput() == 0 && quick.AwaitingInput() == 0 && heldCalls() == 0
	})
	if n := promtest.ToFloat64(answered) - answeredBefore; n != 5 { // roots are never asked of a session
		t.Fatalf("rounds answered: %v, want 5", n)
	}
	if n := promtest.ToFloat64(expired) - expiredBefore; n != 1 {
		t.Fatalf("rounds expired: %v, want 1", n)
	}
}

// prompts/get and resources/read take rounds too: a 2025-11-25 server that asks for input
// while it gets a prompt or reads a resource asks a stateless session in the request's
// result, and the session's next request with its answers goes on with it; a state is bound
// to what it was issued for (method and name). A stateful session and a stateless one whose
// SDK answers by itself get the answer through as well.
func TestGatewayStatelessInputRoundsPromptsAndResources(t *testing.T) {
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "ask", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "a", "--protocol", "2025-11-25", "--ask")}})
	harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	gw, base := serveGateway(t, gateway.Options{Registry: harness.Ctl.Registry, InputTimeout: time.Minute, CallTimeout: time.Minute})
	endpoint := base + gateway.Path(key)
	s := byHand(t, endpoint, "one")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	accept := func(res mcp.InputRequestMap, answer string) mcp.InputResponseMap {
		out := mcp.InputResponseMap{}
		for id, req := range res {
			if typeName(req) != "*mcp.ElicitParams" {
				t.Fatalf("the input request is %s, want an elicitation", typeName(req))
			}
			out[id] = &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": answer}}
		}
		return out
	}
	needsInput := func(what string, requests mcp.InputRequestMap, state string, err error) {
		t.Helper()
		if err != nil || len(requests) != 1 || !strings.HasPrefix(state, "projectmcp-input.") {
			t.Fatalf("%s: want the server's one input request and the gateway's state, got %v %q (%v)", what, requests, state, err)
		}
	}

	prompt := &mcp.GetPromptParams{Name: "a__ask", Arguments: map[string]string{"text": "which prompt?"}}
	asked, err := s.GetPrompt(ctx, prompt)
	if err != nil {
		t.Fatalf("prompts/get: %v", err)
	}
	needsInput("prompts/get", asked.InputRequests, asked.RequestState, err)
	_, err = resume(s, "a__elicit", asked.RequestState, accept(asked.InputRequests, "crossed"))
	refused(t, "a prompt's state on a tool", err, `belongs to a call of "a__ask" (prompts/get), not of "a__elicit" (tools/call)`)
	answered := *prompt
	answered.InputResponses, answered.RequestState = accept(asked.InputRequests, "by hand"), asked.RequestState
	got, err := s.GetPrompt(ctx, &answered)
	if err != nil || len(got.Messages) != 1 || !strings.Contains(got.Messages[0].Content.(*mcp.TextContent).Text, `"answer":"by hand"`) {
		t.Fatalf("the resumed prompts/get: %s (%v)", rawJSON(t, got), err)
	}

	read := &mcp.ReadResourceParams{URI: "fixture://a/ask/which"}
	askedRead, err := s.ReadResource(ctx, read)
	if err != nil {
		t.Fatalf("resources/read: %v", err)
	}
	needsInput("resources/read", askedRead.InputRequests, askedRead.RequestState, err)
	other := &mcp.ReadResourceParams{URI: "fixture://a/ask/other", InputResponses: accept(askedRead.InputRequests, "x"), RequestState: askedRead.RequestState}
	_, err = s.ReadResource(ctx, other)
	refused(t, "another URI's state", err, `belongs to a call of "fixture://a/ask/which" (resources/read)`)
	answeredRead := *read
	answeredRead.InputResponses, answeredRead.RequestState = accept(askedRead.InputRequests, "read by hand"), askedRead.RequestState
	gotRead, err := s.ReadResource(ctx, &answeredRead)
	if err != nil || len(gotRead.Contents) != 1 || !strings.Contains(gotRead.Contents[0].Text, `"answer":"read by hand"`) {
		t.Fatalf("the resumed resources/read: %s (%v)", rawJSON(t, gotRead), err)
	}

	// SDK clients that answer by themselves: a stateless one (its multi-round-trip loop) and
	// a stateful one (the server's request on its session).
	for _, version := range []string{"", "2025-11-25"} {
		client := mcp.NewClient(&mcp.Implementation{Name: "auto", Version: "1"}, &mcp.ClientOptions{
			ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": "auto " + req.Params.Message}}, nil
			},
		})
		auto := harness.MustDial(t, client, endpoint, version, http.Header{gateway.SessionHeader: {"auto" + version}})
		// Fresh params: the SDK's client writes its _meta and answers into the ones given.
		res, err := auto.GetPrompt(ctx, &mcp.GetPromptParams{Name: "a__ask", Arguments: map[string]string{"text": "which prompt?"}})
		if err != nil || len(res.Messages) != 1 || !strings.Contains(res.Messages[0].Content.(*mcp.TextContent).Text, `"answer":"auto which prompt?"`) {
			t.Fatalf("prompts/get, version %q: %s (%v)", version, rawJSON(t, res), err)
		}
		read, err := auto.ReadResource(ctx, &mcp.ReadResourceParams{URI: "fixture://a/ask/auto"})
		if err != nil || len(read.Contents) != 1 || !strings.Contains(read.Contents[0].Text, `"answer":"auto auto"`) {
			t.Fatalf("resources/read, version %q: %s (%v)", version, rawJSON(t, read), err)
		}
	}
	testutil.Eventually(t, 20*time.Second, "every held call to end", func() bool { return gw.AwaitingInput() == 0 && heldCalls() == 0 })
}

// A state the gateway issued is the gateway's to check, whichever revision the server speaks
// now (a repoint may have changed it between rounds): on prompts/get to a 2026-07-28 server it
// is refused as the gateway's, never sent on to the server as its own.
func TestGatewayInputStateNeverReachesServer(t *testing.T) {
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "state", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "a")}})
	harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	s := byHand(t, harness.EndpointOf(key), "state")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := s.GetPrompt(ctx, &mcp.GetPromptParams{Name: "a__greet", Arguments: map[string]string{"name": "Ada"}}); err != nil {
		t.Fatalf("prompts/get: %v", err) // mounts the session, so the next request may take the fast path
	}
	_, err := s.GetPrompt(ctx, &mcp.GetPromptParams{Name: "a__greet", Arguments: map[string]string{"name": "Ada"},
		InputResponses: mcp.InputResponseMap{"x": &mcp.ElicitResult{Action: "decline"}}, RequestState: "projectmcp-input.00000000.forged"})
	refused(t, "a gateway state on prompts/get", err, "not issued by this project's endpoint")
}

// One stateless session holds at most its share of the project's places for calls waiting for
// input: past it its next such call fails with an error naming the share, and another session
// still gets a place.
func TestGatewayInputPlacesPerSession(t *testing.T) {
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "input-share", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{
		harness.FixtureServer(t, "a", "--protocol", "2025-11-25"), harness.FixtureServer(t, "b", "--protocol", "2025-11-25")}})
	harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	_, base := serveGateway(t, gateway.Options{Registry: harness.Ctl.Registry, InputTimeout: time.Minute, MaxAwaitingInputPerSession: 1, CallTimeout: time.Minute})
	endpoint := base + gateway.Path(key)
	greedy, other := byHand(t, endpoint, "greedy"), byHand(t, endpoint, "other")
	asked(t, greedy, "a__elicit", "elicitation/create")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := greedy.CallTool(ctx, &mcp.CallToolParams{Name: "b__elicit", Arguments: map[string]any{"text": "hi"}})
	if !strings.Contains(failure(res, err), "1 calls of this session already wait for its input") {
		t.Fatalf("a call past the session's share: %s (%v)", rawJSON(t, res), err)
	}
	asked(t, other, "b__elicit", "elicitation/create")
}

// failure is how a call failed: the fixture's tool fails with the error its request to the
// session got, and answers the call with a JSON-RPC error, which reaches the session as the
// server sent it (err); a failing tool result's text otherwise; "" when the call succeeded.
func failure(res *mcp.CallToolResult, err error) string {
	switch {
	case err != nil:
		return err.Error()
	case res.IsError:
		return harness.Text(res)
	}
	return ""
}
