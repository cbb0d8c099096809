package conn

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
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
		if res, err := forwardEcho(t, c, text, Legacy); err != nil || textOf(res) != text {
			t.Fatalf("a forwarded call to a redirecting server: %v", err)
		}
	}
	if redirected.Load() == 0 {
		t.Fatal("the server redirected nothing")
	}
}

// A forwarded call to a plain-HTTP server goes on the carrier, and its TCP connection is kept
// for the next: calls one after the other open no connection the pool did not keep already.
func TestForwardGoesOnTheCarrier(t *testing.T) {
	target, _ := url.Parse(fixture.StartHTTP(t))
	c := start(t, Options{Server: v1alpha1.MCPServer{Name: "h", HTTP: &v1alpha1.HTTPServer{URL: target.String() + "/mcp"}}})
	waitPhase(t, c, v1alpha1.PhaseReady)
	_, pool, release := sharedTransport(nil)
	defer release()
	before := pool.Idle(target.Host) // the lists' connections
	for _, text := range []string{"one", "two", "three"} {
		if res, err := forwardEcho(t, c, text, Legacy); err != nil || textOf(res) != text {
			t.Fatalf("a forwarded call: %v", err)
		}
	}
	if kept := pool.Idle(target.Host); before == 0 || kept != before {
		t.Fatalf("%d connections kept by the carrier after three calls, %d before, want as many and some", kept, before)
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
	if res, err := forwardEcho(t, c, "one", Legacy); err != nil || textOf(res) != "one" {
		t.Fatalf("a call whose stream is held open: %v", err)
	}
	if released.Load() {
		t.Fatal("the call was answered only once the server ended its stream")
	}
	if ct := <-held; ct != "text/event-stream" {
		t.Fatalf("the held answer is %q, want an event stream", ct)
	}
	if res, err := forwardEcho(t, c, "two", Legacy); err != nil || textOf(res) != "two" {
		t.Fatalf("a call while the last stream's end is still to come: %v", err)
	}
	if !safety.Stop() {
		t.Fatal("the second call waited for the first call's stream to end")
	}
	close(end)
	for _, text := range []string{"three", "four"} {
		if res, err := forwardEcho(t, c, text, Legacy); err != nil || textOf(res) != text {
			t.Fatalf("a call once the stream ended: %v", err)
		}
	}
}
