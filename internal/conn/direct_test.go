package conn

import (
	"bytes"
	"context"
	"errors"
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

// directServer is a loopback HTTP server a direct sends to, counting the TCP connections it
// accepted and closed, and keeping them (to close one under the direct).
type directServer struct {
	*httptest.Server
	accepted atomic.Int32
	closed   atomic.Int32
	mu       sync.Mutex
	conns    []net.Conn
}

func startDirectServer(t *testing.T, h http.HandlerFunc) *directServer {
	s := &directServer{Server: httptest.NewUnstartedServer(h)}
	s.Config.ConnState = func(c net.Conn, state http.ConnState) {
		if state == http.StateNew {
			s.accepted.Add(1)
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
		}
		if state == http.StateClosed {
			s.closed.Add(1)
		}
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

// closeConns closes, from the server's side, every connection it accepted.
func (s *directServer) closeConns() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		_ = c.Close()
	}
}

// newTestDirect is a direct to s with headers, and the pool it keeps connections in.
func newTestDirect(t *testing.T, s *directServer, headers http.Header) (*direct, *idleConns) {
	u, _ := url.Parse(s.URL + "/mcp?x=1")
	pool := newIdleConns(nil)
	t.Cleanup(pool.close)
	w := newDirect(u, &http.Transport{}, pool, headers)
	if w == nil {
		t.Fatal("no direct to a plain-HTTP server without a proxy")
	}
	return w, pool
}

// directPost sends body on w, as the upstream does, and returns the answer's body.
func directPost(ctx context.Context, w *direct, target string, body string, header http.Header) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, strings.NewReader(body))
	if err != nil {
		return "", err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := w.roundTrip(req, []byte(body))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	return string(got), err
}

// The server gets from a direct the request net/http's Transport sends, configured headers and
// all; only Accept-Encoding is not asked for (the answer is read as the server sends it). So
// does it for a connection's own requests (directTransport): the SDK client's POSTs, its event
// stream's GET and its closing DELETE.
func TestDirectSendsWhatTheTransportSends(t *testing.T) {
	type seen struct {
		method, uri, host, proto string
		length                   int64
		header                   http.Header
		body                     string
	}
	got := make(chan seen, 2)
	s := startDirectServer(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h := r.Header.Clone()
		h.Del("Accept-Encoding")
		got <- seen{r.Method, r.RequestURI, r.Host, r.Proto, r.ContentLength, h, string(body)}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":true}`)
	})
	configured := http.Header{"Authorization": {"Bearer x"}, "X-Two": {"a", "b"}}
	w, _ := newTestDirect(t, s, configured)
	header := http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json, text/event-stream"}, "Mcp-Method": {"tools/call"}}
	const body = `{"jsonrpc":"2.0","id":"1","method":"tools/call","params":{"name":"echo"}}`
	viaTransport := func(t *testing.T, rt http.RoundTripper, method, body string, header http.Header) seen {
		var r io.Reader
		if body != "" {
			r = strings.NewReader(body)
		}
		req, _ := http.NewRequest(method, s.URL+"/mcp?x=1", r)
		req.Header = header.Clone()
		resp, err := (&http.Client{Transport: &headerTransport{base: rt, headers: configured}}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		answer, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(answer) != `{"ok":true}` {
			t.Fatalf("answer %q", answer)
		}
		return <-got
	}
	same := func(t *testing.T, a, b seen) {
		if a.method != b.method || a.uri != b.uri || a.host != b.host || a.proto != b.proto ||
			a.length != b.length || a.body != b.body || !equalHeaders(a.header, b.header) {
			t.Fatalf("the server saw from the direct:\n%+v\nand from the Transport:\n%+v", a, b)
		}
	}
	t.Run("forwarded", func(t *testing.T) {
		answer, err := directPost(context.Background(), w, s.URL+"/mcp?x=1", body, header)
		if err != nil || answer != `{"ok":true}` {
			t.Fatalf("through the direct: %q, %v", answer, err)
		}
		same(t, <-got, viaTransport(t, http.DefaultTransport, http.MethodPost, body, header))
	})
	for _, tc := range []struct {
		name, method, body string
		header             http.Header
	}{
		{"the SDK's POST", http.MethodPost, body, header},
		{"an empty POST", http.MethodPost, "", header},
		{"the event stream", http.MethodGet, "", http.Header{"Accept": {"text/event-stream"}, "Last-Event-Id": {"7"}}},
		{"the closing DELETE", http.MethodDelete, "", http.Header{"Mcp-Session-Id": {"s"}}},
		{"a User-Agent of its own", http.MethodGet, "", http.Header{"User-Agent": {"agent/1"}}},
		{"no User-Agent", http.MethodGet, "", http.Header{"User-Agent": {""}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			same(t, viaTransport(t, directTransport{d: w, base: refuseTransport{t}}, tc.method, tc.body, tc.header),
				viaTransport(t, http.DefaultTransport, tc.method, tc.body, tc.header))
		})
	}
}

