package conn

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/test/fixture"
)

// forwardRaw forwards tools/call echo and returns the result as the server sent it.
func forwardRaw(c *Conn, text string, rev Accepts) (json.RawMessage, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	args, _ := json.Marshal(map[string]string{"text": text})
	return c.Forward(ctx, "tools/call", append([]byte(`"name":"echo","arguments":`), args...), nil, rev)
}

// forwardEcho forwards tools/call echo and decodes the result the way a session would.
func forwardEcho(t *testing.T, c *Conn, text string, rev Accepts) (*mcp.CallToolResult, error) {
	t.Helper()
	raw, err := forwardRaw(c, text, rev)
	if err != nil {
		return nil, err
	}
	var res mcp.CallToolResult
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatalf("the forwarded result is not a CallToolResult: %v: %s", err, raw)
	}
	return &res, nil
}

func textOf(res *mcp.CallToolResult) string {
	if res == nil || len(res.Content) == 0 {
		return ""
	}
	tc, _ := res.Content[0].(*mcp.TextContent)
	if tc == nil {
		return ""
	}
	return tc.Text
}

// serverKinds start a fixture server of each kind the upstreams tell apart, by name.
var serverKinds = map[string]func(t *testing.T) v1alpha1.MCPServer{
	"stdio 2025-11-25": func(*testing.T) v1alpha1.MCPServer { return stdioServer("s", "--protocol", "2025-11-25") },
	"stdio 2026-07-28": func(*testing.T) v1alpha1.MCPServer { return stdioServer("s") },
	"streamable stateful": func(t *testing.T) v1alpha1.MCPServer {
		return v1alpha1.MCPServer{Name: "h", HTTP: &v1alpha1.HTTPServer{URL: fixture.StartHTTP(t) + "/mcp"}}
	},
	"streamable stateless": func(t *testing.T) v1alpha1.MCPServer {
		return v1alpha1.MCPServer{Name: "h", HTTP: &v1alpha1.HTTPServer{URL: fixture.StartHTTP(t, "--stateless") + "/mcp"}}
	},
	"legacy SSE": func(t *testing.T) v1alpha1.MCPServer {
		return v1alpha1.MCPServer{Name: "h", HTTP: &v1alpha1.HTTPServer{URL: fixture.StartHTTP(t, "--sse") + "/sse", Transport: v1alpha1.TransportSSE}}
	},
}

// Forward carries a call on every transport and revision, and its result is the one Call
// decodes; a caller that takes only 2025-11-25 results is told, before anything is sent, when
// the server speaks 2026-07-28.
func TestForwardEveryTransport(t *testing.T) {
	cases := map[string]struct {
		server   func(t *testing.T) v1alpha1.MCPServer
		newest   bool // the server speaks 2026-07-28
		forwards bool // requests can be forwarded (else ErrNotRaw, and the typed path is used)
	}{
		"stdio 2025-11-25":     {serverKinds["stdio 2025-11-25"], false, true},
		"stdio 2026-07-28":     {serverKinds["stdio 2026-07-28"], true, true},
		"streamable stateful":  {serverKinds["streamable stateful"], false, true},
		"streamable stateless": {serverKinds["streamable stateless"], true, true},
		"legacy SSE":           {serverKinds["legacy SSE"], false, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := start(t, Options{Server: tc.server(t)})
			waitPhase(t, c, v1alpha1.PhaseReady)
			// Takes says beforehand what Forward answers.
			wantTakes := map[Accepts]error{AcceptsAny: nil, AcceptsStateless: nil, AcceptsStatefulOnly: nil}
			if tc.newest {
				wantTakes[AcceptsStatefulOnly] = ErrOtherRevision
			} else {
				wantTakes[AcceptsStateless] = ErrOtherRevision
			}
			for rev, want := range wantTakes {
				if !tc.forwards && want == nil {
					want = ErrNotRaw
				}
				if got := c.Takes(rev); !errors.Is(got, want) || (want == nil) != (got == nil) {
					t.Fatalf("Takes(%d) = %v, want %v", rev, got, want)
				}
			}
			res, err := forwardEcho(t, c, "forwarded", AcceptsAny)
			if !tc.forwards {
				if !errors.Is(err, ErrNotRaw) {
					t.Fatalf("a connection that takes no forwarded requests: %v", err)
				}
				return
			}
			if err != nil || textOf(res) != "forwarded" || res.IsError {
				t.Fatalf("forwarded echo: %+v %v", res, err)
			}
			typed, err := c.Call(context.Background(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "forwarded"}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := asJSON(t, res.StructuredContent), asJSON(t, typed.StructuredContent); got != want {
				t.Fatalf("structuredContent: forwarded %s, typed %s", got, want)
			}
			// A 2025-11-25 caller gets a 2026-07-28 server's result in the shape that revision
			// has; a 2026-07-28 caller is refused a 2025-11-25 server's before anything is sent.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			raw, err := c.Forward(ctx, "tools/call", []byte(`"name":"echo","arguments":{"text":"legacy"}`), nil, AcceptsStateful)
			if err != nil || bytes.Contains(raw, []byte("resultType")) || bytes.Contains(raw, []byte(mcp.MetaKeyServerInfo)) {
				t.Fatalf("for a 2025-11-25 caller: %s %v", raw, err)
			}
			_, newestErr := forwardEcho(t, c, "newest", AcceptsStateless)
			if tc.newest == errors.Is(newestErr, ErrOtherRevision) {
				t.Fatalf("a server speaking the newest revision=%v: for a 2026-07-28 caller %v", tc.newest, newestErr)
			}
		})
	}
}

