package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

var (
	// ItemDenials counts uses an RBAC policy refused.
	ItemDenials = counterVec("projectmcp_gateway_item_denials_total",
		"Uses of a tool, prompt or resource refused by a project's RBAC policy (spec.toolAuthorization: RBAC), by resource (tools, prompts, resources).",
		[]string{"resource"})
	auditDropped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "projectmcp_audit_records_dropped_total",
		Help: "Audit records dropped because the audit log could not keep up (--audit-log).",
	})
)

func init() {
	for _, r := range []string{"tools", "prompts", "resources"} {
		ItemDenials.WithLabelValues(r) // each series there from the start
	}
	register(ItemDenials, auditDropped)
}

// ItemDenied counts a use of an item of resource ("tools", "prompts", "resources") that RBAC
// does not grant.
func ItemDenied(resource string) { ItemDenials.WithLabelValues(resource).Inc() }

// AuditDropped counts an audit record the log had no room for.
func AuditDropped() { auditDropped.Inc() }
