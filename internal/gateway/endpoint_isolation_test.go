// Per-session isolation over shared connections: what one session (or identity) does stays
// with it.

package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/gateway"
	"github.com/dsh-dev/projectmcp/internal/gateway/access"
	"github.com/dsh-dev/projectmcp/internal/httpserve"
	"github.com/dsh-dev/projectmcp/internal/testenv/harness"
	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// saTokens creates ServiceAccounts in ns, each allowed to use every ProjectMCP of ns, and
// returns a token of each.
func saTokens(t *testing.T, ns string, names ...string) map[string]string {
	t.Helper()
	cs, err := kubernetes.NewForConfig(harness.Env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "use-all", Namespace: ns}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{"mcp.dsh.dev"}, Resources: []string{"projectmcps"}, Verbs: []string{access.UseVerb, "get"},
	}}}
	if err := harness.Env.Client.Create(ctx, role); err != nil {
		t.Fatal(err)
	}
	tokens := map[string]string{}
	for _, sa := range names {
		if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "use-all-" + sa, Namespace: ns},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "use-all"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}}}
		if err := harness.Env.Client.Create(ctx, binding); err != nil {
			t.Fatal(err)
		}
		tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authnv1.TokenRequest{
			Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		tokens[sa] = tr.Status.Token
	}
	return tokens
}