// An event stream's lines are read into buffers that later streams reuse: a forwarded result
// is a copy of its own, unchanged by the calls after it.
func TestForwardedResultOutlivesItsStream(t *testing.T) {
	c := start(t, Options{Server: serverKinds["streamable stateful"](t)})
	waitPhase(t, c, v1alpha1.PhaseReady)
	forward := func(text string) json.RawMessage {
		raw, err := forwardRaw(c, text, AcceptsStateful)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	first := forward("first")
	kept := string(first)
	for _, text := range []string{"second", strings.Repeat("x", 3000), strings.Repeat("y", 9000)} {
		forward(text)
	}
	if string(first) != kept || !strings.Contains(kept, `"first"`) {
		t.Fatalf("the first result changed under the calls after it: %s, was %s", first, kept)
	}
}

// Takes answers ErrUnavailable while no session is Ready.
func TestTakesBeforeReady(t *testing.T) {
	c := start(t, Options{Server: v1alpha1.MCPServer{Name: "never", Stdio: &v1alpha1.StdioServer{Command: "/nonexistent/mcp-server"}}})
	if err := c.Takes(AcceptsAny); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Takes before Ready: %v", err)
	}
}

func asJSON(t *testing.T, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// A forwarded request abandoned by its caller is cancelled at the server.
func TestForwardCancelReachesServer(t *testing.T) {
	var logs logSink
	c := start(t, Options{Server: stdioServer("hanger", "--name", "hanger", "--protocol", "2025-11-25"), Log: logs.logger()})
	waitPhase(t, c, v1alpha1.PhaseReady)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := c.Forward(ctx, "tools/call", []byte(`"name":"hang","arguments":{}`), nil, AcceptsStateful); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("an abandoned call: %v", err)
	}
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(logs.all(), "hang cancelled"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the server did not see the cancellation; log:\n%s", logs.all())
		}
	}
	if res, err := forwardEcho(t, c, "after", AcceptsStateful); err != nil || textOf(res) != "after" {
		t.Fatalf("the connection must go on: %v", err)
	}
}

// A server's answer larger than --max-message-bytes fails that request with an error naming the
// bound, and the connection goes on.
func TestForwardBoundsMessageSize(t *testing.T) {
	for name, server := range map[string]func(t *testing.T) v1alpha1.MCPServer{
		"stdio": func(*testing.T) v1alpha1.MCPServer { return stdioServer("s", "--protocol", "2025-11-25") },
		"streamable": func(t *testing.T) v1alpha1.MCPServer {
			return v1alpha1.MCPServer{Name: "h", HTTP: &v1alpha1.HTTPServer{URL: fixture.StartHTTP(t) + "/mcp"}}
		},
	} {
		t.Run(name, func(t *testing.T) {
			c := start(t, Options{Server: server(t), Settings: Settings{MaxMessageBytes: 1 << 20}})
			waitPhase(t, c, v1alpha1.PhaseReady)
			if _, err := forwardEcho(t, c, strings.Repeat("x", 2<<20), AcceptsStateful); err == nil || !strings.Contains(err.Error(), "exceeds --max-message-bytes (1 MiB)") {
				t.Fatalf("an answer over the bound: %v", err)
			}
			if res, err := forwardEcho(t, c, "small", AcceptsStateful); err != nil || textOf(res) != "small" {
				t.Fatalf("the connection must go on: %v", err)
			}
		})
	}
}

