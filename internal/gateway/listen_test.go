package gateway

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/httpserve"
	"github.com/dsh-dev/projectmcp/internal/registry"
	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// listenGateway is a gateway with one project of no servers, served over HTTP.
func listenGateway(t *testing.T) (*Gateway, string, types.NamespacedName) {
	t.Helper()
	g, key := oneProjectGateway(t)
	srv := httptest.NewServer(g)
	t.Cleanup(func() {
		g.shutdown()
		srv.CloseClientConnections()
		srv.Close()
	})
	return g, srv.URL + Path(key), key
}

// oneProjectGateway is a gateway with one project of no servers, not yet served.
func oneProjectGateway(t *testing.T) (*Gateway, types.NamespacedName) {
	t.Helper()
	reg := registry.New(clocktesting.NewFakeClock(time.Now()), logr.Discard())
	t.Cleanup(reg.Shutdown)
	key := types.NamespacedName{Namespace: "ns", Name: "p"}
	reg.SetDesired(key, registry.Desired{})
	return New(Options{Registry: reg}), key
}

// listenBody is a subscriptions/listen of a 2026-07-28 client.
func listenBody(id, notifications string) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"method":"subscriptions/listen","params":{"_meta":{` +
		`"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},` +
		`"io.modelcontextprotocol/clientInfo":{"name":"c","version":"1"}},"notifications":` + notifications + `}}`
}

// openListen posts a listen and returns its response and a reader of its lines.
func openListen(t *testing.T, ctx context.Context, url, session, body string) (*http.Response, *bufio.Scanner) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "subscriptions/listen")
	req.Header.Set(SessionHeader, session)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp, bufio.NewScanner(resp.Body)
}

// nextEvent reads one SSE event's lines.
func nextEvent(t *testing.T, sc *bufio.Scanner) string {
	t.Helper()
	var lines []string
	for sc.Scan() {
		if sc.Text() == "" {
			return strings.Join(lines, "\n")
		}
		lines = append(lines, sc.Text())
	}
	t.Fatalf("the stream ended after %q: %v", lines, sc.Err())
	return ""
}

