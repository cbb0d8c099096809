package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsh-dev/projectmcp/internal/gateway/access"
	"github.com/dsh-dev/projectmcp/internal/httpserve"
	"github.com/dsh-dev/projectmcp/internal/testutil"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/apimachinery/pkg/types"
)

// postRaw posts a 2025-11-25 message of session sid ("" before initialize) and returns the
// response, read whole, and its session id.
func postRaw(t *testing.T, url, sid, body string) (string, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		t.Fatalf("%s: %d %s", body, resp.StatusCode, data)
	}
	return string(data), resp.Header.Get("Mcp-Session-Id")
}

// getStream asks for session sid's GET stream.
func getStream(ctx context.Context, url, sid string) (*http.Response, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	req.Header.Set("Mcp-Session-Id", sid)
	return http.DefaultClient.Do(req)
}

// openGET opens a session's GET stream.
func openGET(t *testing.T, ctx context.Context, url, sid string) (*http.Response, *bufio.Scanner) {
	t.Helper()
	resp, err := getStream(ctx, url, sid)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		t.Fatalf("GET stream: %d", resp.StatusCode)
	}
	return resp, bufio.NewScanner(resp.Body)
}

// A 2025-11-25 session's GET stream, taken from net/http, carries what the SDK sends on it, and
// a client that goes away ends the SDK's side of it: the session's next GET is served, not
// refused as a second stream. The endpoint's closing ends the stream with its last chunk.
// Served by the gateway, an idle stream holds the SDK's handler only (the readiness watches
// its connection); under another server (httptest), its reader too.
func TestGetStreamTakenFromNetHTTP(t *testing.T) {
	t.Run("served", func(t *testing.T) { testGetStreamTaken(t, servedListenGateway, 1+idleStreamGoroutines()) })
	t.Run("httptest", func(t *testing.T) { testGetStreamTaken(t, listenGateway, 2) })
}

