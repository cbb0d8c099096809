package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// The resumable call streams the gateway keeps after their calls ended, for a resumption
// (internal/gateway/paths: budget.go): what they hold, and how many were let go past a bound.
// No label names a session or a principal.
var (
	ReplayKeptBytes = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "projectmcp_gateway_replay_kept_bytes",
		Help: "Bytes the gateway keeps of call streams whose reader went away before the end, for a resumption (bounded for the process, per principal and per session).",
	})
	ReplayEvictions = counterVec("projectmcp_gateway_replay_evictions_total",
		"Kept call streams let go before their time because a bound was full, by bound (process, principal, session).",
		[]string{"bound"})
)

// Bounds of a kept stream's eviction (the bound label).
const (
	ReplayBoundProcess   = "process"
	ReplayBoundPrincipal = "principal"
	ReplayBoundSession   = "session"
)

func init() {
	for _, b := range []string{ReplayBoundProcess, ReplayBoundPrincipal, ReplayBoundSession} {
		ReplayEvictions.WithLabelValues(b)
	}
	register(ReplayKeptBytes, ReplayEvictions)
}