// The stream is byte for byte what the SDK's stateless handler writes (as read from SDK v1.8.0):
// its headers, the acknowledgement, the list_changed the listen asked for (one per sync's
// changes of a list), a resource's update with its server's _meta, and the result when the
// endpoint closes.
func TestListenStreamAsTheSDKWritesIt(t *testing.T) {
	g, url, key := listenGateway(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, sc := openListen(t, ctx, url, "s1", listenBody(`"L1"`, //nolint:bodyclose // openListen closes it when the test ends
		`{"toolsListChanged":true,"promptsListChanged":true,"bogus":1}`))
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" ||
		resp.Header.Get("Cache-Control") != "no-cache, no-transform" || resp.Header.Get("Connection") != "keep-alive" {
		t.Fatalf("headers: %d %v", resp.StatusCode, resp.Header)
	}
	const sub = `"_meta":{"io.modelcontextprotocol/subscriptionId":"L1"}`
	want := func(data string) {
		t.Helper()
		if got := nextEvent(t, sc); got != "event: message\ndata: "+data {
			t.Fatalf("got  %s\nwant event: message\ndata: %s", got, data)
		}
	}
	want(`{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{` + sub +
		`,"notifications":{"toolsListChanged":true,"promptsListChanged":true}}}`)
	p := g.project(key)
	p.listeners.changed(conn.ToolList | conn.ResourceList) // resources: not asked for
	p.listeners.changed(conn.ToolList)                     // within the delay: the same announcement
	want(`{"jsonrpc":"2.0","method":"notifications/tools/list_changed","params":{` + sub + `}}`)
	p.listeners.changed(conn.PromptList)
	want(`{"jsonrpc":"2.0","method":"notifications/prompts/list_changed","params":{` + sub + `}}`)
	p.close()
	want(`{"jsonrpc":"2.0","id":"L1","result":{"resultType":"complete","_meta":{"io.modelcontextprotocol/serverInfo":` +
		string(p.serverInfo) + `,"io.modelcontextprotocol/subscriptionId":"L1"}}}`)
	if sc.Scan() {
		t.Fatalf("the stream goes on after its result: %q", sc.Text())
	}
}

// A listen for nothing the endpoint sends is acknowledged and answered at once, as the SDK does.
func TestListenForNothingEndsAtOnce(t *testing.T) {
	_, url, _ := listenGateway(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, sc := openListen(t, ctx, url, "s1", listenBody("7", `{}`)) //nolint:bodyclose // openListen closes it when the test ends
	ack := nextEvent(t, sc)
	if !strings.Contains(ack, `"params":{"_meta":{"io.modelcontextprotocol/subscriptionId":7},"notifications":{}}`) {
		t.Fatalf("ack: %s", ack)
	}
	if res := nextEvent(t, sc); !strings.Contains(res, `"id":7,"result":{"resultType":"complete"`) {
		t.Fatalf("result: %s", res)
	}
}

// What the gateway does not serve the SDK answers, as before: its errors stay the SDK's.
func TestListenMalformedGoesToTheSDK(t *testing.T) {
	_, url, _ := listenGateway(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	noNotifications := `{"jsonrpc":"2.0","id":8,"method":"subscriptions/listen","params":{"_meta":{` +
		`"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
	resp, sc := openListen(t, ctx, url, "s1", noNotifications) //nolint:bodyclose // openListen closes it when the test ends
	sc.Scan()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(sc.Text(), "missing required 'notifications' field") {
		t.Fatalf("%d %s", resp.StatusCode, sc.Text())
	}
}

// Two sessions' listens are apart: a resource's update reaches the listen that subscribed it.
func TestListenUpdatesReachOnlyTheirListen(t *testing.T) {
	g, url, key := listenGateway(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, a := openListen(t, ctx, url, "a", listenBody("1", `{"toolsListChanged":true}`)) //nolint:bodyclose // openListen closes it when the test ends
	_, b := openListen(t, ctx, url, "b", listenBody("2", `{"toolsListChanged":true}`)) //nolint:bodyclose // openListen closes it when the test ends
	nextEvent(t, a)
	nextEvent(t, b)
	p := g.project(key)
	// No server owns a URI here, so the listens' own subscriptions cannot be made: the
	// listens' records are given one by hand.
	p.listeners.mu.Lock()
	for l := range p.listeners.all {
		if string(l.id) == "1" {
			p.listeners.byURI["x://a"] = map[*listen]struct{}{l: {}}
		}
	}
	p.listeners.mu.Unlock()
	p.listeners.updated(&mcp.ResourceUpdatedNotificationParams{URI: "x://a", Meta: mcp.Meta{"k": "v"}}, nil)
	p.listeners.changed(conn.ToolList)
	if got := nextEvent(t, a); !strings.Contains(got, `"params":{"_meta":{"io.modelcontextprotocol/subscriptionId":1,"k":"v"},"uri":"x://a"}`) {
		t.Fatalf("a: %s", got)
	}
	if got := nextEvent(t, a); !strings.Contains(got, `tools/list_changed","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":1}}`) {
		t.Fatalf("a: %s", got)
	}
	if got := nextEvent(t, b); !strings.Contains(got, `tools/list_changed","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":2}}`) {
		t.Fatalf("b must get its list_changed, and no update of a's resource: %s", got)
	}
}

// serverGoroutines counts the goroutines serving the gateway's HTTP requests, what they started
// and the SDK server's, outside idle keep-alive connections (the client side of the test is not
// counted). Through the SDK's stateless handler a listening session held 4 (its POST's handler,
// net/http's background reader, the SDK session's reader and the SDK server's listen handler).
func serverGoroutines(t *testing.T) int {
	t.Helper()
	header := regexp.MustCompile(`^goroutine (\d+) `)
	parent := regexp.MustCompile(`created by .* in goroutine (\d+)`)
	server := map[string]bool{}
	idle := map[string]bool{}
	stacks := map[string]string{}
	for _, g := range testutil.Goroutines() {
		if m := header.FindStringSubmatch(g); m != nil {
			stacks[m[1]] = g
			if strings.Contains(g, "net/http.(*conn).serve(") {
				server[m[1]] = true
				// Waiting for a request, or for a keep-alive connection's next one to begin.
				idle[m[1]] = strings.Contains(g, "net/http.(*conn).readRequest") ||
					strings.Contains(g, "bufio.(*Reader).Peek(") && !strings.Contains(g, "ServeHTTP(")
			}
			// The SDK server's handlers of a session, whose parent (jsonrpc2's) may have ended,
			// and a detached listen's or a taken GET stream's own (listenconn.go, getstream.go),
			// whose parent (the handler) has.
			if strings.Contains(g, "go-sdk/mcp.(*Server).") || strings.Contains(g, "go-sdk/mcp.(*streamableServerConn).") ||
				strings.Contains(g, "httpserve.(*Taken).") ||
				strings.Contains(g, "gateway.(*project).serveGET.func") {
				server[m[1]] = true
			}
		}
	}
	for grew := true; grew; {
		grew = false
		for id, g := range stacks {
			if m := parent.FindStringSubmatch(g); m != nil && server[m[1]] && !server[id] {
				server[id], idle[id], grew = true, idle[m[1]], true
			}
		}
	}
	n := 0
	for id := range server {
		if !idle[id] {
			n++
		}
	}
	return n
}

// settledServerGoroutines is serverGoroutines once the goroutines of an earlier test's server
// (a connection's, ending as its server stopped) have ended: their end would count against
// what the test starts.
func settledServerGoroutines(t *testing.T) int {
	t.Helper()
	n := serverGoroutines(t)
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		m := serverGoroutines(t)
		if m == n {
			break
		}
		n = m
	}
	return n
}

// takenReaders counts taken connections' readers (httpserve.Taken).
func takenReaders(t *testing.T) int { return testutil.CountStacks("httpserve.(*Taken).read(") }

// idleStreamGoroutines is what an idle taken stream holds of its own: nothing where the
// gateway's readiness watches its connection, else its reader.
func idleStreamGoroutines() int {
	if httpserve.ReadinessSupported {
		return 0
	}
	return 1
}

// servedListenGateway is servedGateway's gateway and its project's endpoint.
func servedListenGateway(t *testing.T) (*Gateway, string, types.NamespacedName) {
	t.Helper()
	g, addr, key := servedGateway(t)
	return g, "http://" + addr + Path(key), key
}

// An idle listening 2026-07-28 session costs the gateway no goroutine (listenconn.go): its
// handler's goroutine and net/http's background reader are gone, and its taken connection has
// no reader while the client sends nothing: the gateway's readiness watches it.
func TestListeningSessionHoldsNoGoroutine(t *testing.T) {
	g, url, key := servedListenGateway(t)
	base := settledServerGoroutines(t)
	baseReaders := takenReaders(t)
	const n = 20
	for i := range n {
		client := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, &mcp.ClientOptions{
			ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {},
		})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		hc := &http.Client{Transport: sessionRT{fmt.Sprint("s", i)}}
		cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc}, nil)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cs.Close() })
	}
	p := g.project(key)
	deadline := time.Now().Add(5 * time.Second)
	for p.listeners.count() < n && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if c := p.listeners.count(); c != n {
		t.Fatalf("%d listens served by the gateway, want %d", c, n)
	}
	want := n * idleStreamGoroutines()
	got := serverGoroutines(t) - base
	for ; got > want && time.Now().Before(deadline); got = serverGoroutines(t) - base {
		time.Sleep(10 * time.Millisecond)
	}
	readers := takenReaders(t) - baseReaders
	t.Logf("%d listening sessions: %d goroutines of the server (%.1f each), %d of them readers", n, got, float64(got)/n, readers)
	if got > want || readers > want {
		t.Errorf("%d listening sessions hold %d goroutines (%d readers), want at most %d", n, got, readers, want)
	}
	if w := g.readiness.Load().Watching(); httpserve.ReadinessSupported && w != n {
		t.Errorf("%d streams watched, want %d", w, n)
	}
}

