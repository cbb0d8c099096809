package conn

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/test/fixture"
)

// A server that redirects its endpoint (/mcp to /mcp/, as some frameworks do) gets forwarded
// calls through the HTTP client, which follows the redirect as it did for the SDK's own
// requests.
func TestForwardFollowsARedirect(t *testing.T) {
	target, _ := url.Parse(fixture.StartHTTP(t))
	proxy := httputil.NewSingleHostReverseProxy(target)
	var redirected atomic.Int32
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/mcp" {
			redirected.Add(1)
			http.Redirect(w, r, "/mcp/", http.StatusTemporaryRedirect)
			return
		}
		r.URL.Path = "/mcp"
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	c := start(t, Options{Server: v1alpha1.MCPServer{Name: "h", HTTP: &v1alpha1.HTTPServer{URL: front.URL + "/mcp"}}})
	waitPhase(t, c, v1alpha1.PhaseReady)
	for _, text := range []string{"one", "two"} {
		if res, err := forwardEcho(t, c, text, AcceptsStateful); err != nil || textOf(res) != text {
			t.Fatalf("a forwarded call to a redirecting server: %v", err)
		}
	}
	if redirected.Load() == 0 {
		t.Fatal("the server redirected nothing")
	}
}

// A forwarded call to a plain-HTTP server goes on the carrier, and its TCP connection is kept
// for the next: calls one after the other open no TCP connection, and the carrier's pool keeps
// as many as before them, and some. What the test counts is the calls' own: probes and
// re-lists are an hour away, and before each count it waits until the connection's own
// requests (initialize, its lists) and the last call are done at both ends: the server has
// written every answer to its end (every TCP connection but the event stream's is idle; on
// loopback the end is then at the carrier's socket), and the carrier has read them and keeps
// every connection open but the event stream's. Counted while they were still under way, a
// request that found every kept connection still owing the end of its last answer opened one,
// by design, and a connection the SDK's reader gave back late came into the count.
func TestForwardGoesOnTheCarrier(t *testing.T) {
	target, _ := url.Parse(fixture.StartHTTP(t))
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.FlushInterval = -1 // each event as it comes
	var mu sync.Mutex
	states := map[net.Conn]http.ConnState{}
	accepted, streams := 0, 0
	front := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			mu.Lock()
			streams++
			mu.Unlock()
		}
		proxy.ServeHTTP(w, r)
	}))
	front.Config.ConnState = func(c net.Conn, state http.ConnState) {
		mu.Lock()
		defer mu.Unlock()
		if state == http.StateNew {
			accepted++
		}
		states[c] = state
	}
	front.Start()
	t.Cleanup(front.Close)
	c := start(t, Options{Server: v1alpha1.MCPServer{Name: "h", HTTP: &v1alpha1.HTTPServer{URL: front.URL + "/mcp"}},
		Settings: Settings{HealthInterval: time.Hour, RelistInterval: time.Hour}})
	waitPhase(t, c, v1alpha1.PhaseReady)
	_, pool, release := sharedTransport(nil)
	defer release()
	host := strings.TrimPrefix(front.URL, "http://")
	// settled is the TCP connections accepted and those the carrier keeps, once both ends
	// are done.
	settled := func() (opened, kept int) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			mu.Lock()
			open, busy := 0, 0
			for _, s := range states {
				if s == http.StateNew || s == http.StateActive {
					busy++
				}
				if s != http.StateClosed {
					open++
				}
			}
			opened, kept = accepted, pool.Idle(host)
			gets := streams
			mu.Unlock()
			if gets == 1 && busy == 1 && kept == open-1 { // the event stream's alone is busy, and not kept
				return opened, kept
			}
			if time.Now().After(deadline) {
				t.Fatalf("the connection's requests never settled: %d TCP connections open, %d busy, %d kept by the carrier; %d event streams",
					open, busy, kept, gets)
			}
		}
	}
	before, kept := settled() // the connection's own requests' connections
	if kept == 0 {
		t.Fatalf("the carrier keeps no connection to the server before the calls (%d opened)", before)
	}
	for _, text := range []string{"one", "two", "three"} {
		if res, err := forwardEcho(t, c, text, AcceptsStateful); err != nil || textOf(res) != text {
			t.Fatalf("a forwarded call: %v", err)
		}
		if n, now := settled(); n != before || now != kept {
			t.Fatalf("after the call %q: %d TCP connections opened and %d kept by the carrier, want %d and %d as before it",
				text, n, now, before, kept)
		}
	}
}

// A forwarded call is answered once the server's response event comes, not once the server
// ends the stream after it, as through a proxy that passes each event on; a call while that
// end is still to come does not wait for it either.
func TestForwardAnswersBeforeTheStreamEnds(t *testing.T) {
	target, _ := url.Parse(fixture.StartHTTP(t))
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.FlushInterval = -1 // each event as it comes
	var hold atomic.Pointer[chan struct{}]
	held := make(chan string, 1) // the content type of a held answer
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		proxy.ServeHTTP(w, r)
		if h := hold.Load(); h != nil && bytes.Contains(body, []byte(`"tools/call"`)) && hold.CompareAndSwap(h, nil) {
			held <- w.Header().Get("Content-Type")
			<-*h // the stream ends when the handler returns
		}
	}))
	t.Cleanup(front.Close)
	c := start(t, Options{Server: v1alpha1.MCPServer{Name: "h", HTTP: &v1alpha1.HTTPServer{URL: front.URL + "/mcp"}}})
	waitPhase(t, c, v1alpha1.PhaseReady)
	end := make(chan struct{})
	hold.Store(&end)
	released := atomic.Bool{}
	safety := time.AfterFunc(3*time.Second, func() { released.Store(true); close(end) })
	if res, err := forwardEcho(t, c, "one", AcceptsStateful); err != nil || textOf(res) != "one" {
		t.Fatalf("a call whose stream is held open: %v", err)
	}
	if released.Load() {
		t.Fatal("the call was answered only once the server ended its stream")
	}
	if ct := <-held; ct != "text/event-stream" {
		t.Fatalf("the held answer is %q, want an event stream", ct)
	}
	if res, err := forwardEcho(t, c, "two", AcceptsStateful); err != nil || textOf(res) != "two" {
		t.Fatalf("a call while the last stream's end is still to come: %v", err)
	}
	if !safety.Stop() {
		t.Fatal("the second call waited for the first call's stream to end")
	}
	close(end)
	for _, text := range []string{"three", "four"} {
		if res, err := forwardEcho(t, c, text, AcceptsStateful); err != nil || textOf(res) != text {
			t.Fatalf("a call once the stream ended: %v", err)
		}
	}
}
