package gateway_test

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
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/gateway"
	"github.com/dsh-dev/projectmcp/internal/testenv/harness"
	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// One forwarded call, traced: the session's W3C trace context is the parent of the gateway's
// span for the call, which names the project, the server and both names of the tool, and the
// server receives the trace context with that span as the parent. The connection's connect
// and the session's mount have spans too.
func TestGatewayTracesForwardedCall(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	defer otel.SetTracerProvider(prev)

	upstream := harness.HTTPFixture(t, "t")
	target, err := url.Parse(upstream.HTTP.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: target.Scheme, Host: target.Host})
	var mu sync.Mutex
	var seen []string // the traceparent of each tools/call the server received
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if bytes.Contains(body, []byte(`"tools/call"`)) {
			mu.Lock()
			seen = append(seen, r.Header.Get("traceparent"))
			mu.Unlock()
		}
		proxy.ServeHTTP(w, r)
	}))
	defer front.Close()
	upstream.HTTP.URL = front.URL + target.Path

	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "traced", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{upstream}})
	harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	const traceID, parentID = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	s := harness.MustDial(t, agentClient("traced"), harness.EndpointOf(key), "2025-11-25",
		http.Header{"Traceparent": {"00-" + traceID + "-" + parentID + "-01"}})
	if got := harness.Text(callOK(t, s, "t__echo", map[string]any{"text": "traced"})); got != "traced" {
		t.Fatalf("echo: %q", got)
	}

	var call sdktrace.ReadOnlySpan
	names := map[string]bool{}
	for _, span := range rec.Ended() {
		names[span.Name()] = true
		if span.Name() == "projectmcp.forward tools/call" && attr(span, "projectmcp.raw_name") == "echo" {
			call = span
		}
	}
	if call == nil {
		t.Fatalf("no span for the forwarded call; spans: %v", names)
	}
	if call.SpanContext().TraceID().String() != traceID || call.Parent().SpanID().String() != parentID {
		t.Fatalf("the call's span must continue the session's trace: trace %s parent %s", call.SpanContext().TraceID(), call.Parent().SpanID())
	}
	if attr(call, "projectmcp.name") != "t__echo" || attr(call, "projectmcp.server") != "t" || attr(call, "projectmcp.project") != key.String() {
		t.Fatalf("the call's span attributes: %v", call.Attributes())
	}
	if !names["projectmcp.connect"] || !names["projectmcp.mount"] {
		t.Fatalf("connect and mount spans: %v", names)
	}
	mu.Lock()
	defer mu.Unlock()
	want := "00-" + traceID + "-" + call.SpanContext().SpanID().String() + "-01"
	if len(seen) == 0 || !strings.EqualFold(seen[len(seen)-1], want) {
		t.Fatalf("the server must receive the trace context %s, got %v", want, seen)
	}
}

func attr(span sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range span.Attributes() {
		if kv.Key == attribute.Key(key) {
			return kv.Value.AsString()
		}
	}
	return ""
}

// The trace context also travels in the forwarded request's _meta (SEP-414: the keys
// traceparent and tracestate), which is how a stdio server gets it: on the fast path (raw)
// and through the SDK, whether the session sent its own trace context in headers or in _meta.
func TestGatewayTraceContextInMeta(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(tp)
	defer otel.SetTracerProvider(prev)

	srv := harness.FixtureServer(t, "tm", "--protocol", "2025-11-25")
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "traced-meta", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{srv}})
	harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	for i, c := range []struct {
		name    string
		version string // "2025-11-25": the fast path; "": a stateless session, through the SDK
		inMeta  bool   // the session's trace context in _meta, else in headers
	}{
		{"raw-header", "2025-11-25", false},
		{"sdk-header", "", false},
		{"raw-meta", "2025-11-25", true},
		{"sdk-meta", "", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			parentID := fmt.Sprintf("00f067aa0ba902b%d", i)
			traceparent := "00-" + traceID + "-" + parentID + "-01"
			header := http.Header{}
			if c.version == "" {
				header.Set(gateway.SessionHeader, c.name)
			}
			params := &mcp.CallToolParams{Name: "tm__echo", Arguments: map[string]any{"text": c.name}}
			if c.inMeta {
				params.Meta = mcp.Meta{"traceparent": traceparent}
			} else {
				header.Set("Traceparent", traceparent)
			}
			s := harness.MustDial(t, agentClient("traced"), harness.EndpointOf(key), c.version, header)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if res, err := s.CallTool(ctx, params); err != nil || harness.Text(res) != c.name {
				t.Fatalf("echo: %v %v", res, err)
			}
			var call sdktrace.ReadOnlySpan
			for _, span := range rec.Ended() {
				if span.Name() == "projectmcp.forward tools/call" && span.Parent().SpanID().String() == parentID {
					call = span
				}
			}
			if call == nil || call.SpanContext().TraceID().String() != traceID {
				t.Fatalf("no span for the call continuing the session's trace context %s", traceparent)
			}
			want := fmt.Sprintf("fixture tm: echo %s traceparent 00-%s-%s-01", c.name, traceID, call.SpanContext().SpanID())
			testutil.Eventually(t, 10*time.Second, "the server to see the trace context in _meta", func() bool {
				return strings.Contains(harness.Logs.String(), want)
			})
		})
	}
}