// refuseTransport fails the test it is given when a request reaches it.
type refuseTransport struct{ t *testing.T }

func (r refuseTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r.t.Errorf("%s %s went through the Transport, not direct", req.Method, req.URL)
	return nil, errors.New("not direct")
}

// A request net/http would send in chunks, or to another host, goes through the Transport.
func TestDirectTransportTakes(t *testing.T) {
	u, _ := url.Parse("http://127.0.0.1:8080/mcp")
	d := &direct{host: dialHost(u)}
	stream := func() io.Reader { return io.MultiReader(strings.NewReader("{}")) } // of unknown length
	for name, tc := range map[string]struct {
		method, url string
		body        func() io.Reader
		change      func(*http.Request)
		want        bool
	}{
		"a POST":                    {http.MethodPost, "http://127.0.0.1:8080/mcp", func() io.Reader { return strings.NewReader("{}") }, nil, true},
		"a GET":                     {http.MethodGet, "http://127.0.0.1:8080/mcp", nil, nil, true},
		"a body of no known length": {http.MethodPost, "http://127.0.0.1:8080/mcp", stream, nil, false},
		"another host":              {http.MethodGet, "http://127.0.0.2:8080/mcp", nil, nil, false},
		"another port":              {http.MethodGet, "http://127.0.0.1:8081/mcp", nil, nil, false},
		"https":                     {http.MethodGet, "https://127.0.0.1:8080/mcp", nil, nil, false},
		"a close":                   {http.MethodGet, "http://127.0.0.1:8080/mcp", nil, func(r *http.Request) { r.Close = true }, false},
		"Expect":                    {http.MethodPost, "http://127.0.0.1:8080/mcp", func() io.Reader { return strings.NewReader("{}") }, func(r *http.Request) { r.Header.Set("Expect", "100-continue") }, false},
		"a transfer coding":         {http.MethodPost, "http://127.0.0.1:8080/mcp", nil, func(r *http.Request) { r.TransferEncoding = []string{"chunked"} }, false},
		"a trailer":                 {http.MethodPost, "http://127.0.0.1:8080/mcp", nil, func(r *http.Request) { r.Trailer = http.Header{"X": nil} }, false},
	} {
		t.Run(name, func(t *testing.T) {
			var body io.Reader
			if tc.body != nil {
				body = tc.body()
			}
			req, _ := http.NewRequest(tc.method, tc.url, body)
			if tc.change != nil {
				tc.change(req)
			}
			if got := (directTransport{d: d}).takes(req); got != tc.want {
				t.Fatalf("takes = %v, want %v", got, tc.want)
			}
		})
	}
}

func equalHeaders(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if strings.Join(v, "\x00") != strings.Join(b[k], "\x00") {
			return false
		}
	}
	return true
}

