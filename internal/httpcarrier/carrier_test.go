package httpcarrier

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// testServer is a loopback HTTP server a carrier sends to, counting the TCP connections it
// accepted and closed, and keeping them (to close one under the carrier) and their states.
type testServer struct {
	*httptest.Server
	accepted atomic.Int32
	closed   atomic.Int32
	mu       sync.Mutex
	conns    []net.Conn
	states   map[net.Conn]http.ConnState
}

func startServer(t *testing.T, h http.HandlerFunc) *testServer {
	s := &testServer{Server: httptest.NewUnstartedServer(h), states: map[net.Conn]http.ConnState{}}
	s.Config.ConnState = func(c net.Conn, state http.ConnState) {
		if state == http.StateNew {
			s.accepted.Add(1)
		}
		if state == http.StateClosed {
			s.closed.Add(1)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if state == http.StateNew {
			s.conns = append(s.conns, c)
		}
		s.states[c] = state
	}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

// answered waits until the server has written every answer to its end: each connection is
// idle (the server sets that state once the answer is flushed) or closed.
func (s *testServer) answered(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		s.mu.Lock()
		busy := 0
		for _, state := range s.states {
			if state == http.StateNew || state == http.StateActive {
				busy++
			}
		}
		s.mu.Unlock()
		if busy == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still answering", busy)
		}
	}
}

// closeConns closes, from the server's side, every connection it accepted.
func (s *testServer) closeConns() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.conns {
		_ = c.Close()
	}
}

// newTestCarrier is a carrier to s, and the pool it keeps connections in.
func newTestCarrier(t *testing.T, s *testServer) (*Carrier, *Pool) {
	u, _ := url.Parse(s.URL + "/mcp?x=1")
	pool := NewPool(nil)
	t.Cleanup(pool.Close)
	w := New(u, &http.Transport{}, pool)
	if w == nil {
		t.Fatal("no carrier to a plain-HTTP server without a proxy")
	}
	return w, pool
}

// post sends body on w, as a connection's upstream does, and returns the answer's body.
func post(ctx context.Context, w *Carrier, target string, body string, header http.Header) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, strings.NewReader(body))
	if err != nil {
		return "", err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := w.Send(req, []byte(body))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	return string(got), err
}

// The server gets from a carrier the request net/http's Transport sends, headers and all; only
// Accept-Encoding is not asked for (the answer is read as the server sends it). So does it
// through Transport: the SDK client's POSTs, its event stream's GET and its closing DELETE.
func TestCarrierSendsWhatTheTransportSends(t *testing.T) {
	type seen struct {
		method, uri, host, proto string
		length                   int64
		header                   http.Header
		body                     string
	}
	got := make(chan seen, 2)
	s := startServer(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h := r.Header.Clone()
		h.Del("Accept-Encoding")
		got <- seen{r.Method, r.RequestURI, r.Host, r.Proto, r.ContentLength, h, string(body)}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":true}`)
	})
	w, _ := newTestCarrier(t, s)
	header := http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json, text/event-stream"}, "Mcp-Method": {"tools/call"},
		"Authorization": {"Bearer x"}, "X-Two": {"a", "b"}}
	const body = `{"jsonrpc":"2.0","id":"1","method":"tools/call","params":{"name":"echo"}}`
	viaTransport := func(t *testing.T, rt http.RoundTripper, method, body string, header http.Header) seen {
		var r io.Reader
		if body != "" {
			r = strings.NewReader(body)
		}
		req, _ := http.NewRequest(method, s.URL+"/mcp?x=1", r)
		req.Header = header.Clone()
		resp, err := (&http.Client{Transport: rt}).Do(req)
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
			t.Fatalf("the server saw from the carrier:\n%+v\nand from the Transport:\n%+v", a, b)
		}
	}
	t.Run("forwarded", func(t *testing.T) {
		answer, err := post(context.Background(), w, s.URL+"/mcp?x=1", body, header)
		if err != nil || answer != `{"ok":true}` {
			t.Fatalf("through the carrier: %q, %v", answer, err)
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
			same(t, viaTransport(t, Transport{Carrier: w, Base: refuseTransport{t}}, tc.method, tc.body, tc.header),
				viaTransport(t, http.DefaultTransport, tc.method, tc.body, tc.header))
		})
	}
}

// refuseTransport fails the test it is given when a request reaches it.
type refuseTransport struct{ t *testing.T }

func (r refuseTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	r.t.Errorf("%s %s went through the Transport, not the carrier", req.Method, req.URL)
	return nil, errors.New("not on the carrier")
}

