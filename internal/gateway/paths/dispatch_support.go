package paths

import (
	"context"
	"fmt"

	"github.com/dsh-dev/projectmcp/internal/gateway/access"
	"github.com/dsh-dev/projectmcp/internal/tracing"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"k8s.io/apimachinery/pkg/types"
)

// Span starts a span of an operation on one of the project's sessions; end ends it, with err's
// status when err is not nil. The attributes (attrs' and the project's and session's) are set
// only on a span that records: with tracing off, every forwarded call would build them for
// nothing.
func Span(ctx context.Context, key types.NamespacedName, name, session string, attrs func() []attribute.KeyValue) (_ context.Context, end func(err error)) {
	ctx, span := tracing.Tracer().Start(ctx, name)
	if span.IsRecording() {
		var kv []attribute.KeyValue
		if attrs != nil {
			kv = attrs()
		}
		span.SetAttributes(append(kv, attribute.String("projectmcp.project", key.String()), attribute.String("projectmcp.session", session))...)
	}
	return ctx, func(err error) {
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

// admit refuses a request whose item the caller may not use.
func (p *Paths) admit(ctx context.Context, o Origin) error {
	if o.item.Resource == "" && !access.UsesItem(o.method) {
		return nil
	}
	ia, on := p.ep.RBAC()
	if !on {
		return nil
	}
	if o.item.Resource == "" {
		return fmt.Errorf("projectmcp: %s names no tool, prompt or resource the project's RBAC policy can check", o.method)
	}
	if !ia.Permit(ctx, o.who, p.key, []access.Item{o.item})[0] {
		return &access.DeniedItem{Project: p.key.Name, Item: o.item}
	}
	return nil
}
