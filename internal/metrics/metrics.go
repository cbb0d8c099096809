// Package metrics holds what projectmcp exports on the controller's /metrics endpoint (the
// controller-runtime registry, next to its generic controller and client metrics): how many
// connections are up and in which phase, how many sessions are bound, how forwarded requests
// end, and how long mounts wait.
package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	// Forwarded counts requests forwarded from sessions to servers, by MCP method and result
	// ("ok", "error": the server or the connection failed it, "unavailable": the server was
	// down or not bound to the session).
	Forwarded = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "projectmcp_forwarded_requests_total",
		Help: "Requests forwarded from agent sessions to MCP servers, by method and result.",
	}, []string{"method", "result"})
	// FastPath counts the tools/call requests of stateful sessions by how the gateway carried
	// them: "raw" at the JSON-RPC message level, or through the SDK server because the server
	// speaks the other revision ("revision", nothing sent: the SDK translates its results), a
	// 2026-07-28 server asked a 2025-11-25 session for input ("input": the SDK calls again and
	// asks the session), or the request needed something only the SDK path does ("sdk").
	FastPath = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "projectmcp_tool_calls_path_total",
		Help: "Stateful sessions' tool calls by how the gateway forwarded them: raw, or through the SDK (and why).",
	}, []string{"path"})
	// StatusWrites counts the status patches the reconciler sent, by result ("ok", "conflict":
	// another writer changed the object first and the reconcile runs again, "error").
	StatusWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "projectmcp_status_writes_total",
		Help: "Status patches sent by the reconciler, by result.",
	}, []string{"result"})
	// MountWait is how long a new session's mount waited for its servers (bounded by the
	// project's readyTimeout).
	MountWait = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "projectmcp_mount_wait_seconds",
		Help:    "How long a new session's mount waited for its servers to be ready.",
		Buckets: []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
	})
)

// Counts are the registry's figures at one moment.
type Counts struct {
	Projects    int
	Sessions    int
	Connections map[string]int // by phase
}

var (
	mu     sync.Mutex
	source func() Counts
)

// SetSource sets where the connection and session gauges are read at each scrape (the
// process's one registry).
func SetSource(f func() Counts) {
	mu.Lock()
	defer mu.Unlock()
	source = f
}

var (
	connectionsDesc = prometheus.NewDesc("projectmcp_connections", "Live MCP connections, by phase.", []string{"phase"}, nil)
	sessionsDesc    = prometheus.NewDesc("projectmcp_sessions", "Agent sessions bound to projects.", nil, nil)
	projectsDesc    = prometheus.NewDesc("projectmcp_projects", "Projects the controller holds.", nil, nil)
)

// gauges reads the source at scrape time, so nothing is counted twice and nothing drifts.
type gauges struct{}

func (gauges) Describe(ch chan<- *prometheus.Desc) {
	ch <- connectionsDesc
	ch <- sessionsDesc
	ch <- projectsDesc
}

func (gauges) Collect(ch chan<- prometheus.Metric) {
	mu.Lock()
	f := source
	mu.Unlock()
	if f == nil {
		return
	}
	c := f()
	for phase, n := range c.Connections {
		ch <- prometheus.MustNewConstMetric(connectionsDesc, prometheus.GaugeValue, float64(n), phase)
	}
	ch <- prometheus.MustNewConstMetric(sessionsDesc, prometheus.GaugeValue, float64(c.Sessions))
	ch <- prometheus.MustNewConstMetric(projectsDesc, prometheus.GaugeValue, float64(c.Projects))
}

func init() {
	ctrlmetrics.Registry.MustRegister(Forwarded, FastPath, StatusWrites, MountWait, gauges{})
}
