package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/gateway"
	"github.com/dsh-dev/projectmcp/internal/testenv/harness"
	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// A 2025-11-25 session's call is a resumable stream: it opens with a priming event (an id, a
// retry field, no data); a client that drops the connection mid-call resumes with a GET naming
// the last id it read and gets the rest, the result included (so the drop did not cancel the
// call); another session cannot resume it.
func TestGatewayResumesACallStream(t *testing.T) {
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "resume", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "a", "--protocol", "2025-11-25")}})
	obj := harness.WaitStatus(t, key, 30*time.Second, "Ready", func(o *v1alpha1.ProjectMCP) bool { return harness.IsReady(o) && o.Status.Endpoint != "" })
	url := obj.Status.Endpoint
	open := func(name string) string {
		sid := post(t, url, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"`+name+`","version":"1"}}}`)
		post(t, url, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		return sid
	}
	sid, other := open("resumer"), open("other")

	ctx, drop := context.WithCancel(context.Background())
	defer drop()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(
		`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"a__sleep","arguments":{"ms":1200},"_meta":{"progressToken":"p"}}}`))
	setSession(req, sid)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("a call's answer is an event stream, not %q", ct)
	}
	events := bufio.NewReader(resp.Body)
	priming := readEvent(t, events)
	if priming.id == "" || priming.retry == "" || priming.data != "" {
		t.Fatalf("the first event must prime the stream: %+v", priming)
	}
	progress := readEvent(t, events)
	if progress.id == "" || !strings.Contains(progress.data, `"notifications/progress"`) {
		t.Fatalf("a progress event with an id: %+v", progress)
	}
	drop() // the connection goes, mid-call
	resp.Body.Close()

	if code := resumeStatus(t, url, other, progress.id); code != http.StatusBadRequest {
		t.Fatalf("another session resuming the stream: HTTP %d, want 400", code)
	}
	get, _ := http.NewRequest(http.MethodGet, url, nil)
	setSession(get, sid)
	get.Header.Set("Accept", "text/event-stream")
	get.Header.Set("Last-Event-ID", progress.id)
	resumed, err := http.DefaultClient.Do(get)
	if err != nil || resumed.StatusCode != http.StatusOK {
		t.Fatalf("resuming: %v %v", resumed, err)
	}
	defer resumed.Body.Close()
	rest := bufio.NewReader(resumed.Body)
	for {
		e := readEvent(t, rest)
		if e.id == "" || e.id == progress.id {
			t.Fatalf("a resumed stream's events come after the one named, with ids: %+v", e)
		}
		if strings.Contains(e.data, `"id":7`) {
			if !strings.Contains(e.data, "slept 1200 ms") {
				t.Fatalf("the call's result: %s", e.data)
			}
			return
		}
	}
}

func setSession(req *http.Request, sid string) {
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	req.Header.Set("Mcp-Session-Id", sid)
}

func resumeStatus(t *testing.T, url, sid, lastEventID string) int {
	t.Helper()
	get, _ := http.NewRequest(http.MethodGet, url, nil)
	setSession(get, sid)
	get.Header.Set("Accept", "text/event-stream")
	get.Header.Set("Last-Event-ID", lastEventID)
	resp, err := http.DefaultClient.Do(get)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// sseEvent is one event of a stream as a client reads it.
type sseEvent struct{ id, retry, data string }

// readEvent reads the next event of an event stream (within 10 s).
func readEvent(t *testing.T, r *bufio.Reader) sseEvent {
	t.Helper()
	done := make(chan sseEvent, 1)
	fail := make(chan error, 1)
	go func() {
		e, err := nextEvent(r) // endpoint_replay_test.go
		if err != nil {
			fail <- err
			return
		}
		done <- e
	}()
	select {
	case e := <-done:
		return e
	case err := <-fail:
		t.Fatalf("reading the stream: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10 s")
	}
	return sseEvent{}
}

// A 2025-11-25 server's request during a call reaches the session on that call's own stream,
// as a direct client gets it: a session with no GET stream open gets it, only its own answer
// is taken, and the call ends with what it answered.
func TestGatewayServerRequestOnTheCallsStream(t *testing.T) {
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "asks", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "a", "--protocol", "2025-11-25")}})
	obj := harness.WaitStatus(t, key, 30*time.Second, "Ready", func(o *v1alpha1.ProjectMCP) bool { return harness.IsReady(o) && o.Status.Endpoint != "" })
	url := obj.Status.Endpoint
	open := func(name string) string {
		sid := post(t, url, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"elicitation":{}},"clientInfo":{"name":"`+name+`","version":"1"}}}`)
		post(t, url, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		return sid
	}
	sid, other := open("asked"), open("other") // neither opens a GET stream

	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"a__elicit","arguments":{"text":"which?"}}}`))
	setSession(req, sid)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	events := bufio.NewReader(resp.Body)
	readEvent(t, events) // priming
	ask := readEvent(t, events)
	var msg struct {
		ID     string `json:"id"`
		Method string `json:"method"`
		Params struct {
			Message string `json:"message"`
		} `json:"params"`
	}
	if err := json.Unmarshal([]byte(ask.data), &msg); err != nil || msg.Method != "elicitation/create" || msg.Params.Message != "which?" || msg.ID == "" {
		t.Fatalf("the server's request on the call's stream: %+v (%v)", ask, err)
	}
	answer := `{"jsonrpc":"2.0","id":"` + msg.ID + `","result":{"action":"accept","content":{"answer":"%s"}}}`
	postStatus(t, url, other, fmt.Sprintf(answer, "not yours")) // not taken: the result says (below)
	if code := postStatus(t, url, sid, fmt.Sprintf(answer, "this one")); code != http.StatusAccepted {
		t.Fatalf("the session's answer: HTTP %d, want 202", code)
	}
	result := readEvent(t, events)
	if !strings.Contains(result.data, `"id":3`) || !strings.Contains(result.data, "this one") || strings.Contains(result.data, "not yours") {
		t.Fatalf("the call's result: %s", result.data)
	}
}

func postStatus(t *testing.T, url, sid, body string) int {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	setSession(req, sid)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// A 2026-07-28 session subscribes to a resource through subscriptions/listen (the revision
// has no resources/subscribe): the listen stream is acknowledged, carries the resource's
// updates, and still its list_changed.
func TestGatewayStatelessResourceSubscription(t *testing.T) {
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "listen", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "a")}})
	obj := harness.WaitStatus(t, key, 30*time.Second, "Ready", func(o *v1alpha1.ProjectMCP) bool { return harness.IsReady(o) && o.Status.Endpoint != "" })
	updates, changed := make(chan string, 16), make(chan struct{}, 16)
	client := mcp.NewClient(&mcp.Implementation{Name: "listener", Version: "1"}, &mcp.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, r *mcp.ResourceUpdatedNotificationRequest) { updates <- r.Params.URI },
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	})
	s := harness.MustDial(t, client, obj.Status.Endpoint, "2026-07-28", http.Header{gateway.SessionHeader: {"listener"}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const uri = "fixture://a/readme"
	if err := s.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
		t.Fatalf("subscribing through subscriptions/listen: %v", err)
	}
	testutil.Eventually(t, 10*time.Second, "the resource's update on the listen stream", func() bool {
		callOK(t, s, "a__touch_resource", map[string]any{"uri": uri})
		select {
		case got := <-updates:
			return got == uri
		case <-time.After(300 * time.Millisecond):
			return false
		}
	})
	callOK(t, s, "a__add_tool", map[string]any{"name": "after_listen"})
	select {
	case <-changed:
	case <-ctx.Done():
		t.Fatal("list_changed must still reach the session")
	}
}

// A call that a disconnect does not end (its client may resume it) ends with its session: a
// session deleted while its call runs has the call cancelled at the server, not left to run
// on to --call-timeout.
func TestGatewaySessionEndCancelsItsCalls(t *testing.T) {
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "end", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "ender", "--protocol", "2025-11-25")}})
	obj := harness.WaitStatus(t, key, 30*time.Second, "Ready", func(o *v1alpha1.ProjectMCP) bool { return harness.IsReady(o) && o.Status.Endpoint != "" })
	url := obj.Status.Endpoint
	sid := post(t, url, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"ender","version":"1"}}}`)
	post(t, url, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)

	go func() { // the call's request stays open: only the session's end can cancel it
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"ender__hang","arguments":{}}}`))
		setSession(req, sid)
		req.Header.Set("Content-Type", "application/json")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	testutil.Eventually(t, 10*time.Second, "the call to reach the server", func() bool {
		return strings.Contains(harness.Logs.String(), "fixture ender: hang started")
	})
	del, _ := http.NewRequest(http.MethodDelete, url, nil)
	setSession(del, sid)
	resp, err := http.DefaultClient.Do(del)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// Well within the suite's CallTimeout (harness), which would end the call anyway.
	testutil.Eventually(t, harness.CallTimeout/2, "the server to see the cancellation", func() bool {
		return strings.Contains(harness.Logs.String(), "fixture ender: hang cancelled")
	})
}