// Requests one after the other go on one TCP connection; a connection the server closed
// while it was kept is not used, and the request goes on a new one.
func TestDirectKeepsConnections(t *testing.T) {
	s := startDirectServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "event: message\ndata: {}\n\n")
	})
	w, pool := newTestDirect(t, s, nil)
	for i := range 5 {
		if got, err := directPost(context.Background(), w, s.URL+"/mcp", "{}", nil); err != nil || got != "event: message\ndata: {}\n\n" {
			t.Fatalf("request %d: %q, %v", i, got, err)
		}
	}
	if n := s.accepted.Load(); n != 1 {
		t.Fatalf("5 requests opened %d connections, want 1", n)
	}
	s.closeConns()
	time.Sleep(50 * time.Millisecond) // the close reaches this side
	if _, err := directPost(context.Background(), w, s.URL+"/mcp", "{}", nil); err != nil {
		t.Fatalf("after the server closed the kept connection: %v", err)
	}
	if n := s.accepted.Load(); n != 2 {
		t.Fatalf("%d connections, want a second one", n)
	}
	if kept := pool.kept(w.host); kept != 1 {
		t.Fatalf("%d connections kept, want 1", kept)
	}
}

// A body closed before its end closes its connection (what was left of it is not read), as
// does an answer whose server said it closes the connection.
func TestDirectClosesConnectionsNotReadToTheEnd(t *testing.T) {
	s := startDirectServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("close") != "" {
			w.Header().Set("Connection", "close")
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {}\n\n")
	})
	w, pool := newTestDirect(t, s, nil)
	req, _ := http.NewRequest(http.MethodPost, s.URL+"/mcp", nil)
	resp, err := w.roundTrip(req, []byte("{}"))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = resp.Body.Read(make([]byte, 2))
	resp.Body.Close()
	if kept := pool.kept(w.host); kept != 0 {
		t.Fatalf("a body closed early left %d connections kept", kept)
	}
	if _, err := directPost(context.Background(), w, s.URL+"/mcp?close=1", "{}", nil); err != nil {
		t.Fatal(err)
	}
	if kept := pool.kept(w.host); kept != 0 {
		t.Fatalf("an answer with Connection: close left %d connections kept", kept)
	}
}

// The request's context ends a wait for the answer's headers and a read of its body, with the
// context's cause, and the connection is not kept.
func TestDirectEndsWithTheContext(t *testing.T) {
	release := make(chan struct{})
	s := startDirectServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("body") != "" {
			w.Header().Set("Content-Type", "text/event-stream")
			w.(http.Flusher).Flush()
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	w, pool := newTestDirect(t, s, nil)
	why := errors.New("the session went away")
	for _, target := range []string{s.URL + "/mcp", s.URL + "/mcp?body=1"} {
		ctx, cancel := context.WithCancelCause(context.Background())
		time.AfterFunc(100*time.Millisecond, func() { cancel(why) })
		_, err := directPost(ctx, w, target, "{}", nil)
		if !errors.Is(err, why) {
			t.Fatalf("%s: %v, want the context's cause", target, err)
		}
	}
	if kept := pool.kept(w.host); kept != 0 {
		t.Fatalf("%d cancelled connections kept", kept)
	}
}

// A header value the Transport refuses (a name with a line break in it, say) is refused
// before anything is sent.
func TestDirectRefusesWhatTheTransportRefuses(t *testing.T) {
	s := startDirectServer(t, func(http.ResponseWriter, *http.Request) {})
	w, _ := newTestDirect(t, s, nil)
	for _, h := range []http.Header{{"Mcp-Name": {"a\r\nX-Injected: 1"}}, {"Bad Name": {"v"}}} {
		if _, err := directPost(context.Background(), w, s.URL+"/mcp", "{}", h); err == nil || !strings.Contains(err.Error(), "invalid header field") {
			t.Fatalf("%v: %v, want the header refused", h, err)
		}
	}
	if n := s.accepted.Load(); n != 0 {
		t.Fatalf("refused requests opened %d connections", n)
	}
}

// Where a request must go through the Transport, no direct is made: https, or a proxy for the
// server's URL.
func TestNewDirect(t *testing.T) {
	pool := newIdleConns(nil)
	defer pool.close()
	proxied := &http.Transport{Proxy: func(*http.Request) (*url.URL, error) { return url.Parse("http://127.0.0.1:3128") }}
	for name, tc := range map[string]struct {
		url  string
		t    *http.Transport
		want string
	}{
		"plain http":        {"http://127.0.0.1:8080/mcp", &http.Transport{}, "127.0.0.1:8080"},
		"default port":      {"http://example.test/mcp", &http.Transport{}, "example.test:80"},
		"https":             {"https://example.test/mcp", &http.Transport{}, ""},
		"a name in Unicode": {"http://bücher.example/mcp", &http.Transport{}, ""},
		"a proxy":           {"http://example.test/mcp", proxied, ""},
	} {
		t.Run(name, func(t *testing.T) {
			u, _ := url.Parse(tc.url)
			got := ""
			if d := newDirect(u, tc.t, pool, nil); d != nil {
				got = d.host
			}
			if got != tc.want {
				t.Fatalf("direct to %q, want %q (\"\": none)", got, tc.want)
			}
		})
	}
}

// The pool keeps at most maxIdlePerHost connections to a host, closes those idle for
// idleTimeout, and closes the rest, and any put after, when it is closed.
func TestIdleConnsBounded(t *testing.T) {
	pool := newIdleConns(nil)
	var closed atomic.Int32
	put := func(idle time.Time) {
		a, b := net.Pipe()
		t.Cleanup(func() { b.Close() })
		c := &directConn{Conn: closeCounter{a, &closed}, host: "h:80"}
		pool.put(c)
		c.idle = idle // as if put then
	}
	for range maxIdlePerHost + 3 {
		put(time.Now())
	}
	if kept, shut := pool.kept("h:80"), closed.Load(); kept != maxIdlePerHost || shut != 3 {
		t.Fatalf("kept %d, closed %d; want %d and 3", kept, shut, maxIdlePerHost)
	}
	for _, c := range pool.hosts["h:80"][:10] {
		c.idle = time.Now().Add(-idleTimeout)
	}
	pool.prune()
	if kept, shut := pool.kept("h:80"), closed.Load(); kept != maxIdlePerHost-10 || shut != 13 {
		t.Fatalf("after pruning kept %d, closed %d; want %d and 13", kept, shut, maxIdlePerHost-10)
	}
	pool.close()
	put(time.Now())
	if kept, shut := pool.kept("h:80"), closed.Load(); kept != 0 || shut != maxIdlePerHost+4 {
		t.Fatalf("after close kept %d, closed %d; want none kept, all closed", kept, shut)
	}
}

type closeCounter struct {
	net.Conn
	n *atomic.Int32
}

func (c closeCounter) Close() error { c.n.Add(1); return c.Conn.Close() }

// kept is how many connections to host the pool keeps.
func (p *idleConns) kept(host string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.hosts[host])
}

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