// A session belongs to the identity that opened it. Another identity allowed to use the same
// project, holding the session's Mcp-Session-Id, gets 404 on every path: it can neither
// answer the elicitation the server just sent the owner, nor attach to the owner's stream,
// nor call as the owner, nor end the session. The server records only the owner's answer,
// and the owner's session goes on.
func TestGatewaySessionsBoundToPrincipal(t *testing.T) {
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "shared", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "a")}})
	harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	tokens := saTokens(t, ns, "owner", "intruder")
	cs, err := kubernetes.NewForConfig(harness.Env.Config)
	if err != nil {
		t.Fatal(err)
	}
	_, base := serveGateway(t, gateway.Options{Registry: harness.Ctl.Registry, Auth: &access.KubernetesAuth{Client: cs}})
	url := base + gateway.Path(key)

	var sid string
	// raw sends one request as the intruder, naming the owner's session.
	raw := func(method, body string) int {
		t.Helper()
		req, _ := http.NewRequest(method, url, bytes.NewReader([]byte(body)))
		req.Header.Set("Authorization", "Bearer "+tokens["intruder"])
		req.Header.Set("Mcp-Session-Id", sid)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := http.DefaultClient.Do(req.WithContext(ctx))
		if err != nil {
			t.Fatalf("%s as the intruder: %v", method, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	var mu sync.Mutex // the handler runs in the client's goroutine
	var hijacks []string
	elicited := func(ctx context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		mu.Lock()
		defer mu.Unlock()
		// While the owner holds the server's request, the intruder answers it under every id
		// the SDK could have given it, and tries the other paths.
		for id := range 8 {
			answer := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"result":{"action":"accept","content":{"answer":"intruder"}}}`, id)
			if code := raw(http.MethodPost, answer); code != http.StatusNotFound {
				hijacks = append(hijacks, fmt.Sprintf("POST answer id %d: %d", id, code))
			}
		}
		if code := raw(http.MethodGet, ""); code != http.StatusNotFound {
			hijacks = append(hijacks, fmt.Sprintf("GET stream: %d", code))
		}
		call := `{"jsonrpc":"2.0","id":99,"method":"tools/call","params":{"name":"a__echo","arguments":{"text":"as the owner"}}}`
		if code := raw(http.MethodPost, call); code != http.StatusNotFound {
			hijacks = append(hijacks, fmt.Sprintf("POST tools/call: %d", code))
		}
		if code := raw(http.MethodDelete, ""); code != http.StatusNotFound {
			hijacks = append(hijacks, fmt.Sprintf("DELETE: %d", code))
		}
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": "owner"}}, nil
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "owner", Version: "1"}, &mcp.ClientOptions{ElicitationHandler: elicited})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	hc := &http.Client{Transport: harness.HeaderRT{H: http.Header{"Authorization": {"Bearer " + tokens["owner"]}}}}
	owner, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	sid = owner.ID()

	res, err := owner.CallTool(ctx, &mcp.CallToolParams{Name: "a__elicit", Arguments: map[string]any{"text": "approve?"}})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if len(hijacks) > 0 {
		t.Errorf("another identity reached the owner's session: %s", strings.Join(hijacks, "; "))
	}
	mu.Unlock()
	var answer struct {
		Content map[string]any `json:"content"`
	}
	if err := json.Unmarshal([]byte(harness.Text(res)), &answer); err != nil || answer.Content["answer"] != "owner" {
		t.Fatalf("the server must get the owner's answer, got %s (%v)", harness.Text(res), err)
	}
	if got := harness.Text(harness.AgentOf(owner).Call(t, "a__echo", map[string]any{"text": "still mine"})); got != "still mine" {
		t.Fatalf("the owner's session must go on: %q", got)
	}
}

// connectTo connects a 2025-11-25 agent to a gateway endpoint URL.
func connectTo(t *testing.T, url string) *harness.Agent {
	t.Helper()
	a := &harness.Agent{Changed: make(chan struct{}, 64)}
	client := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "1.0"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { a.Changed <- struct{}{} },
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var err error
	if a.Session, err = client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"}); err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	t.Cleanup(func() { _ = a.Session.Close() })
	return a
}

// A server that never answers resources/unsubscribe holds up nothing else: when a session
// subscribed to it expires, the sweep releases it without waiting on the server, and another
// project's edit still reaches that project's live session.
func TestGatewayHungUnsubscribeStallsNoOne(t *testing.T) {
	ns := harness.NewNamespace(t)
	hung := harness.Create(t, ns, "hung", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "h", "--hang-unsubscribe", "--protocol", "2025-11-25")}})
	other := harness.Create(t, ns, "other", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "a")}})
	harness.WaitStatus(t, hung, 30*time.Second, "Ready", harness.IsReady)
	harness.WaitStatus(t, other, 30*time.Second, "Ready", harness.IsReady)
	_, base := serveGateway(t, gateway.Options{Registry: harness.Ctl.Registry, SessionTimeout: time.Second})

	idle := connectTo(t, base+gateway.Path(hung))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := idle.Session.Subscribe(ctx, &mcp.SubscribeParams{URI: "fixture://h/readme"}); err != nil {
		t.Fatal(err)
	}
	// The idle session expires after 1 s; its release sends the unsubscribe the server never
	// answers. The bystander keeps its session busy, so only the idle one expires.
	bystander := connectTo(t, base+gateway.Path(other))
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(300 * time.Millisecond):
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, _ = bystander.Session.ListTools(ctx, nil)
				cancel()
			}
		}
	}()
	time.Sleep(2500 * time.Millisecond)
	harness.Update(t, other, func(o *v1alpha1.ProjectMCP) { o.Spec.Servers = append(o.Spec.Servers, harness.FixtureServer(t, "b")) })
	bystander.WaitTools(t, "the edit of another project", harness.Has("b__echo"))
}

// post sends one JSON-RPC message of a session by hand and returns the response's session id
// (it reads the whole answer).
func post(t *testing.T, url, sid, body string) string {
	t.Helper()
	sid, _ = exchange(t, url, sid, body)
	return sid
}

// exchange POSTs one message of a 2025-11-25 session and returns the session id the answer
// names and the answer's body.
func exchange(t *testing.T, url, sid, body string) (string, string) {
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
	got, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode >= 300 {
		t.Fatalf("%s: %d %v", body, resp.StatusCode, err)
	}
	return resp.Header.Get("Mcp-Session-Id"), string(got)
}

// A session that opens its GET stream and never reads loses that stream, and stalls no one
// else: log lines meant for it fill its stream until a write to it times out, while a
// bystander on the same shared connection still gets the server's elicitation and its answer.
func TestGatewaySlowReaderStallsNoOne(t *testing.T) {
	defer func(old time.Duration) { httpserve.StreamWriteTimeout = old }(httpserve.StreamWriteTimeout)
	httpserve.StreamWriteTimeout = 2 * time.Second
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "slow", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "a", "--protocol", "2025-11-25")}})
	obj := harness.WaitStatus(t, key, 30*time.Second, "Ready", func(o *v1alpha1.ProjectMCP) bool { return harness.IsReady(o) && o.Status.Endpoint != "" })
	url := obj.Status.Endpoint

	// The slow reader: a session at level debug whose GET stream has a tiny receive buffer
	// and is never read.
	sid := post(t, url, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"slow","version":"1"}}}`)
	post(t, url, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	post(t, url, sid, `{"jsonrpc":"2.0","id":2,"method":"logging/setLevel","params":{"level":"debug"}}`)
	stuckRequest(t, url, fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %%s\r\nAccept: text/event-stream\r\nMcp-Session-Id: %s\r\nMcp-Protocol-Version: 2025-11-25\r\n\r\n", "%s", sid))
	time.Sleep(200 * time.Millisecond) // the stream is open

	// The bystander floods the shared connection with log lines (the slow reader's level
	// admits them all), then is asked for input by the server.
	elicited := make(chan struct{}, 1)
	client := mcp.NewClient(&mcp.Implementation{Name: "bystander", Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			elicited <- struct{}{}
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": "here"}}, nil
		}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	bystander, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer bystander.Close()
	line := strings.Repeat("x", 256<<10)
	for range 40 { // 10 MiB, past what the socket buffers between the two hold
		callOK(t, bystander, "a__log", map[string]any{"level": "debug", "text": line})
	}
	start := time.Now()
	callCtx, callCancel := context.WithTimeout(ctx, 30*time.Second)
	defer callCancel()
	res, err := bystander.CallTool(callCtx, &mcp.CallToolParams{Name: "a__elicit", Arguments: map[string]any{"text": "still there?"}})
	if err != nil || !strings.Contains(harness.Text(res), "here") {
		t.Fatalf("the bystander's elicitation must go through beside a slow reader (after %s): %s %v", time.Since(start), harness.Text(res), err)
	}
	select {
	case <-elicited:
	default:
		t.Fatal("the bystander was never asked")
	}
	t.Logf("the bystander's elicitation took %s after the flood", time.Since(start).Round(time.Millisecond))
}

// stuckRequest sends an HTTP request to the gateway of url over a connection with a tiny
// receive buffer that is never read: a client that stops reading. format has a %s for the
// request's path and then one for the host. The connection closes when the test ends.
func stuckRequest(t *testing.T, url, format string) {
	t.Helper()
	dialer := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var err error
		_ = c.Control(func(fd uintptr) { err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return err
	}}
	host := strings.TrimPrefix(strings.Split(url, "/projects/")[0], "http://")
	stuck, err := dialer.Dial("tcp", host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stuck.Close() })
	fmt.Fprintf(stuck, format, strings.TrimPrefix(url, "http://"+host), host)
}

// A session that stops reading both its GET stream and the stream of a call whose progress
// it asked for (on the SDK's path: it sends another protocol version) delays nothing another
// session of the connection gets: its resource update, its list_changed and its own call's
// progress arrive as if the slow reader were not there. On a shared goroutine each would wait
// a write timeout on the slow reader first.
func TestGatewaySlowReaderDelaysNoNotice(t *testing.T) {
	defer func(old time.Duration) { httpserve.StreamWriteTimeout = old }(httpserve.StreamWriteTimeout)
	httpserve.StreamWriteTimeout = 20 * time.Second // far past what the bystander waits for
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "slownotice", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "a", "--protocol", "2025-11-25")}})
	obj := harness.WaitStatus(t, key, 30*time.Second, "Ready", func(o *v1alpha1.ProjectMCP) bool { return harness.IsReady(o) && o.Status.Endpoint != "" })
	url := obj.Status.Endpoint
	const uri = "fixture://a/readme"

	sid := post(t, url, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"slow","version":"1"}}}`)
	post(t, url, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	post(t, url, sid, `{"jsonrpc":"2.0","id":2,"method":"logging/setLevel","params":{"level":"debug"}}`)
	post(t, url, sid, `{"jsonrpc":"2.0","id":3,"method":"resources/subscribe","params":{"uri":"`+uri+`"}}`)
	stuckRequest(t, url, fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %%s\r\nAccept: text/event-stream\r\nMcp-Session-Id: %s\r\nMcp-Protocol-Version: 2025-11-25\r\n\r\n", "%s", sid))
	time.Sleep(200 * time.Millisecond) // the stream is open

	updated, listChanged := make(chan struct{}, 16), make(chan struct{}, 16)
	progressed := make(chan struct{}, 1024)
	client := mcp.NewClient(&mcp.Implementation{Name: "bystander", Version: "1"}, &mcp.ClientOptions{
		ResourceUpdatedHandler:      func(context.Context, *mcp.ResourceUpdatedNotificationRequest) { updated <- struct{}{} },
		ToolListChangedHandler:      func(context.Context, *mcp.ToolListChangedRequest) { listChanged <- struct{}{} },
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) { progressed <- struct{}{} },
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	bystander, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer bystander.Close()
	if err := bystander.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}

	// The slow reader's GET stream fills with log lines of the server (stdio cannot say whose
	// they are, so every session at their level gets them) ...
	line := strings.Repeat("x", 256<<10)
	for range 40 { // 10 MiB, past what the socket buffers between the two hold
		callOK(t, bystander, "a__log", map[string]any{"level": "debug", "text": line})
	}
	// ... and it calls a tool that floods progress, on a stream it never reads either.
	body := `{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"a__flood","arguments":{"count":400,"bytes":65536},"_meta":{"progressToken":"p"}}}`
	stuckRequest(t, url, fmt.Sprintf("POST %s HTTP/1.1\r\nHost: %%s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"+
		"Mcp-Session-Id: %s\r\nMcp-Protocol-Version: 2025-06-18\r\nContent-Length: %d\r\n\r\n%s", "%s", sid, len(body), body))
	time.Sleep(time.Second) // the flood is under way

	within := func(what string, ch <-chan struct{}) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatalf("the bystander's %s waited on the slow reader", what)
		}
	}
	start := time.Now()
	callOK(t, bystander, "a__touch_resource", map[string]any{"uri": uri})
	within("resource update", updated)
	callOK(t, bystander, "a__add_tool", map[string]any{"name": "fresh"})
	within("list_changed", listChanged)
	callCtx, callCancel := context.WithTimeout(ctx, 5*time.Second)
	defer callCancel()
	params := &mcp.CallToolParams{Name: "a__sleep", Arguments: map[string]any{"ms": 300}}
	params.SetProgressToken("mine")
	if _, err := bystander.CallTool(callCtx, params); err != nil {
		t.Fatalf("the bystander's call waited on the slow reader: %v", err)
	}
	within("progress", progressed)
	t.Logf("the bystander's update, list_changed and call took %s", time.Since(start).Round(time.Millisecond))
}

// A log line the server sends with one session's request reaches that session only, however
// verbose the other sessions of the project asked to be.
func TestGatewayRequestLogsStayWithTheirSession(t *testing.T) {
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "logs", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.HTTPFixture(t, "h")}})
	obj := harness.WaitStatus(t, key, 30*time.Second, "Ready", func(o *v1alpha1.ProjectMCP) bool { return harness.IsReady(o) && o.Status.Endpoint != "" })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	connect := func(name string, got chan<- string) *mcp.ClientSession {
		client := mcp.NewClient(&mcp.Implementation{Name: name, Version: "1"}, &mcp.ClientOptions{
			LoggingMessageHandler: func(_ context.Context, r *mcp.LoggingMessageRequest) { got <- fmt.Sprint(r.Params.Data) },
		})
		s, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: obj.Status.Endpoint}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		if err := s.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "debug"}); err != nil {
			t.Fatal(err)
		}
		return s
	}
	mine, theirs := make(chan string, 16), make(chan string, 16)
	a := connect("a", mine)
	connect("b", theirs)
	callOK(t, a, "h__log", map[string]any{"level": "info", "text": "for a only"})
	select {
	case got := <-mine:
		if got != "for a only" {
			t.Fatalf("a got %q", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the caller never got its own log line")
	}
	select {
	case got := <-theirs:
		t.Fatalf("another session got a log line of a's request: %q", got)
	case <-time.After(time.Second):
	}
}

// A batch session that keeps a thousand calls in flight beside an interactive one, on a server
// that runs 24 calls at once: the batch session gets its share of the connection
// (--max-calls-per-session) and its other calls wait in its own line, so the interactive
// session's calls find the server free and take about as long as alone. Without the share
// they would wait behind the batch's calls in the server's own queue (past the test
// gateway's call timeout). The wait shows in status, and calls that give up leave the line.
func TestGatewayBatchSessionCrowdsOutNoOne(t *testing.T) {
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "batch", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "a", "--workers", "24")}})
	obj := harness.WaitStatus(t, key, 30*time.Second, "Ready", func(o *v1alpha1.ProjectMCP) bool { return harness.IsReady(o) && o.Status.Endpoint != "" })
	interactive, batch := connectTo(t, obj.Status.Endpoint), connectTo(t, obj.Status.Endpoint)
	p50 := func() time.Duration {
		var took []time.Duration
		for range 200 {
			start := time.Now()
			if got := harness.Text(callOK(t, interactive.Session, "a__echo", map[string]any{"text": "hi"})); got != "hi" {
				t.Fatalf("the interactive session's call after %s: %s", time.Since(start), got)
			}
			took = append(took, time.Since(start))
		}
		slices.Sort(took)
		return took[len(took)/2]
	}
	alone := p50()

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for range 1000 {
		wg.Add(1)
		go func() { // a call that ends, by its result or the call timeout, is made again
			defer wg.Done()
			for ctx.Err() == nil {
				_, _ = batch.Session.CallTool(ctx, &mcp.CallToolParams{Name: "a__sleep", Arguments: map[string]any{"ms": 200}})
			}
		}()
	}
	harness.WaitStatus(t, key, 30*time.Second, "the batch's calls waiting", func(o *v1alpha1.ProjectMCP) bool {
		return len(o.Status.Servers) == 1 && o.Status.Servers[0].Waiting > 500
	})
	beside := p50()
	t.Logf("interactive p50: %s alone, %s beside a batch of 1000 calls", alone, beside)
	if beside > 2*alone+2*time.Millisecond {
		t.Fatalf("the interactive session's p50 went from %s alone to %s beside the batch", alone, beside)
	}

	cancel()
	wg.Wait()
	obj = harness.WaitStatus(t, key, 30*time.Second, "the line gone", func(o *v1alpha1.ProjectMCP) bool {
		return len(o.Status.Servers) == 1 && o.Status.Servers[0].Waiting == 0
	})
	if w := obj.Status.Servers[0].Waited; w < 500 {
		t.Fatalf("status counts %d requests that waited; at least the batch's first 1000 less its share did", w)
	}
	callOK(t, interactive.Session, "a__echo", map[string]any{"text": "still here"})
}

// A streamable HTTP server's request that comes on no call's stream (its GET stream), here
// sent unprompted after the call that caused it has ended, belongs to no session: the gateway
// refuses it, and the one session that has a call in flight meanwhile is not asked.
func TestGatewayUnattributedServerRequestRefused(t *testing.T) {
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "unprompted", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.HTTPFixture(t, "late", "--elicit-later")}})
	obj := harness.WaitStatus(t, key, 30*time.Second, "Ready", func(o *v1alpha1.ProjectMCP) bool { return harness.IsReady(o) && o.Status.Endpoint != "" })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	asked := make(chan string, 4)
	connect := func(name string) *mcp.ClientSession {
		client := mcp.NewClient(&mcp.Implementation{Name: name, Version: "1"}, &mcp.ClientOptions{
			ElicitationHandler: func(_ context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				asked <- name
				return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": name}}, nil
			}})
		s, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: obj.Status.Endpoint}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	a, b := connect("a"), connect("b")
	refused := strings.Count(harness.Logs.String(), "fixture late: elicit_later: refused")
	callOK(t, a, "late__elicit_later", map[string]any{"ms": 300, "text": "whose is this?"})
	// b's call is the only one in flight when the server asks.
	callOK(t, b, "late__sleep", map[string]any{"ms": 1500})
	select {
	case who := <-asked:
		t.Fatalf("session %s was asked a request that belongs to no call of its own", who)
	default:
	}
	testutil.Eventually(t, 10*time.Second, "the server to be refused", func() bool {
		return strings.Count(harness.Logs.String(), "fixture late: elicit_later: refused") > refused
	})
}

// The servers' log level follows the sessions that set one: once the last verbose session has
// gone, the servers are set to the quietest level, not left sending every debug line to a
// gateway that has no one to give them to.
func TestGatewayLogLevelLoweredWhenLastLeaves(t *testing.T) {
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "quiet", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "a", "--protocol", "2025-11-25")}})
	harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	obj := harness.Get(t, key)
	stays, verbose := connectTo(t, obj.Status.Endpoint), connectTo(t, obj.Status.Endpoint)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := verbose.Session.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "debug"}); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(stays.Session.ID()))
	level := func() mcp.LoggingLevel {
		c := harness.Ctl.Registry.Lookup(key, "s-"+hex.EncodeToString(sum[:8]), "a")
		if c == nil {
			t.Fatal("the staying session has no connection to a")
		}
		_, l := c.Subscriptions()
		return l
	}
	testutil.Eventually(t, 10*time.Second, "the server at debug", func() bool { return level() == "debug" })
	_ = verbose.Session.Close()
	testutil.Eventually(t, 10*time.Second, "the server lowered once the verbose session left", func() bool { return level() == "emergency" })
}

// Two subscribes of one session to one URI at once take one reference on the shared
// connection, so one unsubscribe drops it; and a session subscribes to at most
// --max-subscriptions-per-session resources.
func TestGatewaySubscriptionsPerSession(t *testing.T) {
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "subs", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "a", "--protocol", "2025-11-25")}})
	harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	_, base := serveGateway(t, gateway.Options{Registry: harness.Ctl.Registry, MaxSubscriptionsPerSession: 2})
	url := base + gateway.Path(key)
	const uri = "fixture://a/readme"
	sid := post(t, url, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"subs","version":"1"}}}`)
	post(t, url, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			post(t, url, sid, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"resources/subscribe","params":{"uri":%q}}`, 10+i, uri))
		}()
	}
	wg.Wait()
	sum := sha256.Sum256([]byte(sid))
	c := harness.Ctl.Registry.Lookup(key, "s-"+hex.EncodeToString(sum[:8]), "a")
	if subs, _ := c.Subscriptions(); subs[uri] != 1 {
		t.Fatalf("ten subscribes of one session took %d references, want 1", subs[uri])
	}
	post(t, url, sid, `{"jsonrpc":"2.0","id":30,"method":"resources/unsubscribe","params":{"uri":"`+uri+`"}}`)
	if subs, _ := c.Subscriptions(); subs[uri] != 0 {
		t.Fatalf("after the unsubscribe the connection holds %d references", subs[uri])
	}

	for i, u := range []string{"fixture://a/items/1", "fixture://a/items/2"} {
		if _, got := exchange(t, url, sid, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"resources/subscribe","params":{"uri":%q}}`, 40+i, u)); strings.Contains(got, "error") {
			t.Fatalf("subscribe %s: %s", u, got)
		}
	}
	_, got := exchange(t, url, sid, `{"jsonrpc":"2.0","id":50,"method":"resources/subscribe","params":{"uri":"fixture://a/items/3"}}`)
	if !strings.Contains(got, "--max-subscriptions-per-session") {
		t.Fatalf("a third subscription past a bound of 2 must be refused naming the bound: %s", got)
	}
}

