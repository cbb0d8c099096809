package gateway_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/gateway"
	"github.com/dsh-dev/projectmcp/internal/testenv/harness"
	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// sessionRefPattern is how status, spans and logs name a session: a hash, never its id.
var sessionRefPattern = regexp.MustCompile(`^s-[0-9a-f]{16}$`)

// No session's id leaves the gateway. A stateful (2025-11-25) session and a stateless
// (2026-07-28) one mount, call tools on a stdio and an HTTP server (the message-level path,
// progress, an elicitation, a log line at the level one of them set, a subscription and its
// update), and end; then neither the stateful session's Mcp-Session-Id nor the stateless
// one's X-ProjectMCP-Session value is in the ProjectMCP (its whole status), the namespace's
// events, the controller's log, the metrics (the controller's /metrics and the default
// registry), the spans, or any request the HTTP server received. Status lists the two
// sessions by refs (s-<16 hex>), the stateful one's being the hash of its id. Each place
// searched is first shown to hold something of this run, so that finding nothing in it
// means something.
func TestNoSessionIDLeaks(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	defer otel.SetTracerProvider(prev)

	// The HTTP server is reached through a proxy that keeps every request it forwards.
	upstream := harness.HTTPFixture(t, "h", "--protocol", "2025-11-25")
	target, err := url.Parse(upstream.HTTP.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: target.Scheme, Host: target.Host})
	var upMu sync.Mutex
	var upstreamSaw bytes.Buffer
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		dump, err := httputil.DumpRequest(r, true) // restores the body for the proxy
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		upMu.Lock()
		upstreamSaw.Write(dump)
		upstreamSaw.WriteString("\n")
		upMu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close) // after the project's deletion, so its connection ends first
	upstream.HTTP.URL = front.URL + target.Path

	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "ids", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "a"), upstream}})
	harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)

	// What the clients themselves sent: the ids must be there, or the searches below prove
	// nothing.
	sent := &headerLog{}
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	header := "leak-canary-" + hex.EncodeToString(nonce[:])
	stateful := mustDialLogged(t, agentClient("ids-stateful"), harness.EndpointOf(key), "2025-11-25", nil, sent)
	stateless := mustDialLogged(t, agentClient("ids-stateless"), harness.EndpointOf(key), "", http.Header{gateway.SessionHeader: {header}}, sent)
	sid := stateful.ID()
	if sid == "" || sessionRefPattern.MatchString(sid) {
		t.Fatalf("the stateful session's Mcp-Session-Id is %q: the test needs a real one", sid)
	}
	ids := map[string]string{"the stateful session's Mcp-Session-Id": sid, "the stateless session's " + gateway.SessionHeader: header}
	for what, id := range ids {
		if !strings.Contains(sent.String(), id) {
			t.Fatalf("%s %q is not in what the clients sent: the searches below would prove nothing", what, id)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := stateful.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "debug"}); err != nil {
		t.Fatal(err)
	}
	if err := stateful.Subscribe(ctx, &mcp.SubscribeParams{URI: "fixture://a/readme"}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*mcp.ClientSession{stateful, stateless} {
		for _, server := range []string{"a", "h"} {
			if got := harness.Text(callOK(t, s, server+"__echo", map[string]any{"text": "hello"})); got != "hello" {
				t.Fatalf("%s__echo: %q", server, got)
			}
			if got := harness.Text(callOK(t, s, server+"__elicit", map[string]any{"text": "ok?"})); !strings.Contains(got, "answers ok?") {
				t.Fatalf("%s__elicit: %q", server, got)
			}
			callOK(t, s, server+"__log", map[string]any{"level": "info", "text": "a line"})
		}
	}
	progress := &mcp.CallToolParams{Name: "a__sleep", Arguments: map[string]any{"ms": 250}}
	progress.SetProgressToken("ids-progress")
	if _, err := stateful.CallTool(ctx, progress); err != nil {
		t.Fatal(err)
	}
	callOK(t, stateful, "a__touch_resource", map[string]any{"uri": "fixture://a/readme"})
	if err := stateful.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: "fixture://a/readme"}); err != nil {
		t.Fatal(err)
	}

	// Status names both sessions by refs, and the stateful one by the hash of its id.
	sum := sha256.Sum256([]byte(sid))
	statefulRef := "s-" + hex.EncodeToString(sum[:8])
	var during []byte
	harness.WaitStatus(t, key, 30*time.Second, "both sessions in status", func(o *v1alpha1.ProjectMCP) bool {
		if o.Status.SessionCount != 2 || len(o.Status.Sessions) != 2 {
			return false
		}
		during, _ = json.Marshal(o)
		return true
	})
	obj := harness.Get(t, key)
	refs := map[string]string{}
	for _, s := range obj.Status.Sessions {
		if !sessionRefPattern.MatchString(s.ID) {
			t.Errorf("status.sessions names a session %q, not a ref (s- and 16 hex digits)", s.ID)
		}
		refs[s.ID] = s.Client
	}
	if len(refs) != 2 {
		t.Errorf("status.sessions names the two sessions alike: %v", refs)
	}
	if refs[statefulRef] != "ids-stateful/1" {
		t.Errorf("status.sessions has no %s (the hash of the stateful session's id) for ids-stateful/1: %v", statefulRef, refs)
	}

	// Both sessions end: the stateful one by DELETE, the stateless one by its idle bound.
	_ = stateful.Close()
	_ = stateless.Close()
	harness.WaitStatus(t, key, 30*time.Second, "no session in status", func(o *v1alpha1.ProjectMCP) bool { return o.Status.SessionCount == 0 })

	// Everything the run left where others can read it.
	places := map[string]string{}
	after, err := json.Marshal(harness.Get(t, key))
	if err != nil {
		t.Fatal(err)
	}
	places["the ProjectMCP with both sessions in status"] = string(during)
	places["the ProjectMCP after the sessions ended"] = string(after)
	places["the namespace's events"] = eventsOf(t, ns, key.Name)
	places["the controller's log"] = harness.Logs.String()
	places["the controller's /metrics"] = scrapeText(t)
	places["the default Prometheus registry"] = gathered(t, prometheus.DefaultGatherer)
	places["the controller-runtime registry"] = gathered(t, ctrlmetrics.Registry)
	places["the spans"] = spansOf(rec, statefulRef, t)
	upMu.Lock()
	places["the requests the HTTP server received"] = upstreamSaw.String()
	upMu.Unlock()

	// Each place holds something of this run.
	for what, want := range map[string]string{
		"the ProjectMCP with both sessions in status": statefulRef,
		"the ProjectMCP after the sessions ended":     key.Name,
		"the namespace's events":                      key.Name,
		"the controller's log":                        key.String(),
		"the controller's /metrics":                   "projectmcp_sessions",
		"the default Prometheus registry":             "go_goroutines",
		"the controller-runtime registry":             "projectmcp_tool_calls_total",
		"the spans":                                   statefulRef,
		"the requests the HTTP server received":       `"tools/call"`,
	} {
		if !strings.Contains(places[what], want) {
			t.Errorf("%s does not hold %q: searching it for the ids would prove nothing", what, want)
		}
	}
	for where, haystack := range places {
		for what, id := range ids {
			if i := strings.Index(haystack, id); i >= 0 {
				t.Errorf("%s is in %s: …%s…", what, where, haystack[max(0, i-200):min(len(haystack), i+len(id)+80)])
			}
		}
	}
}