// A forwarded call to a plain-HTTP server goes direct, and its TCP connection is kept for the
// next: calls one after the other open no connection the pool did not keep already.
func TestForwardGoesDirect(t *testing.T) {
	target, _ := url.Parse(fixture.StartHTTP(t))
	c := start(t, Options{Server: v1alpha1.MCPServer{Name: "h", HTTP: &v1alpha1.HTTPServer{URL: target.String() + "/mcp"}}})
	waitPhase(t, c, v1alpha1.PhaseReady)
	_, pool, release := sharedTransport(nil)
	defer release()
	before := pool.kept(target.Host) // the lists' connections
	for _, text := range []string{"one", "two", "three"} {
		if res, err := forwardEcho(t, c, text, Legacy); err != nil || textOf(res) != text {
			t.Fatalf("a forwarded call: %v", err)
		}
	}
	if kept := pool.kept(target.Host); before == 0 || kept != before {
		t.Fatalf("%d direct connections kept to the server after three calls, %d before, want as many and some", kept, before)
	}
}

// A request the server drops on a kept connection, closing it unanswered, is sent again on a
// new one when its method may be (GET, HEAD, DELETE), as the Transport does; a POST fails.
func TestDirectSendsIdempotentRequestsAgain(t *testing.T) {
	var dropped atomic.Bool
	s := startDirectServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Drop") != "" && dropped.CompareAndSwap(false, true) {
			c, _, _ := w.(http.Hijacker).Hijack()
			_ = c.Close()
			return
		}
		_, _ = io.WriteString(w, "ok")
	})
	w, _ := newTestDirect(t, s, nil)
	rt := directTransport{d: w, base: refuseTransport{t}}
	send := func(method string, drop bool) (string, error) {
		req, _ := http.NewRequest(method, s.URL+"/mcp", nil)
		if drop {
			req.Header.Set("X-Drop", "1")
		}
		resp, err := rt.RoundTrip(req)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	for _, tc := range []struct {
		method string
		again  bool
	}{{http.MethodGet, true}, {http.MethodDelete, true}, {http.MethodPost, false}} {
		dropped.Store(false)
		if _, err := send(tc.method, false); err != nil { // a connection to keep
			t.Fatal(err)
		}
		got, err := send(tc.method, true)
		if tc.again && (err != nil || got != "ok") {
			t.Fatalf("%s dropped on a kept connection: %q, %v; want it sent again", tc.method, got, err)
		}
		if !tc.again && err == nil {
			t.Fatalf("%s dropped on a kept connection was sent again", tc.method)
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
	front := startDirectServer(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		proxy.ServeHTTP(w, r)
		if h := hold.Load(); h != nil && bytes.Contains(body, []byte(`"tools/call"`)) && hold.CompareAndSwap(h, nil) {
			held <- w.Header().Get("Content-Type")
			<-*h // the stream ends when the handler returns
		}
	})
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

// A connection given back owing the end of its last answer's stream (endStream) is passed
// over, and kept, while that end is still to come; once it has come, the next request reads
// it and reuses the connection; one that owes an end for maxRestWait is closed.
func TestDirectSettlesWhatAConnectionOwes(t *testing.T) {
	const event = "event: message\ndata: {}\n\n"
	hold := make(chan struct{})
	s := startDirectServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, event)
		if r.URL.Query().Get("hold") != "" {
			w.(http.Flusher).Flush()
			<-hold
		}
	})
	t.Cleanup(func() { close(hold) }) // before the server's close, which waits for its handlers
	w, pool := newTestDirect(t, s, nil)
	owe := func() {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, s.URL+"/mcp?hold=1", nil)
		resp, err := w.roundTrip(req, []byte("{}"))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close() // nothing to do once endStream has given the connection back
		if _, err := io.ReadFull(resp.Body, make([]byte, len(event))); err != nil {
			t.Fatal(err)
		}
		endStream(resp.Body)
	}
	post := func(what string) {
		t.Helper()
		if got, err := directPost(context.Background(), w, s.URL+"/mcp", "{}", nil); err != nil || got != event {
			t.Fatalf("%s: %q, %v", what, got, err)
		}
	}

	owe()
	if kept := pool.kept(w.host); kept != 1 {
		t.Fatalf("%d connections kept owing their stream's end, want 1", kept)
	}
	post("a request while the end is still to come")
	if n, kept := s.accepted.Load(), pool.kept(w.host); n != 2 || kept != 2 {
		t.Fatalf("%d connections opened and %d kept, want a second opened and both kept", n, kept)
	}
	hold <- struct{}{}
	time.Sleep(50 * time.Millisecond) // the end reaches this side
	// The second connection out of the way, the next request takes the one that owed.
	other := pool.take(w.host)
	post("a request once the end came")
	pool.put(other)
	if n, closed := s.accepted.Load(), s.closed.Load(); n != 2 || closed != 0 {
		t.Fatalf("%d connections opened and %d closed, want the one that owed reused", n, closed)
	}

	// An answer whose end came with its last event (the chunked body's reader takes an end it
	// has buffered with the data before it) gives its connection back owing nothing.
	req, _ := http.NewRequest(http.MethodPost, s.URL+"/mcp", nil)
	resp, err := w.roundTrip(req, []byte("{}"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := io.ReadFull(resp.Body, make([]byte, len(event))); err != nil {
		t.Fatal(err)
	}
	endStream(resp.Body)
	if c := pool.take(w.host); c == nil || c.rest != nil {
		t.Fatalf("a connection whose answer's end came with it: %+v, want it kept owing nothing", c)
	} else {
		pool.put(c)
	}

	owe()
	c := pool.take(w.host)
	c.owed = c.owed.Add(-maxRestWait)
	if ready, later := c.settle(); ready || later {
		t.Fatalf("a connection owing its stream's end for %s: ready %v, later %v; want it closed", maxRestWait, ready, later)
	}
	c.close()
}