// A 2026-07-28 session gets the log lines a server sends with its request, at the level the
// request names in its _meta, on that request's own response, and no other session gets them.
func TestGatewayStatelessSessionGetsItsLogs(t *testing.T) {
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "newlogs", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.HTTPFixture(t, "h", "--stateless")}})
	obj := harness.WaitStatus(t, key, 30*time.Second, "Ready", func(o *v1alpha1.ProjectMCP) bool { return harness.IsReady(o) && o.Status.Endpoint != "" })
	listen := func(got chan<- string) *mcp.Client {
		return mcp.NewClient(&mcp.Implementation{Name: "logs", Version: "1"}, &mcp.ClientOptions{
			LoggingMessageHandler: func(_ context.Context, r *mcp.LoggingMessageRequest) { got <- fmt.Sprint(r.Params.Data) }})
	}
	mine, theirs := make(chan string, 16), make(chan string, 16)
	s := harness.MustDial(t, listen(mine), obj.Status.Endpoint, "", http.Header{gateway.SessionHeader: {"logs"}})
	bystander := harness.MustDial(t, listen(theirs), obj.Status.Endpoint, "2025-11-25", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := bystander.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "debug"}); err != nil {
		t.Fatal(err)
	}
	call := func(level, line, text string) {
		t.Helper()
		params := &mcp.CallToolParams{Name: "h__log", Arguments: map[string]any{"level": line, "text": text}, Meta: mcp.Meta{mcp.MetaKeyLogLevel: level}}
		if _, err := s.CallTool(ctx, params); err != nil {
			t.Fatal(err)
		}
	}
	call("info", "info", "warm up") // a session's first calls may take the SDK's path
	call("info", "warning", "for logs only")
	deadline := time.After(5 * time.Second)
	for got := ""; got != "for logs only"; {
		select {
		case got = <-mine:
		case <-deadline:
			t.Fatal("the 2026-07-28 session never got the log line of its own request")
		}
	}
	call("error", "info", "below its level")
	select {
	case got := <-mine:
		t.Fatalf("a line below the request's level reached the session: %q", got)
	case got := <-theirs:
		t.Fatalf("another session got a log line of a 2026-07-28 session's request: %q", got)
	case <-time.After(time.Second):
	}
}

// A client that sends its request's headers and then its body slowly, or never, is answered
// 408 once the body is late: it does not hold the gateway's goroutine or its connection for
// longer, and a session beside it goes on.
func TestGatewaySlowBodyTimesOut(t *testing.T) {
	defer func(old time.Duration) { gateway.BodyReadTimeout = old }(gateway.BodyReadTimeout)
	gateway.BodyReadTimeout = time.Second
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "slowbody", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "a")}})
	harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	_, base := serveGateway(t, gateway.Options{Registry: harness.Ctl.Registry})
	url := base + gateway.Path(key)
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: 1000\r\n\r\n{\"jsonrpc\":",
		gateway.Path(key), strings.TrimPrefix(base, "http://"))
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	status, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.Contains(status, "408") {
		t.Fatalf("a body that never comes: %q %v", status, err)
	}
	s := connectTo(t, url)
	callOK(t, s.Session, "a__echo", map[string]any{"text": "beside"})
}