// headerLog keeps the headers of every request its clients send.
type headerLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *headerLog) note(h http.Header) {
	l.mu.Lock()
	defer l.mu.Unlock()
	_ = h.Write(&l.buf)
	l.buf.WriteString("\n")
}

func (l *headerLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// loggedRT is harness.HeaderRT that notes each request's headers as sent.
type loggedRT struct {
	h   http.Header
	log *headerLog
}

func (r loggedRT) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	for k, v := range r.h {
		req.Header[k] = v
	}
	r.log.note(req.Header)
	return http.DefaultTransport.RoundTrip(req)
}

// mustDialLogged is harness.MustDial with the session's request headers noted in log.
func mustDialLogged(t *testing.T, c *mcp.Client, endpoint, version string, header http.Header, log *headerLog) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{Transport: loggedRT{header, log}}},
		&mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("connect to %s: %v", endpoint, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// eventsOf is every event of the namespace, core and events.k8s.io, as JSON, once the
// controller has recorded one about the project.
func eventsOf(t *testing.T, ns, name string) string {
	t.Helper()
	var out string
	testutil.Eventually(t, 20*time.Second, "an event about the project", func() bool {
		core, events := &corev1.EventList{}, &eventsv1.EventList{}
		if harness.Env.Client.List(context.Background(), core, client.InNamespace(ns)) != nil ||
			harness.Env.Client.List(context.Background(), events, client.InNamespace(ns)) != nil {
			return false
		}
		a, _ := json.Marshal(core)
		b, _ := json.Marshal(events)
		out = string(a) + "\n" + string(b)
		return len(events.Items) > 0 && strings.Contains(out, name)
	})
	return out
}

// scrapeText is the controller's /metrics page: the controller-runtime registry, served as
// the controller serves it.
func scrapeText(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(promhttp.HandlerFor(ctrlmetrics.Registry, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// gathered lists a registry's metrics with their label values, one series a line.
func gathered(t *testing.T, g prometheus.Gatherer) string {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, f := range families {
		for _, m := range f.GetMetric() {
			b.WriteString(f.GetName())
			for _, l := range m.GetLabel() {
				fmt.Fprintf(&b, " %s=%q", l.GetName(), l.GetValue())
			}
			b.WriteString("\n")
		}
	}
	return b.String()
}

// spansOf renders every span recorded (started or ended): name, status, attributes and
// events. The mount span of the session ref must be among them.
func spansOf(rec *tracetest.SpanRecorder, ref string, t *testing.T) string {
	t.Helper()
	var b strings.Builder
	mounted := false
	write := func(s sdktrace.ReadOnlySpan) {
		fmt.Fprintf(&b, "%s status=%q", s.Name(), s.Status().Description)
		for _, kv := range s.Attributes() {
			fmt.Fprintf(&b, " %s=%q", kv.Key, kv.Value.String())
			if s.Name() == "projectmcp.mount" && kv.Key == "projectmcp.session" && kv.Value.AsString() == ref {
				mounted = true
			}
		}
		for _, e := range s.Events() {
			fmt.Fprintf(&b, " event %s", e.Name)
			for _, kv := range e.Attributes {
				fmt.Fprintf(&b, " %s=%q", kv.Key, kv.Value.String())
			}
		}
		b.WriteString("\n")
	}
	for _, s := range rec.Started() {
		write(s)
	}
	for _, s := range rec.Ended() {
		write(s)
	}
	if !mounted {
		t.Errorf("no projectmcp.mount span names the session %s", ref)
	}
	return b.String()
}
