package gateway_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/gateway"
	"github.com/dsh-dev/projectmcp/internal/metrics"
	"github.com/dsh-dev/projectmcp/internal/testenv/harness"
)

// A 2026-07-28 server's own requestState reaches a stateless session sealed to that session,
// the server and the call: another session replaying it, a state altered or unsealed, or one
// brought to another tool is refused by the gateway (the server never sees the answer), and
// the session's own resumption gives the server its state back as it issued it (the fixture
// fails an answer without it). On the message-level path (stdio) and the SDK path (a
// stateless HTTP server, which takes typed requests only) alike.
func TestGatewayServerStateBoundToSession(t *testing.T) {
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "server-state", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{
		harness.FixtureServer(t, "a", "--request-state"), harness.HTTPFixture(t, "h", "--stateless", "--request-state")}})
	harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	endpoint := harness.EndpointOf(key)
	mine, other := byHand(t, endpoint, "mine"), byHand(t, endpoint, "other")
	accept := func(id, answer string) mcp.InputResponseMap {
		return mcp.InputResponseMap{id: &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": answer}}}
	}
	for server, path := range map[string]string{"a": "raw", "h": "sdk"} {
		tool := server + "__elicit"
		counter := metrics.FastPath.WithLabelValues(path)
		before := promtest.ToFloat64(counter)
		id, state := askedState(t, mine, tool)
		res, err := resume(other, tool, state, accept(id, "stolen"))
		refused(t, tool+": another session's state", err, "issued to another session")
		if strings.Contains(harness.Text(res), "stolen") {
			t.Fatalf("%s: the server saw another session's answer: %s", tool, rawJSON(t, res))
		}
		if !strings.HasPrefix(state, "projectmcp-state.") || strings.Contains(state, "fixture-state") {
			t.Errorf("%s: the session got the server's state unsealed: %q", tool, state)
		}
		_, err = resume(mine, tool, state[:len(state)-2]+"xx", accept(id, "altered"))
		refused(t, tool+": an altered state", err, "altered")
		_, err = resume(mine, tool, "fixture-state."+server+".elicit", accept(id, "unsealed"))
		refused(t, tool+": the server's state unsealed", err, "not issued by this gateway")
		_, err = resume(mine, server+"__sample", state, accept(id, "elsewhere"))
		refused(t, tool+": another tool's state", err, `belongs to a call of "`+tool+`"`)

		res, err = resume(mine, tool, state, accept(id, "mine"))
		if err != nil || res.IsError || !strings.Contains(harness.Text(res), `"answer":"mine"`) {
			t.Fatalf("%s: the session's own resumption: %s (%v)", tool, rawJSON(t, res), err)
		}
		if got := promtest.ToFloat64(counter) - before; got < 2 {
			t.Errorf("%s: %v calls went the %s way, want the round and the resumption at least", tool, got, path)
		}
	}
}

// A server's requestState is the server's whatever it looks like: one that begins as the
// gateway's own do reaches a stateless session sealed and comes back to the server as it
// issued it, on the message-level path and the SDK path. That same string sent by a session
// (stateless or stateful) is no state of the gateway's, which holds no call for it: it is
// refused and never reaches the server (which would take it as its own). A sealed state
// brought back past its lifetime (the input timeout) is refused as expired.
func TestGatewayServerStateSealedWhateverItsForm(t *testing.T) {
	ns := harness.NewNamespace(t)
	look := []string{"--request-state", "--request-state-prefix", "projectmcp-input."}
	key := harness.Create(t, ns, "state-form", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{
		harness.FixtureServer(t, "a", look...), harness.HTTPFixture(t, "h", append([]string{"--stateless"}, look...)...)}})
	harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	clk := clocktesting.NewFakeClock(time.Now())
	_, base := serveGateway(t, gateway.Options{Registry: harness.Ctl.Registry, Clock: clk, InputTimeout: time.Minute})
	endpoint := base + gateway.Path(key)
	mine := byHand(t, endpoint, "form")
	accept := func(id, answer string) mcp.InputResponseMap {
		return mcp.InputResponseMap{id: &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": answer}}}
	}
	for _, server := range []string{"a", "h"} {
		tool, issued := server+"__elicit", "projectmcp-input."+server+".elicit" // what the server issues
		id, state := askedState(t, mine, tool)
		if !strings.HasPrefix(state, "projectmcp-state.") || strings.Contains(state, issued) {
			t.Errorf("%s: the session got the server's state unsealed: %q", tool, state)
		}
		res, err := resume(mine, tool, state, accept(id, "mine"))
		if err != nil || res.IsError || !strings.Contains(harness.Text(res), `"answer":"mine"`) {
			t.Fatalf("%s: the session's own resumption: %s (%v)", tool, rawJSON(t, res), err)
		}
		res, err = resume(mine, tool, issued, accept(id, "forged"))
		refused(t, tool+": the server's state unsealed, of the gateway's form", err, "not issued by this project's endpoint")
		if strings.Contains(harness.Text(res), "forged") {
			t.Fatalf("%s: the server took a state no gateway sealed: %s", tool, rawJSON(t, res))
		}

		id, state = askedState(t, mine, tool)
		clk.Step(time.Minute + time.Second)
		_, err = resume(mine, tool, state, accept(id, "late"))
		refused(t, tool+": a state past its lifetime", err, "has expired: a server's state is good for 1m0s")
	}

	stateful := harness.MustDial(t, agentClient("agent"), endpoint, "2025-11-25", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := stateful.CallTool(ctx, &mcp.CallToolParams{Name: "a__elicit", Arguments: map[string]any{"text": "hi"},
		InputResponses: accept("ask", "forged"), RequestState: "projectmcp-input.a.elicit"})
	refused(t, "a stateful session's string of the gateway's form", err, "not issued by this project's endpoint")
	if strings.Contains(harness.Text(res), "forged") {
		t.Fatalf("the server took a stateful session's string as its state: %s", rawJSON(t, res))
	}
}

// askedState calls tool and expects the server's one input request back, with a state.
func askedState(t *testing.T, s *mcp.ClientSession, tool string) (id, state string) {
	t.Helper()
	res, err := resume(s, tool, "", nil)
	if err != nil || !res.NeedsInput() || len(res.InputRequests) != 1 || res.RequestState == "" {
		t.Fatalf("%s: want an input-required result with one request and a state, got %s (%v)", tool, rawJSON(t, res), err)
	}
	for id := range res.InputRequests {
		return id, res.RequestState
	}
	return "", ""
}
