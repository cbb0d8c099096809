package conn

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/test/fixture"
)

// cutConn is a connection to a fixture whose tool cut_stream ends its own call's stream
// before answering (args: --resumable for event ids), Ready, and the channel closed at its
// next change.
func cutConn(t *testing.T, args ...string) (*Conn, <-chan struct{}) {
	t.Helper()
	url := fixture.StartHTTP(t, append([]string{"--cut-streams"}, args...)...) + "/mcp"
	c := start(t, Options{Server: v1alpha1.MCPServer{Name: "h", HTTP: &v1alpha1.HTTPServer{URL: url}}})
	waitPhase(t, c, v1alpha1.PhaseReady)
	return c, c.Changed()
}

// forwardCut forwards cut_stream as one session, with the progress it gets.
func forwardCut(c *Conn, args string) (RawResult, []string, error) {
	var mu sync.Mutex
	var progress []string
	ctx, cancel := context.WithTimeout(WithCaller(context.Background(), &fakeCaller{}), 20*time.Second)
	defer cancel()
	raw, err := c.Forward(ctx, "tools/call", []byte(`"name":"cut_stream","arguments":`+args), func(p *mcp.ProgressNotificationParams) {
		mu.Lock()
		defer mu.Unlock()
		progress = append(progress, p.Message)
	}, AcceptsStateful)
	mu.Lock()
	defer mu.Unlock()
	return raw, progress, err
}

// bystander runs another session's call on c (a sleep with progress) beside the test's own;
// wait reports it failing or losing its progress.
func bystander(t *testing.T, c *Conn) (wait func()) {
	finished := make(chan struct{})
	var err error
	var progress int
	go func() {
		defer close(finished)
		ctx, cancel := context.WithTimeout(WithCaller(context.Background(), &fakeCaller{}), 20*time.Second)
		defer cancel()
		var raw RawResult
		raw, err = c.Forward(ctx, "tools/call", []byte(`"name":"sleep","arguments":{"ms":600}`), func(*mcp.ProgressNotificationParams) { progress++ }, AcceptsStateful)
		if err == nil && !bytes.Contains(raw, []byte("slept 600 ms")) {
			err = fmt.Errorf("result %s", raw)
		}
	}()
	t.Cleanup(func() { <-finished })
	return func() {
		t.Helper()
		<-finished
		if err != nil || progress == 0 {
			t.Errorf("another session's call on the connection: %v, %d progress notifications", err, progress)
		}
	}
}

// steady fails the test when the connection changed (a reconnect, a phase) since changed was
// taken: given a moment, as the supervisor acts on a call's death signal by itself.
func steady(t *testing.T, c *Conn, changed <-chan struct{}) {
	t.Helper()
	select {
	case <-changed:
		s := c.Snapshot()
		t.Fatalf("the connection changed: now %s (%s), %d reconnect attempts", s.Phase, s.LastError, s.ReconnectAttempts)
	case <-time.After(300 * time.Millisecond):
	}
}

// A server that ends a call's stream before answering, having given its events ids, is
// resumed (after the retry it asked for): the call gets the progress sent before and after the
// cut and its result, and the connection and another session's call on it go on untouched.
func TestForwardResumesCutStream(t *testing.T) {
	c, changed := cutConn(t, "--resumable")
	wait := bystander(t, c)
	raw, progress, err := forwardCut(c, `{"ms":200,"retry_ms":50}`)
	if err != nil || !bytes.Contains(raw, []byte("answered after the cut")) {
		t.Fatalf("a call whose stream the server cut: %s %v", raw, err)
	}
	if strings.Join(progress, ", ") != "before the cut, after the cut" {
		t.Errorf("the call's progress: %q", progress)
	}
	wait()
	if res, err := forwardEcho(t, c, "after", AcceptsStateful); err != nil || textOf(res) != "after" {
		t.Fatalf("a call after: %v", err)
	}
	steady(t, c, changed)
}

// Without event ids the stream cannot be resumed: only that call fails, saying it may have
// run (it is not sent again), and the connection goes on for every session.
func TestForwardCutStreamWithoutIDsFailsOnlyTheCall(t *testing.T) {
	c, changed := cutConn(t)
	wait := bystander(t, c)
	_, _, err := forwardCut(c, `{"ms":100}`)
	want := `MCP server "h": the server ended the call's stream before answering; it may or may not have completed`
	if err == nil || err.Error() != want {
		t.Fatalf("a call whose stream the server cut:\n got %v\nwant %s", err, want)
	}
	if res, err := forwardEcho(t, c, "after", AcceptsStateful); err != nil || textOf(res) != "after" {
		t.Fatalf("a call right after: %v", err)
	}
	wait()
	steady(t, c, changed)
}

// A server that ends the resumed stream again and again with nothing new is given up on after
// maxStaleResumes resumes: the call, sent once, fails saying it may have run, and the
// connection goes on.
func TestForwardStaleResumesBounded(t *testing.T) {
	target, _ := url.Parse(fixture.StartHTTP(t, "--cut-streams", "--resumable"))
	proxy := httputil.NewSingleHostReverseProxy(target)
	var resumes, sent atomic.Int32
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Last-Event-ID") != "" { // each resume ends at once, asking for 10 ms
			resumes.Add(1)
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "retry: 10\n\n")
			return
		}
		body, _ := io.ReadAll(r.Body)
		if bytes.Contains(body, []byte(`"cut_stream"`)) {
			sent.Add(1)
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	c := start(t, Options{Server: v1alpha1.MCPServer{Name: "h", HTTP: &v1alpha1.HTTPServer{URL: front.URL + "/mcp"}}})
	waitPhase(t, c, v1alpha1.PhaseReady)
	changed := c.Changed()
	_, _, err := forwardCut(c, `{"ms":100}`)
	want := fmt.Sprintf("(resumed %d times in a row without a new event); it may or may not have completed", maxStaleResumes)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("a call whose stream is never resumed:\n got %v\nwant ...%s", err, want)
	}
	if resumes.Load() != maxStaleResumes || sent.Load() != 1 {
		t.Fatalf("%d resumes, the call sent %d times", resumes.Load(), sent.Load())
	}
	if res, err := forwardEcho(t, c, "after", AcceptsStateful); err != nil || textOf(res) != "after" {
		t.Fatalf("a call right after: %v", err)
	}
	steady(t, c, changed)
	front.CloseClientConnections()
}