// A server that answers a forwarded request with an HTTP error is reported by status code:
// the body (it may hold anything) is never repeated in the error. A server that forgot the
// session is re-initialized and the request sent again.
func TestForwardHTTPErrorsAndSessionLoss(t *testing.T) {
	base := fixture.StartHTTP(t)
	target, _ := url.Parse(base)
	proxy := httputil.NewSingleHostReverseProxy(target)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if bytes.Contains(body, []byte(`"boom"`)) {
			http.Error(w, "internal detail: SECRET-BODY", http.StatusInternalServerError)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	c := start(t, Options{Server: v1alpha1.MCPServer{Name: "h", HTTP: &v1alpha1.HTTPServer{URL: front.URL + "/mcp"}}})
	waitPhase(t, c, v1alpha1.PhaseReady)
	_, err := forwardEcho(t, c, "boom", AcceptsStateful)
	if err == nil || strings.Contains(err.Error(), "SECRET-BODY") || !strings.Contains(err.Error(), "HTTP 500") {
		t.Fatalf("an HTTP error: %v", err)
	}
	call(t, c, "forget_sessions", nil)
	time.Sleep(200 * time.Millisecond) // the fixture swaps its handler just after answering
	if res, err := forwardEcho(t, c, "again", AcceptsStateful); err != nil || textOf(res) != "again" {
		t.Fatalf("a forwarded call after the server forgot the session: %v", err)
	}
	front.CloseClientConnections()
}

// silentCaller is a session that never answers a server's request.
type silentCaller struct{}

func (silentCaller) CreateMessage(ctx context.Context, _ *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (silentCaller) Elicit(ctx context.Context, _ *mcp.ElicitParams) (*mcp.ElicitResult, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// A session that never answers the server's elicitation costs the server an error after
// ServerRequestTimeout, and the call ends; the connection goes on.
func TestServerRequestToSilentSessionIsBounded(t *testing.T) {
	defer func(old time.Duration) { ServerRequestTimeout = old }(ServerRequestTimeout)
	ServerRequestTimeout = 500 * time.Millisecond
	c := start(t, Options{Server: v1alpha1.MCPServer{Name: "h", HTTP: &v1alpha1.HTTPServer{URL: fixture.StartHTTP(t) + "/mcp"}}})
	waitPhase(t, c, v1alpha1.PhaseReady)
	ctx, cancel := context.WithTimeout(WithCaller(context.Background(), silentCaller{}), 20*time.Second)
	defer cancel()
	start := time.Now()
	raw, err := c.Forward(ctx, "tools/call", []byte(`"name":"elicit","arguments":{"text":"hi"}`), nil, AcceptsStateful)
	if ctx.Err() != nil {
		t.Fatalf("the call must end when the server's request times out, not after %s", time.Since(start))
	}
	if err == nil && !bytes.Contains(raw, []byte(`"isError":true`)) {
		t.Fatalf("an unanswered elicitation must fail the call: %s", raw)
	}
	if res, err := forwardEcho(t, c, "after", AcceptsStateful); err != nil || textOf(res) != "after" {
		t.Fatalf("the connection must go on: %v", err)
	}
}

// A server whose tool list never settles (a change every 20 ms: the SDK's server holds back a
// list_changed until its list has been still for 10 ms) is re-listed at most once per
// minRelistInterval, so the connection's observers (status, sessions) see a bounded rate.
func TestListChangedStormCoalesced(t *testing.T) {
	c := start(t, Options{Server: stdioServer("s", "--protocol", "2025-11-25", "--flap", "20ms")})
	before := waitPhase(t, c, v1alpha1.PhaseReady).Generation
	relists := c.counts.relists.Load()
	const window = 2 * time.Second
	time.Sleep(window)
	changes, relists := c.Snapshot().Generation-before, c.counts.relists.Load()-relists
	// At most one re-list per interval in the window, and one more for a list_changed that
	// came at its start; the server sent about a hundred meanwhile.
	limit := uint64(window/minRelistInterval) + 2
	if changes > limit || relists > limit {
		t.Fatalf("%d changes and %d re-lists in %s, want at most %d", changes, relists, window, limit)
	}
	if relists < limit/2 {
		t.Fatalf("the tool list must still be followed: %d re-lists in %s", relists, window)
	}
}

// On a 2026-07-28 HTTP session every forwarded request and notification carries the standard headers
// the server checks against the body (Mcp-Method; Mcp-Name for tools/call), and the server
// takes them: the cancellation of an abandoned call included.
func TestForwardedStandardHeadersOnStatelessHTTP(t *testing.T) {
	target, _ := url.Parse(fixture.StartHTTP(t, "--stateless"))
	proxy := httputil.NewSingleHostReverseProxy(target)
	var mu sync.Mutex
	type seenAs struct {
		method, name string // the headers
		code         int    // the server's answer
	}
	seen := map[string]seenAs{} // by the body's method
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		var msg struct {
			ID     any    `json:"id"`
			Method string `json:"method"`
			Params struct {
				Name string `json:"name"`
			} `json:"params"`
		}
		_ = json.Unmarshal(body, &msg)
		ours := msg.Method == "notifications/cancelled" || strings.HasPrefix(fmt.Sprint(msg.ID), forwardIDPrefix)
		if msg.Method == "tools/call" && msg.Params.Name == "sleep" {
			ours = false // abandoned before its answer
		}
		rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
		proxy.ServeHTTP(rec, r)
		if ours {
			mu.Lock()
			seen[msg.Method] = seenAs{r.Header.Get("Mcp-Method"), r.Header.Get("Mcp-Name"), rec.code}
			mu.Unlock()
		}
	}))
	t.Cleanup(front.Close)
	c := start(t, Options{Server: v1alpha1.MCPServer{Name: "h", HTTP: &v1alpha1.HTTPServer{URL: front.URL + "/mcp"}}})
	waitPhase(t, c, v1alpha1.PhaseReady)
	if res, err := forwardEcho(t, c, "x", AcceptsAny); err != nil || textOf(res) != "x" {
		t.Fatalf("forwarded echo: %+v %v", res, err)
	}
	// A call abandoned early; it ends by itself soon after (a stateless server does not stop
	// a call it is told is cancelled), so nothing of it outlives the test.
	began := time.Now()
	defer func() { time.Sleep(time.Until(began.Add(1500 * time.Millisecond))) }()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	_, err := c.Forward(ctx, "tools/call", []byte(`"name":"sleep","arguments":{"ms":800}`), nil, AcceptsAny)
	cancel()
	if err == nil {
		t.Fatal("an abandoned call must fail")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		call, callSeen := seen["tools/call"]
		cancelled, cancelSeen := seen["notifications/cancelled"]
		mu.Unlock()
		if callSeen && cancelSeen {
			if call != (seenAs{"tools/call", "echo", http.StatusOK}) {
				t.Fatalf("the forwarded tools/call: headers %q %q, status %d", call.method, call.name, call.code)
			}
			if cancelled.method != "notifications/cancelled" || cancelled.name != "" || cancelled.code >= 300 {
				t.Fatalf("the cancellation: headers %q %q, status %d", cancelled.method, cancelled.name, cancelled.code)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("seen: %+v", seen)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.code = code
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// nameOf reads the name a request's Mcp-Name header carries, wherever the member is.
func TestNameOf(t *testing.T) {
	for _, c := range []struct{ method, params, want string }{
		{"tools/call", `{"name":"echo","arguments":{"text":"x"}}`, "echo"},
		{"tools/call", `{"arguments":{"name":"not this"},"name":"echo"}`, "echo"},
		{"prompts/get", `{"arguments":{"a":"b"},"name":"greet","_meta":{}}`, "greet"},
		{"resources/read", `{"uri":"fixture://a/readme"}`, "fixture://a/readme"},
		{"resources/read", `{"_meta":{"uri":"no"},"uri":"fixture://a/x"}`, "fixture://a/x"},
		{"tools/list", `{"name":"ignored"}`, ""},
		{"tools/call", `{"name":7}`, ""},
	} {
		if got := nameOf(c.method, json.RawMessage(c.params)); got != c.want {
			t.Errorf("nameOf(%s, %s) = %q, want %q", c.method, c.params, got, c.want)
		}
	}
}