// A request net/http would send in chunks, or to another host, goes through the Transport.
func TestTransportTakes(t *testing.T) {
	u, _ := url.Parse("http://127.0.0.1:8080/mcp")
	d := &Carrier{host: dialHost(u)}
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
			if got := (Transport{Carrier: d}).takes(req); got != tc.want {
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
func TestCarrierKeepsConnections(t *testing.T) {
	s := startServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "event: message\ndata: {}\n\n")
	})
	w, pool := newTestCarrier(t, s)
	for i := range 5 {
		if got, err := post(context.Background(), w, s.URL+"/mcp", "{}", nil); err != nil || got != "event: message\ndata: {}\n\n" {
			t.Fatalf("request %d: %q, %v", i, got, err)
		}
	}
	if n := s.accepted.Load(); n != 1 {
		t.Fatalf("5 requests opened %d connections, want 1", n)
	}
	s.closeConns()
	time.Sleep(50 * time.Millisecond) // the close reaches this side
	if _, err := post(context.Background(), w, s.URL+"/mcp", "{}", nil); err != nil {
		t.Fatalf("after the server closed the kept connection: %v", err)
	}
	if n := s.accepted.Load(); n != 2 {
		t.Fatalf("%d connections, want a second one", n)
	}
	if kept := pool.Idle(w.host); kept != 1 {
		t.Fatalf("%d connections kept, want 1", kept)
	}
}

// A body closed before its end closes its connection (what was left of it is not read), as
// does an answer whose server said it closes the connection.
func TestCarrierClosesConnectionsNotReadToTheEnd(t *testing.T) {
	s := startServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("close") != "" {
			w.Header().Set("Connection", "close")
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {}\n\n")
	})
	w, pool := newTestCarrier(t, s)
	req, _ := http.NewRequest(http.MethodPost, s.URL+"/mcp", nil)
	resp, err := w.Send(req, []byte("{}"))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = resp.Body.Read(make([]byte, 2))
	resp.Body.Close()
	if kept := pool.Idle(w.host); kept != 0 {
		t.Fatalf("a body closed early left %d connections kept", kept)
	}
	if _, err := post(context.Background(), w, s.URL+"/mcp?close=1", "{}", nil); err != nil {
		t.Fatal(err)
	}
	if kept := pool.Idle(w.host); kept != 0 {
		t.Fatalf("an answer with Connection: close left %d connections kept", kept)
	}
}

// The request's context ends a wait for the answer's headers and a read of its body, with the
// context's cause, and the connection is not kept.
func TestCarrierEndsWithTheContext(t *testing.T) {
	release := make(chan struct{})
	s := startServer(t, func(w http.ResponseWriter, r *http.Request) {
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
	w, pool := newTestCarrier(t, s)
	why := errors.New("the session went away")
	for _, target := range []string{s.URL + "/mcp", s.URL + "/mcp?body=1"} {
		ctx, cancel := context.WithCancelCause(context.Background())
		time.AfterFunc(100*time.Millisecond, func() { cancel(why) })
		_, err := post(ctx, w, target, "{}", nil)
		if !errors.Is(err, why) {
			t.Fatalf("%s: %v, want the context's cause", target, err)
		}
	}
	if kept := pool.Idle(w.host); kept != 0 {
		t.Fatalf("%d cancelled connections kept", kept)
	}
}

// A header value the Transport refuses (a name with a line break in it, say) is refused
// before anything is sent.
func TestCarrierRefusesWhatTheTransportRefuses(t *testing.T) {
	s := startServer(t, func(http.ResponseWriter, *http.Request) {})
	w, _ := newTestCarrier(t, s)
	for _, h := range []http.Header{{"Mcp-Name": {"a\r\nX-Injected: 1"}}, {"Bad Name": {"v"}}} {
		if _, err := post(context.Background(), w, s.URL+"/mcp", "{}", h); err == nil || !strings.Contains(err.Error(), "invalid header field") {
			t.Fatalf("%v: %v, want the header refused", h, err)
		}
	}
	if n := s.accepted.Load(); n != 0 {
		t.Fatalf("refused requests opened %d connections", n)
	}
}

// Where a request must go through the Transport, no carrier is made: https, or a proxy for the
// server's URL.
func TestNew(t *testing.T) {
	pool := NewPool(nil)
	defer pool.Close()
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
			if d := New(u, tc.t, pool); d != nil {
				got = d.host
			}
			if got != tc.want {
				t.Fatalf("a carrier to %q, want %q (\"\": none)", got, tc.want)
			}
		})
	}
}