func testGetStreamTaken(t *testing.T, serve func(*testing.T) (*Gateway, string, types.NamespacedName), idle int) {
	g, url, key := serve(t)
	_, sid := postRaw(t, url, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25",`+
		`"capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	postRaw(t, url, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	base := settledServerGoroutines(t)

	ctx, leave := context.WithTimeout(context.Background(), 10*time.Second)
	resp, sc := openGET(t, ctx, url, sid)
	n := serverGoroutines(t) - base
	for deadline := time.Now().Add(5 * time.Second); n > idle && time.Now().Before(deadline); n = serverGoroutines(t) - base {
		time.Sleep(10 * time.Millisecond) // net/http's handler returns a moment after the stream is taken
	}
	t.Logf("an idle GET stream: %d goroutines of the server", n)
	if n > idle {
		t.Errorf("an idle GET stream holds %d goroutines of the server, want at most %d (the SDK's handler, and the stream's reader where it runs)", n, idle)
	}
	ss := g.project(key).sessions.stateful(access.SessionRef(sid))
	if ss == nil {
		t.Fatal("no session")
	}
	pctx, unping := context.WithTimeout(context.Background(), 2*time.Second)
	defer unping()
	go func() { _ = ss.Ping(pctx, nil) }() // a request of the server's own: on the standalone stream
	var got []string
	for sc.Scan() && !strings.Contains(sc.Text(), `"method":"ping"`) {
		got = append(got, sc.Text())
	}
	if !strings.Contains(sc.Text(), `"method":"ping"`) {
		t.Fatalf("no ping on the stream: %q, then %q (%v)", got, sc.Text(), sc.Err())
	}
	unping() // the SDK holds its stream while its own request waits
	leave()
	resp.Body.Close()

	deadline := time.Now().Add(5 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		again, err := getStream(ctx, url, sid)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		if again.StatusCode == http.StatusOK {
			sc := bufio.NewScanner(again.Body)
			g.project(key).close()
			for sc.Scan() { // to the stream's end: the last chunk, then the connection closes
			}
			if err := sc.Err(); err != nil {
				t.Errorf("the stream ended with %v, not its last chunk", err)
			}
			again.Body.Close()
			cancel()
			return
		}
		again.Body.Close()
		cancel()
		if time.Now().After(deadline) {
			t.Fatalf("the session's next GET after the client left: %d, want 200", again.StatusCode)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Idle 2025-11-25 sessions hold no net/http goroutine: their streams were taken; and, served by
// the gateway, no reader of their taken connections (the readiness watches them).
func TestStatefulSessionsHoldNoNetHTTPGoroutine(t *testing.T) {
	g, url, _ := servedListenGateway(t)
	baseReaders := takenReaders(t)
	const n = 10
	for i := range n {
		client := mcp.NewClient(&mcp.Implementation{Name: fmt.Sprint("t", i), Version: "1"}, &mcp.ClientOptions{
			ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {},
		})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cs.Close() })
	}
	busy := func() int { // net/http serving goroutines in a handler, not waiting for a request
		n := 0
		for _, g := range testutil.Goroutines() {
			if strings.Contains(g, "net/http.(*conn).serve(") && !strings.Contains(g, "net/http.(*conn).readRequest") &&
				strings.Contains(g, "internal/gateway.") {
				n++
			}
		}
		return n
	}
	got := busy()
	for deadline := time.Now().Add(5 * time.Second); got > 0 && time.Now().Before(deadline); got = busy() {
		time.Sleep(10 * time.Millisecond)
	}
	if got > 0 {
		t.Fatalf("%d idle stateful sessions hold %d of net/http's serving goroutines, want none", n, got)
	}
	if !httpserve.ReadinessSupported {
		return
	}
	rd := g.readiness.Load()
	for deadline := time.Now().Add(5 * time.Second); rd.Watching() < n && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond) // the SDK's client opens its GET stream after Connect
	}
	if w := rd.Watching(); w != n {
		t.Errorf("%d GET streams watched, want %d", w, n)
	}
	if r := takenReaders(t) - baseReaders; r > 0 {
		t.Errorf("%d idle stateful sessions hold %d readers of their taken streams, want none", n, r)
	}
}

// servedGateway is listenGateway's gateway served by Serve (its own HTTP server, which takes
// back the connections of streams that ended whole), and its address.
func servedGateway(t *testing.T) (*Gateway, string, types.NamespacedName) {
	t.Helper()
	g, addr, key, stop := stoppableGateway(t)
	t.Cleanup(func() {
		// The test's keep-alive connections go first, as a client's would.
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
		stop()
	})
	return g, addr, key
}

// stoppableGateway is servedGateway with the stop left to the caller: it returns once the
// gateway has stopped serving.
func stoppableGateway(t *testing.T) (*Gateway, string, types.NamespacedName, func()) {
	t.Helper()
	g, key := oneProjectGateway(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { defer close(served); _ = g.Serve(ctx, ln) }()
	<-g.Serving()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-served }) }
	t.Cleanup(stop)
	return g, ln.Addr().String(), key, stop
}

// dialGateway opens a connection of the test's own to the gateway at addr, closed when the
// test ends.
func dialGateway(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

// exchange writes a request on c and reads its response whole (a chunked one to its last
// chunk), as a keep-alive client does before it sends the next request on c.
func exchange(t *testing.T, c net.Conn, br *bufio.Reader, req *http.Request, during func()) (int, string) {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if err := req.Write(c); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		t.Fatal(err)
	}
	if during != nil {
		during()
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the response: %v", req.Method, req.URL, err)
	}
	return resp.StatusCode, string(body)
}

// listenRequest is session s1's listen on the endpoint at addr.
func listenRequest(addr string, key types.NamespacedName) *http.Request {
	req, _ := http.NewRequest(http.MethodPost, "http://"+addr+Path(key), strings.NewReader(listenBody("1", `{"toolsListChanged":true}`)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "subscriptions/listen")
	req.Header.Set(SessionHeader, "s1")
	return req
}

// detachedOf is p's one listen's taken stream, once there is one.
func detachedOf(t *testing.T, p *project) *detachedListen {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		p.listeners.mu.Lock()
		for l := range p.listeners.all {
			l.mu.Lock()
			d := l.detached
			l.mu.Unlock()
			if d != nil {
				p.listeners.mu.Unlock()
				return d
			}
		}
		p.listeners.mu.Unlock()
	}
	t.Fatal("no taken listen stream")
	return nil
}

// A stream that ends whole leaves its connection open for the client's next request, as
// net/http does: a listen ended by its endpoint closing, then a request on the same
// connection, is answered (a keep-alive client, or a replica's proxy, reuses it at once).
// The client sent nothing while the stream ran: its reader never started, and the connection
// goes back as it is.
func TestTakenConnectionServesTheNextRequest(t *testing.T) {
	g, addr, key := servedGateway(t)
	c, br := dialGateway(t, addr)
	p := g.project(key)
	status, body := exchange(t, c, br, listenRequest(addr, key), func() {
		d := detachedOf(t, p)
		if httpserve.ReadinessSupported && !d.tc.Watched() {
			t.Error("the idle stream's reader runs")
		}
		p.listeners.close() // the endpoint closes: the stream ends with its result
	})
	if status != http.StatusOK || !strings.Contains(body, `"id":1,"result":{"resultType":"complete"`) {
		t.Fatalf("listen: %d %q", status, body)
	}
	next, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/nothing-here", nil)
	if status, _ := exchange(t, c, br, next, nil); status != http.StatusNotFound { // exchange fails on a closed connection
		t.Fatalf("the request after the stream: %d, want the server's 404", status)
	}
}

// A connection given back after its stream and not used again does not hold the gateway's
// stop: net/http's Shutdown takes a connection that has not begun a request for a new one
// and waits until it is 5 s old, so the gateway closes it, as Shutdown closes idle ones.
func TestStopClosesGivenBackConnections(t *testing.T) {
	g, addr, key, stop := stoppableGateway(t)
	c, br := dialGateway(t, addr)
	p := g.project(key)
	status, _ := exchange(t, c, br, listenRequest(addr, key), func() {
		detachedOf(t, p)
		p.listeners.close() // the stream ends whole: its connection goes back to the server
	})
	if status != http.StatusOK {
		t.Fatalf("listen: %d", status)
	}
	start := time.Now()
	stop()
	// Shutdown's own wait would take 5 s; closed at once, the stop takes well under that.
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("the gateway took %s to stop: the given-back connection held it", took)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the given-back connection is open after the stop (read: %v)", err)
	}
}

// A client that sends its next request while its stream still runs is served once the stream
// ends: the readiness starts the stream's reader, which keeps the request for the connection's
// next turn with the server.
func TestTakenConnectionKeepsWhatTheClientSendsDuringTheStream(t *testing.T) {
	g, addr, key := servedGateway(t)
	c, br := dialGateway(t, addr)
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	req := listenRequest(addr, key)
	if err := req.Write(c); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	nextEvent(t, sc) // the acknowledgement
	p := g.project(key)
	d := detachedOf(t, p)
	if httpserve.ReadinessSupported {
		rd := g.readiness.Load()
		for deadline := time.Now().Add(5 * time.Second); rd.Watching() != 1 && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		if rd.Watching() != 1 {
			t.Fatal("the stream is not watched")
		}
	}

	next, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/nothing-here", nil)
	if err := next.Write(c); err != nil {
		t.Fatal(err)
	}
	kept := d.tc.Pending
	for deadline := time.Now().Add(5 * time.Second); kept() == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if kept() == 0 {
		t.Fatal("the reader did not keep what the client sent")
	}
	if w := g.readiness.Load().Watching(); w != 0 {
		t.Errorf("%d streams watched once the client sent something", w)
	}

	p.listeners.close() // the stream ends whole
	var last string
	for sc.Scan() {
		if sc.Text() != "" {
			last = sc.Text()
		}
	}
	if err := sc.Err(); err != nil || !strings.Contains(last, `"id":1,"result":{"resultType":"complete"`) {
		t.Fatalf("the stream ended with %q, %v, not its result", last, err)
	}
	resp2, err := http.ReadResponse(br, next)
	if err != nil {
		t.Fatalf("the request sent during the stream: %v", err)
	}
	resp2.Body.Close()
	if resp2.StatusCode != http.StatusNotFound {
		t.Fatalf("the request sent during the stream: %d, want the server's 404", resp2.StatusCode)
	}
}