// sessionRT names each request's session (SessionHeader).
type sessionRT struct{ name string }

func (s sessionRT) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set(SessionHeader, s.name)
	return http.DefaultTransport.RoundTrip(req)
}

// A client that goes away ends its detached stream: the listen is forgotten and its reader
// ends, with nothing left of the session's stream in the gateway. Served by the gateway, the
// stream has no reader until the client goes (the readiness starts it); under another server
// (httptest), its reader runs from the start.
func TestListenClientGoneEndsItsStream(t *testing.T) {
	t.Run("served", func(t *testing.T) { testListenClientGone(t, servedListenGateway, idleStreamGoroutines()) })
	t.Run("httptest", func(t *testing.T) { testListenClientGone(t, listenGateway, 1) })
}

func testListenClientGone(t *testing.T, serve func(*testing.T) (*Gateway, string, types.NamespacedName), idle int) {
	g, url, key := serve(t)
	base := settledServerGoroutines(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lctx, leave := context.WithCancel(ctx)
	resp, sc := openListen(t, lctx, url, "s1", listenBody("1", `{"toolsListChanged":true}`))
	nextEvent(t, sc)
	p := g.project(key)
	settled := func(listens, goroutines int) bool { // the handler's return and a writer are moments
		deadline := time.Now().Add(5 * time.Second)
		for (p.listeners.count() != listens || serverGoroutines(t)-base != goroutines) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		return p.listeners.count() == listens && serverGoroutines(t)-base == goroutines
	}
	if !settled(1, idle) {
		t.Fatalf("listening: %d listens, %d goroutines, want 1 and %d", p.listeners.count(), serverGoroutines(t)-base, idle)
	}
	leave()
	resp.Body.Close()
	if !settled(0, 0) {
		t.Fatalf("after the client left: %d listens, %d goroutines of the server", p.listeners.count(), serverGoroutines(t)-base)
	}
}

// Over HTTP/2, whose streams cannot be taken from net/http, the handler's goroutine writes the
// stream, as it did before streams were detached.
func TestListenOverHTTP2(t *testing.T) {
	reg := registry.New(clocktesting.NewFakeClock(time.Now()), logr.Discard())
	key := types.NamespacedName{Namespace: "ns", Name: "p"}
	reg.SetDesired(key, registry.Desired{})
	g := New(Options{Registry: reg})
	srv := httptest.NewUnstartedServer(g)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(func() { g.shutdown(); srv.CloseClientConnections(); srv.Close(); reg.Shutdown() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+Path(key), strings.NewReader(listenBody("1", `{"toolsListChanged":true}`)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "subscriptions/listen")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Fatalf("the test's stream is %s, not HTTP/2", resp.Proto)
	}
	sc := bufio.NewScanner(resp.Body)
	nextEvent(t, sc)
	g.project(key).listeners.changed(conn.ToolList)
	if got := nextEvent(t, sc); !strings.Contains(got, `tools/list_changed","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":1}}`) {
		t.Fatalf("got %s", got)
	}
	g.project(key).close()
	if got := nextEvent(t, sc); !strings.Contains(got, `"id":1,"result":{"resultType":"complete"`) {
		t.Fatalf("result: %s", got)
	}
}
