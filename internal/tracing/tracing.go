// Package tracing sets up OpenTelemetry tracing for projectmcp, and holds the tracer its
// parts start spans with.
//
// Tracing is off unless the standard OTEL_* variables configure an exporter: an OTLP endpoint
// (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT), and OTEL_TRACES_EXPORTER
// not "none". The exporter reads the rest of the standard variables itself (headers, timeout,
// protocol details); OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES name the process. Spans
// are always started (against the no-op provider when off, which costs next to nothing), so the
// code has one path.
//
// W3C trace context (traceparent, tracestate) is accepted from sessions, in HTTP headers or in
// a request's _meta, and passed on to servers: in HTTP headers to HTTP servers, and in the
// _meta of every forwarded request, where the MCP specification (2026-07-28, SEP-414) reserves
// the keys traceparent, tracestate and baggage for it.
package tracing

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"

	"go.opentelemetry.io/otel/baggage"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
)

// Tracer is the tracer every part of projectmcp starts its spans with: the global provider's,
// asked for once per provider. Asking the provider on every span costs a lock and a lookup of
// the tracer by its name and attributes, several microseconds of each forwarded call.
func Tracer() trace.Tracer {
	tp := otel.GetTracerProvider()
	if c := tracerOf.Load(); c != nil && c.provider == tp {
		return c.tracer
	}
	t := tp.Tracer(tracerName)
	tracerOf.Store(&providerTracer{provider: tp, tracer: t})
	return t
}

const tracerName = "github.com/dsh-dev/projectmcp"

// providerTracer is the tracer a provider gave; a provider set later (otel.SetTracerProvider)
// gives its own.
type providerTracer struct {
	provider trace.TracerProvider
	tracer   trace.Tracer
}

var tracerOf atomic.Pointer[providerTracer]

// Propagator carries W3C trace context in and out of HTTP headers.
var Propagator propagation.TextMapPropagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// Configured reports whether the environment configures an exporter.
func Configured() bool {
	if os.Getenv("OTEL_TRACES_EXPORTER") == "none" || os.Getenv("OTEL_SDK_DISABLED") == "true" {
		return false
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Setup installs the OTLP exporter the environment configures, if any, and returns the
// function that flushes and stops it (a no-op when tracing is off).
func Setup(ctx context.Context) (shutdown func(context.Context) error, err error) {
	otel.SetTextMapPropagator(Propagator)
	if !Configured() {
		return func(context.Context) error { return nil }, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("tracing: the OTLP exporter the OTEL_* variables configure: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(semconv.ServiceName(serviceName())))
	if err != nil {
		res = resource.Default()
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	return tp.Shutdown, nil
}

func serviceName() string {
	if v := os.Getenv("OTEL_SERVICE_NAME"); v != "" {
		return v
	}
	return "projectmcp"
}

// FromHeaders returns ctx with the trace context the headers carry (a session's traceparent);
// ctx itself when they carry none, which most requests do: Propagator reads nothing but
// traceparent (tracestate only beside it) and baggage.
func FromHeaders(ctx context.Context, h map[string][]string) context.Context {
	if len(h["Traceparent"]) == 0 && len(h["Baggage"]) == 0 {
		return ctx
	}
	return Propagator.Extract(ctx, propagation.HeaderCarrier(h))
}

// ToHeaders writes ctx's trace context into the headers of a request to a server.
func ToHeaders(ctx context.Context, h map[string][]string) {
	Propagator.Inject(ctx, propagation.HeaderCarrier(h))
}

// MetaKeys are the _meta keys that carry trace context (SEP-414), in the order written.
var MetaKeys = []string{"traceparent", "tracestate", "baggage"}

// Fields returns ctx's trace context as _meta members, keyed by MetaKeys; nil when ctx carries
// none (then nothing is allocated).
func Fields(ctx context.Context) propagation.MapCarrier {
	if !trace.SpanContextFromContext(ctx).IsValid() && baggage.FromContext(ctx).Len() == 0 {
		return nil
	}
	m := propagation.MapCarrier{}
	Propagator.Inject(ctx, m)
	return m
}

// metaHolder is a request's params, whose _meta can be read and set.
type metaHolder interface {
	GetMeta() map[string]any
	SetMeta(map[string]any)
}

// ToMeta writes ctx's trace context into the _meta of a request to a server.
func ToMeta(ctx context.Context, params metaHolder) {
	fields := Fields(ctx)
	if len(fields) == 0 {
		return
	}
	m := params.GetMeta()
	if m == nil {
		m = make(map[string]any, len(fields))
	}
	for k, v := range fields {
		m[k] = v
	}
	params.SetMeta(m)
}

// FromMeta returns ctx with the trace context a request's _meta carries (get reads one key;
// a session's traceparent), or ctx unchanged when it carries none.
func FromMeta(ctx context.Context, get func(key string) string) context.Context {
	if get("traceparent") == "" {
		return ctx
	}
	m := propagation.MapCarrier{}
	for _, k := range MetaKeys {
		if v := get(k); v != "" {
			m[k] = v
		}
	}
	return Propagator.Extract(ctx, m)
}
