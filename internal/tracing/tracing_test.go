package tracing

import (
	"context"
	"net/http"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// Tracing is off unless the OTEL_* variables name an OTLP endpoint, and "none" or a disabled
// SDK turn it off again.
func TestConfigured(t *testing.T) {
	for name, tc := range map[string]struct {
		env  map[string]string
		want bool
	}{
		"nothing set":       {map[string]string{}, false},
		"an endpoint":       {map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, true},
		"a traces endpoint": {map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, true},
		"exporter none":     {map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "none"}, false},
		"sdk disabled":      {map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"}, false},
	} {
		t.Run(name, func(t *testing.T) {
			for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER", "OTEL_SDK_DISABLED"} {
				t.Setenv(k, tc.env[k])
			}
			if got := Configured(); got != tc.want {
				t.Fatalf("Configured() = %v, want %v", got, tc.want)
			}
		})
	}
}

// Configured, Setup installs an SDK tracer provider; its shutdown flushes and stops it.
func TestSetupInstallsProvider(t *testing.T) {
	prev := otel.GetTracerProvider()
	defer otel.SetTracerProvider(prev)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1") // nothing listens: export fails quietly
	shutdown, err := Setup(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := otel.GetTracerProvider().(*sdktrace.TracerProvider); !ok {
		t.Fatalf("provider %T", otel.GetTracerProvider())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 0)
	defer cancel()
	_ = shutdown(ctx) // bounded even when the collector is unreachable
}

// A request's trace context and baggage are read from its headers; a request carrying
// neither keeps its context as it is.
func TestFromHeaders(t *testing.T) {
	const parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	for name, tc := range map[string]struct {
		headers      http.Header
		traced, kept bool
		baggage      string
	}{
		"none":                      {headers: http.Header{}, kept: true},
		"other headers":             {headers: http.Header{"Accept": {"*/*"}}, kept: true},
		"tracestate alone":          {headers: http.Header{"Tracestate": {"a=b"}}, kept: true},
		"a traceparent":             {headers: http.Header{"Traceparent": {parent}}, traced: true},
		"a traceparent and a state": {headers: http.Header{"Traceparent": {parent}, "Tracestate": {"a=b"}}, traced: true},
		"baggage":                   {headers: http.Header{"Baggage": {"k=v"}}, baggage: "v"},
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			got := FromHeaders(ctx, tc.headers)
			if kept := got == ctx; kept != tc.kept {
				t.Errorf("context kept: %v, want %v", kept, tc.kept)
			}
			if traced := trace.SpanContextFromContext(got).IsValid(); traced != tc.traced {
				t.Errorf("traced: %v, want %v", traced, tc.traced)
			}
			if v := baggage.FromContext(got).Member("k").Value(); v != tc.baggage {
				t.Errorf("baggage k=%q, want %q", v, tc.baggage)
			}
		})
	}
}

// Tracer is asked of each provider once, and spans go to the provider set last.
func TestTracerFollowsTheProvider(t *testing.T) {
	prev := otel.GetTracerProvider()
	defer otel.SetTracerProvider(prev)
	for _, name := range []string{"first", "second"} {
		rec := tracetest.NewSpanRecorder()
		otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
		if Tracer() != Tracer() {
			t.Fatalf("%s provider: Tracer gave two tracers", name)
		}
		_, span := Tracer().Start(context.Background(), name)
		span.End()
		if got := rec.Ended(); len(got) != 1 || got[0].Name() != name {
			t.Fatalf("%s provider recorded %d spans, want its own one", name, len(got))
		}
	}
}
