package paths

import (
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/audit"
	"github.com/dsh-dev/projectmcp/internal/gateway/access"
	"github.com/dsh-dev/projectmcp/internal/metrics"
)

// audit records one use of an item (--audit-log) that began at start and ended with outcome
// ("denied": the project's RBAC policy refused it before anything was sent), and counts a
// denial.
func (p *Paths) audit(o Origin, server string, start time.Time, outcome string) {
	if outcome == "denied" {
		metrics.ItemDenied(o.item.Resource)
	}
	log := p.opts.Audit
	if log == nil {
		return
	}
	policy := v1alpha1.ToolAuthorizationProject
	if _, on := p.ep.RBAC(); on {
		policy = v1alpha1.ToolAuthorizationRBAC
	}
	r := audit.Record{
		Time: start.UTC(), Principal: o.who.Principal, Project: p.key.String(), Server: server, Method: o.method,
		Outcome: outcome, DurationMs: float64(time.Since(start).Microseconds()) / 1000,
		Session: sessionHash(o.session), Policy: string(policy), Decision: "allow",
	}
	if outcome == "denied" {
		r.Decision = "deny"
	}
	switch o.item.Resource {
	case access.ResourceTools:
		r.Tool = o.item.Name
	case access.ResourcePrompts:
		r.Prompt = o.item.Name
	case access.ResourceResources:
		r.URI = o.item.Name
	}
	if p.opts.AuditArguments {
		r.Arguments = o.args
	}
	log.Write(r)
}

// sessionHash tells a session's audit records together without naming the session: its id is
// a credential of sorts (whoever holds it may act in the session, where its principal allows).
func sessionHash(id string) string {
	if id == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:8])
}