// The pool keeps at most MaxIdlePerHost connections to a host, closes those idle for
// idleTimeout, and closes the rest, and any put after, when it is closed.
func TestPoolBounded(t *testing.T) {
	pool := NewPool(nil)
	var closed atomic.Int32
	put := func(idle time.Time) {
		a, b := net.Pipe()
		t.Cleanup(func() { b.Close() })
		c := &tcpConn{Conn: closeCounter{a, &closed}, host: "h:80"}
		pool.put(c)
		c.idle = idle // as if put then
	}
	for range MaxIdlePerHost + 3 {
		put(time.Now())
	}
	if kept, shut := pool.Idle("h:80"), closed.Load(); kept != MaxIdlePerHost || shut != 3 {
		t.Fatalf("kept %d, closed %d; want %d and 3", kept, shut, MaxIdlePerHost)
	}
	for _, c := range pool.hosts["h:80"][:10] {
		c.idle = time.Now().Add(-idleTimeout)
	}
	pool.prune()
	if kept, shut := pool.Idle("h:80"), closed.Load(); kept != MaxIdlePerHost-10 || shut != 13 {
		t.Fatalf("after pruning kept %d, closed %d; want %d and 13", kept, shut, MaxIdlePerHost-10)
	}
	pool.Close()
	put(time.Now())
	if kept, shut := pool.Idle("h:80"), closed.Load(); kept != 0 || shut != MaxIdlePerHost+4 {
		t.Fatalf("after close kept %d, closed %d; want none kept, all closed", kept, shut)
	}
}

type closeCounter struct {
	net.Conn
	n *atomic.Int32
}

func (c closeCounter) Close() error { c.n.Add(1); return c.Conn.Close() }

// A request the server drops on a kept connection, closing it unanswered, is sent again on a
// new one when its method may be (GET, HEAD, DELETE), as the Transport does; a POST fails.
func TestCarrierSendsIdempotentRequestsAgain(t *testing.T) {
	var dropped atomic.Bool
	s := startServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Drop") != "" && dropped.CompareAndSwap(false, true) {
			c, _, _ := w.(http.Hijacker).Hijack()
			_ = c.Close()
			return
		}
		_, _ = io.WriteString(w, "ok")
	})
	w, _ := newTestCarrier(t, s)
	rt := Transport{Carrier: w, Base: refuseTransport{t}}
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

// A connection given back owing the end of its last answer's stream (Release) is passed over,
// and kept, while that end is still to come; once it has come, the next request reads it and
// reuses the connection; one that owes an end for maxRestWait is closed.
func TestCarrierSettlesWhatAConnectionOwes(t *testing.T) {
	const event = "event: message\ndata: {}\n\n"
	hold := make(chan struct{})
	s := startServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, event)
		if r.URL.Query().Get("hold") != "" {
			w.(http.Flusher).Flush()
			<-hold
		}
	})
	t.Cleanup(func() { close(hold) }) // before the server's close, which waits for its handlers
	w, pool := newTestCarrier(t, s)
	owe := func() {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, s.URL+"/mcp?hold=1", nil)
		resp, err := w.Send(req, []byte("{}"))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close() // nothing to do once Release has given the connection back
		if _, err := io.ReadFull(resp.Body, make([]byte, len(event))); err != nil {
			t.Fatal(err)
		}
		if !Release(resp.Body) {
			t.Fatal("Release did not take the carrier's answer")
		}
	}
	post := func(what string) {
		t.Helper()
		if got, err := post(context.Background(), w, s.URL+"/mcp", "{}", nil); err != nil || got != event {
			t.Fatalf("%s: %q, %v", what, got, err)
		}
	}

	owe()
	if kept := pool.Idle(w.host); kept != 1 {
		t.Fatalf("%d connections kept owing their stream's end, want 1", kept)
	}
	post("a request while the end is still to come")
	if n, kept := s.accepted.Load(), pool.Idle(w.host); n != 2 || kept != 2 {
		t.Fatalf("%d connections opened and %d kept, want a second opened and both kept", n, kept)
	}
	hold <- struct{}{}
	s.answered(t) // the end is written: on loopback it is at this side's socket
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
	resp, err := w.Send(req, []byte("{}"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := io.ReadFull(resp.Body, make([]byte, len(event))); err != nil {
		t.Fatal(err)
	}
	Release(resp.Body)
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
