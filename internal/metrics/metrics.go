// Package metrics holds what projectmcp exports on the controller's /metrics endpoint (the
// controller-runtime registry, next to its generic controller and client metrics): the
// connections and their phases, connects, reconnects, rebuilds and repoints, forwarded
// requests and tool calls, sessions, list_changed notifications, status writes and the
// gateway's HTTP requests.
//
// Labels are bounded. The server label is the server's name in the config (at most 64
// characters of [A-Za-z0-9_-], the CRD's bound), so its values are bounded by the server names
// the configs have now: a label value's series are deleted once no project has a server of that
// name (UseServer, ForgetServer, ForgetProject); every other label has a fixed set of values. The project's
// namespace and name (project_namespace, project) are added only when Configure asks for them
// (--metrics-project-labels): a controller with many projects would otherwise have series for
// each. The gateway's request counter never has them: its path is the caller's to choose.
//
// The hot paths (a forwarded call) use handles resolved once per server (ServerOf), whose
// label values are looked up once per outcome: counting a call allocates nothing.
package metrics

import (
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/revision"
)

// Label names of the project, present with Configure(true).
const (
	LabelNamespace = "project_namespace"
	LabelProject   = "project"
)

// maxServerLabel bounds a server label; names longer than the CRD allows (never, through the
// API server) are cut.
const maxServerLabel = 64

// FastPath counts the tools/call requests of sessions by how the gateway carried them: "raw"
// at the JSON-RPC message level, or through the SDK server because the server speaks the other
// revision ("revision", nothing sent: the SDK translates its results), a 2026-07-28 server
// asked a 2025-11-25 session for input ("input": the SDK calls again and asks the session), a
// stateless session resumes a call the gateway holds for it ("resume": its answers go to the
// server's requests, see InputRounds), or the request needed something only the SDK path does
// ("sdk").
var FastPath = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "projectmcp_tool_calls_path_total",
	Help: "Sessions' tool calls by how the gateway forwarded them: raw, or through the SDK (and why).",
}, []string{"path"})

// RequestPath counts the sessions' prompts/get, resources/read and completion/complete
// requests by method and by how the gateway carried them: "raw" at the JSON-RPC message level
// (the server's result passed back as it came), or through the SDK server because the server
// speaks the other revision ("revision") or the request needed something only the SDK path
// does ("sdk": an unknown name or URI, a progress token, a connection that takes typed
// requests only).
var RequestPath = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "projectmcp_requests_path_total",
	Help: "Sessions' prompts/get, resources/read and completion/complete requests by method and by how the gateway forwarded them: raw, or through the SDK (revision, sdk).",
}, []string{"method", "path"})

// InputRounds counts the rounds of the multi-round-trip calls the gateway holds for stateless
// (2026-07-28) sessions whose server speaks 2025-11-25 and sends requests of its own during a
// call, by outcome: "asked" (the session got an input-required result carrying the server's
// requests), "answered" (the session called again with its answers), "expired" (it did not
// within the bound: the call was cancelled upstream), "refused" (too many calls of the project
// were waiting: the server's requests got an error) and "invalid" (a requestState that is
// unknown, expired or another session's or project's, or answers that do not fit).
var InputRounds = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "projectmcp_input_rounds_total",
	Help: "Rounds of the calls the gateway holds for stateless sessions while a 2025-11-25 server waits for their input, by outcome (asked, answered, expired, refused, invalid).",
}, []string{"outcome"})

// gatewayRequests counts the gateway's HTTP requests by response code and auth decision.
var gatewayRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "projectmcp_gateway_requests_total",
	Help: "HTTP requests to the gateway, by response code and auth decision (allowed, local, denied, throttled, unauthenticated, error, none).",
}, []string{"code", "auth"})

// Outcomes of a forwarded request (Forwarded's result, ToolCall's outcome).
type Outcome uint8

const (
	OK          Outcome = iota // the server answered
	ToolError                  // tools/call only: the server's result has isError set
	Error                      // the server or the connection failed the request
	Unavailable                // the server was down, or not bound to the session
	Timeout                    // the gateway's --call-timeout ended it
	Cancelled                  // the session gave up on it
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"ok", "tool_error", "error", "unavailable", "timeout", "cancelled"}

func (o Outcome) String() string { return outcomeNames[o] }

// Methods a forwarded request may have (the method label).
var methods = [...]string{"tools/call", "prompts/get", "resources/read", "completion/complete", "resources/subscribe", "other"}

const numMethods = len(methods)

// methodIndex is the index of a method in methods ("other" for anything else).
func methodIndex(method string) int {
	if i := slices.Index(methods[:], method); i >= 0 {
		return i
	}
	return numMethods - 1
}

// Rebuild and repoint reasons.
const (
	ReasonConfigChanged      = "ConfigChanged"
	ReasonReconnectRequested = "ReconnectRequested"
	ReasonDeadAtMount        = v1alpha1.RebuildReasonDeadAtMount // as status says it
)

// Session revisions (the revision label of projectmcp_sessions): stateful sessions (2025-11-25
// and the older revisions) are counted under 2025-11-25.
var (
	RevisionStateful  = revision.Stateful.String()
	RevisionStateless = revision.Stateless.String()
)

var (
	callBuckets    = []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}
	connectBuckets = []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
	mountBuckets   = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}
)

// set is every metric whose labels depend on Configure.
type set struct {
	projectLabels bool

	transitions     *prometheus.CounterVec
	connectDuration *prometheus.HistogramVec
	reconnects      *prometheus.CounterVec
	rebuilds        *prometheus.CounterVec
	repoints        *prometheus.CounterVec
	toolCalls       *prometheus.CounterVec
	toolDuration    *prometheus.HistogramVec
	forwarded       *prometheus.CounterVec
	mountWait       *prometheus.HistogramVec
	queueWait       *prometheus.HistogramVec
	listChanged     *prometheus.CounterVec
	statusWrites    *prometheus.CounterVec
	gauges          gauges

	mu      sync.RWMutex
	servers map[serverKey]*Server
	// users are, without project labels, the projects that have a server of each label value
	// (UseServer): a value's series go with its last user, so that renaming servers does not
	// grow the series without bound.
	users map[string]map[projectKey]struct{}
}

type serverKey struct{ namespace, project, server string }

type projectKey struct{ namespace, project string }

func newSet(projectLabels bool) *set {
	labels := func(names ...string) []string {
		if projectLabels {
			return append([]string{LabelNamespace, LabelProject}, names...)
		}
		return names
	}
	s := &set{projectLabels: projectLabels, servers: map[serverKey]*Server{}, users: map[string]map[projectKey]struct{}{}}
	s.transitions = counterVec("projectmcp_connection_transitions_total",
		"Phase changes of connections (Connecting, Ready, Disconnected, Failed), by server and from and to phase.",
		labels("server", "from", "to"))
	s.connectDuration = histogramVec("projectmcp_connect_duration_seconds",
		"How long connect attempts took (start to initialized and listed, or failed), by server and outcome (ok, error, timeout).",
		connectBuckets, labels("server", "outcome"))
	s.reconnects = counterVec("projectmcp_reconnect_attempts_total",
		"Reconnect attempts of connections that dropped or failed to connect, by server.",
		labels("server"))
	s.rebuilds = counterVec("projectmcp_rebuilds_total",
		"Connections torn down and built again with the same config, by server and reason (ReconnectRequested, DeadAtMount).",
		labels("server", "reason"))
	s.repoints = counterVec("projectmcp_repoints_total",
		"Connections replaced by one with a changed config, by server and reason (ConfigChanged).",
		labels("server", "reason"))
	s.toolCalls = counterVec("projectmcp_tool_calls_total",
		"Tool calls forwarded to servers, by server and outcome (ok, tool_error, error, unavailable, timeout, cancelled).",
		labels("server", "outcome"))
	s.toolDuration = histogramVec("projectmcp_tool_call_duration_seconds",
		"How long forwarded tool calls took, whatever their outcome, by server.",
		callBuckets, labels("server"))
	s.forwarded = counterVec("projectmcp_forwarded_requests_total",
		"Requests forwarded from agent sessions to MCP servers, by server, method and result.",
		labels("server", "method", "result"))
	s.queueWait = histogramVec("projectmcp_queue_wait_seconds",
		"How long sessions' requests that had to wait for their turn on a connection (--max-calls-per-session, --max-calls-per-server) waited, by server.",
		callBuckets, labels("server"))
	s.mountWait = histogramVec("projectmcp_mount_wait_seconds",
		"How long a new session's mount waited for its servers to be ready.",
		mountBuckets, labels())
	if !projectLabels {
		s.mountWait.WithLabelValues() // one series, there from the start
	}
	s.listChanged = counterVec("projectmcp_list_changed_sent_total",
		"list_changed notifications sent to agent sessions, by kind (tools, prompts, resources).",
		labels("kind"))
	s.statusWrites = counterVec("projectmcp_status_writes_total",
		"ProjectMCP status writes, by result (ok, conflict, error).",
		labels("result"))
	s.gauges = gauges{
		connections: prometheus.NewDesc("projectmcp_connections", "Live MCP connections, by server and phase.", labels("server", "phase"), nil),
		byShare: prometheus.NewDesc("projectmcp_connections_by_share", "Live MCP connections, by server and sharing scope (project, principal, session, worktree).",
			labels("server", "share"), nil),
		waiting: prometheus.NewDesc("projectmcp_requests_waiting", "Sessions' requests waiting for their turn on a connection (--max-calls-per-session, --max-calls-per-server), by server.",
			labels("server"), nil),
		sessions: prometheus.NewDesc("projectmcp_sessions", "Agent sessions bound to projects, by protocol revision.", labels("revision"), nil),
		projects: prometheus.NewDesc("projectmcp_projects", "Projects the controller holds.", nil, nil),
		set:      s,
	}
	return s
}

func (s *set) collectors() []prometheus.Collector {
	return []prometheus.Collector{s.transitions, s.connectDuration, s.reconnects, s.rebuilds, s.repoints, s.toolCalls,
		s.toolDuration, s.forwarded, s.queueWait, s.mountWait, s.listChanged, s.statusWrites, s.gauges}
}

// values are the label values of a project's metric: the project's when they are on, then
// rest.
func (s *set) values(namespace, project string, rest ...string) []string {
	if s.projectLabels {
		return append([]string{namespace, project}, rest...)
	}
	return rest
}

var (
	configMu sync.Mutex
	current  atomic.Pointer[set]
)

func init() {
	current.Store(newSet(false))
	register(FastPath, RequestPath, InputRounds, gatewayRequests, configured{})
}

// registered are the collectors register has given the registry (docs/metrics.md lists their
// metrics: TestMetricsDocumented).
var registered []prometheus.Collector

// register registers collectors with the controller-runtime registry, which the controller
// serves on /metrics.
func register(cs ...prometheus.Collector) {
	registered = append(registered, cs...)
	ctrlmetrics.Registry.MustRegister(cs...)
}

// configured collects the metrics of the current set. It describes none, which makes it an
// unchecked collector: a registry never lets a metric's label names change once registered,
// and Configure changes them.
type configured struct{}

func (configured) Describe(chan<- *prometheus.Desc) {}

func (configured) Collect(ch chan<- prometheus.Metric) {
	for _, c := range current.Load().collectors() {
		c.Collect(ch)
	}
}

// Configure sets whether metrics carry the project's namespace and name. It replaces the
// metrics that have those labels (their values so far are dropped, and handles taken before
// count into the old ones), so the controller calls it once, before anything is counted;
// calling it again with the same value does nothing.
func Configure(projectLabels bool) {
	configMu.Lock()
	defer configMu.Unlock()
	if current.Load().projectLabels != projectLabels {
		current.Store(newSet(projectLabels))
	}
}

// serverLabel is a server name as a label value (see maxServerLabel).
func serverLabel(name string) string {
	if len(name) > maxServerLabel {
		return name[:maxServerLabel]
	}
	return name
}

// Server holds one server's metrics (of one project, with project labels), resolved once per
// label value on first use.
type Server struct {
	set       *set
	values    []string // the project's label values (when on) and the server's
	toolCalls [numOutcomes]lazy[prometheus.Counter]
	duration  lazy[prometheus.Observer]
	forwarded [numMethods][numOutcomes]lazy[prometheus.Counter]
	reconnect lazy[prometheus.Counter]
	queueWait lazy[prometheus.Observer]
}

// ServerOf returns the metrics of a project's server. Handles are cached: asking again is a
// map lookup.
func ServerOf(namespace, project, server string) *Server {
	s := current.Load()
	key := serverKey{server: server}
	if s.projectLabels {
		key.namespace, key.project = namespace, project
	}
	s.mu.RLock()
	h := s.servers[key]
	s.mu.RUnlock()
	if h != nil {
		return h
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if h = s.servers[key]; h == nil {
		h = &Server{set: s, values: s.values(namespace, project, serverLabel(server))}
		s.servers[key] = h
	}
	return h
}

// lazy is a metric resolved from its vector on first use.
type lazy[M any] struct{ p atomic.Pointer[M] }

func (l *lazy[M]) get(resolve func(...string) M, values []string, extra ...string) M {
	if m := l.p.Load(); m != nil {
		return *m
	}
	m := resolve(append(slices.Clip(values), extra...)...)
	l.p.Store(&m)
	return m
}

// Forwarded counts a forwarded request of the given MCP method (any other method counts as
// "other"); ToolError counts as OK here (the server answered).
func (h *Server) Forwarded(method string, o Outcome) {
	if o == ToolError {
		o = OK
	}
	i := methodIndex(method)
	h.forwarded[i][o].get(h.set.forwarded.WithLabelValues, h.values, methods[i], outcomeNames[o]).Inc()
}

// ToolCall counts a forwarded tool call and observes how long it took.
func (h *Server) ToolCall(o Outcome, took time.Duration) {
	h.toolCalls[o].get(h.set.toolCalls.WithLabelValues, h.values, outcomeNames[o]).Inc()
	h.duration.get(h.set.toolDuration.WithLabelValues, h.values).Observe(took.Seconds())
}

// QueueWaited observes how long a session's request waited for its turn on the connection.
func (h *Server) QueueWaited(took time.Duration) {
	h.queueWait.get(h.set.queueWait.WithLabelValues, h.values).Observe(took.Seconds())
}

// Transition counts a connection's phase change.
func (h *Server) Transition(from, to string) {
	h.set.transitions.WithLabelValues(append(slices.Clip(h.values), from, to)...).Inc()
}

// Connected observes a connect attempt: outcome "ok", "error" or "timeout".
func (h *Server) Connected(outcome string, took time.Duration) {
	h.set.connectDuration.WithLabelValues(append(slices.Clip(h.values), outcome)...).Observe(took.Seconds())
}

// Reconnecting counts a reconnect attempt.
func (h *Server) Reconnecting() {
	h.reconnect.get(h.set.reconnects.WithLabelValues, h.values).Inc()
}

// Rebuilt counts a rebuild of a project's server connection (ReasonReconnectRequested,
// ReasonDeadAtMount).
func Rebuilt(namespace, project, server, reason string) {
	s := current.Load()
	s.rebuilds.WithLabelValues(s.values(namespace, project, serverLabel(server), reason)...).Inc()
}

// Repointed counts a repoint of a project's server connection (ReasonConfigChanged).
func Repointed(namespace, project, server, reason string) {
	s := current.Load()
	s.repoints.WithLabelValues(s.values(namespace, project, serverLabel(server), reason)...).Inc()
}

// MountWaited observes how long a session's mount waited for the project's servers.
func MountWaited(namespace, project string, took time.Duration) {
	s := current.Load()
	s.mountWait.WithLabelValues(s.values(namespace, project)...).Observe(took.Seconds())
}

// ListChangedSent counts a list_changed notification sent to a session: kind is "tools",
// "prompts" or "resources".
func ListChangedSent(namespace, project, kind string) {
	s := current.Load()
	s.listChanged.WithLabelValues(s.values(namespace, project, kind)...).Inc()
}

// StatusWrite counts a status write by its result (ok, conflict, error), and returns err.
func StatusWrite(namespace, project string, err error) error {
	result := "ok"
	switch {
	case apierrors.IsConflict(err):
		result = "conflict"
	case err != nil:
		result = "error"
	}
	s := current.Load()
	s.statusWrites.WithLabelValues(s.values(namespace, project, result)...).Inc()
	return err
}

// UseServer records that a project has a server of this name (the registry calls it when it
// connects one). Without project labels, a server label's series are shared by the projects
// that use it and stay until ForgetServer or ForgetProject drops the last of them; with project
// labels, a project's series are its own and this does nothing.
func UseServer(namespace, project, server string) {
	s := current.Load()
	if s.projectLabels {
		return
	}
	name := serverLabel(server)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.users[name] == nil {
		s.users[name] = map[projectKey]struct{}{}
	}
	s.users[name][projectKey{namespace, project}] = struct{}{}
}

// ForgetProject drops the series of a deleted project: with project labels, all of its own;
// without, those of the server labels no other project uses.
func ForgetProject(namespace, project string) {
	s := current.Load()
	if !s.projectLabels {
		s.release(func(p projectKey, _ string) bool { return p == projectKey{namespace, project} })
		return
	}
	s.forget(map[string]string{LabelNamespace: namespace, LabelProject: project}, func(k serverKey) bool {
		return k.namespace == namespace && k.project == project
	})
}

// ForgetServer drops the series of a server removed from a project: with project labels, its
// own; without, its label's once no other project has a server of that name.
func ForgetServer(namespace, project, server string) {
	s := current.Load()
	name := serverLabel(server)
	if !s.projectLabels {
		s.release(func(p projectKey, n string) bool { return p == projectKey{namespace, project} && n == name })
		return
	}
	s.forget(map[string]string{LabelNamespace: namespace, LabelProject: project, "server": name}, func(k serverKey) bool {
		return k.namespace == namespace && k.project == project && k.server == server
	})
}

// release drops the uses that match (without project labels), then the series and handles of
// every server label left without a user: the ones just released, and any a late count (a call
// answered after its server was removed) took up again since.
func (s *set) release(match func(p projectKey, name string) bool) {
	s.mu.Lock()
	unused := map[string]bool{}
	for name, users := range s.users {
		for p := range users {
			if match(p, name) {
				delete(users, p)
			}
		}
		if len(users) == 0 {
			delete(s.users, name)
			unused[name] = true
		}
	}
	for k := range s.servers {
		if name := serverLabel(k.server); s.users[name] == nil {
			delete(s.servers, k)
			unused[name] = true
		}
	}
	// Under the lock: a UseServer of a name between its release and the deletion would
	// otherwise lose the series it has just begun.
	for name := range unused {
		s.deleteSeries(prometheus.Labels{"server": name})
	}
	s.mu.Unlock()
}

// forget drops the handles that match and the series with the labels (with project labels).
func (s *set) forget(labels prometheus.Labels, match func(serverKey) bool) {
	s.mu.Lock()
	for k := range s.servers {
		if match(k) {
			delete(s.servers, k)
		}
	}
	s.mu.Unlock()
	s.deleteSeries(labels)
}

// deleteSeries deletes the series that have the labels. A vector without one of them (no
// server label on the project-wide ones) matches nothing, so a server's forget leaves those
// alone.
func (s *set) deleteSeries(labels prometheus.Labels) {
	for _, v := range []interface {
		DeletePartialMatch(prometheus.Labels) int
	}{s.transitions, s.connectDuration, s.reconnects, s.rebuilds, s.repoints, s.toolCalls, s.toolDuration, s.forwarded,
		s.queueWait, s.mountWait, s.listChanged, s.statusWrites} {
		v.DeletePartialMatch(labels)
	}
}

// Auth decisions (the auth label of projectmcp_gateway_requests_total).
const (
	AuthNone            = "none"            // not reached: an invalid path
	AuthLocal           = "local"           // local mode: a loopback caller
	AuthAllowed         = "allowed"         // a token allowed to use the project
	AuthDenied          = "denied"          // 403
	AuthThrottled       = "throttled"       // 429: past a budget of reviews, nothing decided
	AuthUnauthenticated = "unauthenticated" // 401: no token, or not a valid one
	AuthError           = "error"           // the access review itself failed
)

type gatewayKey struct {
	code int
	auth string
}

// gatewayCounters resolves the gateway's counters once per code and decision.
type gatewayCounters struct {
	mu sync.RWMutex
	m  map[gatewayKey]prometheus.Counter
}

var gatewayCache gatewayCounters

// GatewayRequest counts a gateway HTTP request by its response code and auth decision.
func GatewayRequest(code int, auth string) {
	key := gatewayKey{code, auth}
	gatewayCache.mu.RLock()
	c := gatewayCache.m[key]
	gatewayCache.mu.RUnlock()
	if c == nil {
		c = gatewayRequests.WithLabelValues(strconv.Itoa(code), auth)
		gatewayCache.mu.Lock()
		if gatewayCache.m == nil {
			gatewayCache.m = map[gatewayKey]prometheus.Counter{}
		}
		gatewayCache.m[key] = c
		gatewayCache.mu.Unlock()
	}
	c.Inc()
}

// Connection is one live connection, as the registry reports it at a scrape.
type Connection struct {
	Namespace, Project, Server, Phase string
	Share                             string // the server's sharing scope (never a connection key)
	Waiting                           int    // sessions' requests waiting for their turn on it
}

// Counts are the registry's figures at one moment.
type Counts struct {
	Projects    int
	Connections []Connection
}

// Sessions are one project's bound sessions of one revision, as the gateway reports them.
type Sessions struct {
	Namespace, Project, Revision string
	Count                        int
}

var (
	sourceMu sync.Mutex
	source   func() Counts
	sessions func() []Sessions
)

// SetSource sets where the connection gauges are read at each scrape (the process's one
// registry).
func SetSource(f func() Counts) {
	sourceMu.Lock()
	defer sourceMu.Unlock()
	source = f
}

// SetSessions sets where the session gauge is read at each scrape (the process's gateway).
func SetSessions(f func() []Sessions) {
	sourceMu.Lock()
	defer sourceMu.Unlock()
	sessions = f
}

// gauges reads the sources at scrape time, so nothing is counted twice and nothing drifts.
type gauges struct {
	connections, waiting, sessions, projects *prometheus.Desc
	byShare                                  *prometheus.Desc
	set                                      *set
}

func (g gauges) Describe(ch chan<- *prometheus.Desc) {
	ch <- g.connections
	ch <- g.byShare
	ch <- g.waiting
	ch <- g.sessions
	ch <- g.projects
}

func (g gauges) Collect(ch chan<- prometheus.Metric) {
	sourceMu.Lock()
	f, fs := source, sessions
	sourceMu.Unlock()
	if f != nil {
		c := f()
		conns, waiting, byShare := map[[4]string]int{}, map[[3]string]int{}, map[[4]string]int{}
		for _, cn := range c.Connections {
			k := [4]string{"", "", serverLabel(cn.Server), cn.Phase}
			if g.set.projectLabels {
				k[0], k[1] = cn.Namespace, cn.Project
			}
			conns[k]++
			waiting[[3]string{k[0], k[1], k[2]}] += cn.Waiting
			byShare[[4]string{k[0], k[1], k[2], shareLabel(cn.Share)}]++
		}
		for k, n := range byShare {
			ch <- prometheus.MustNewConstMetric(g.byShare, prometheus.GaugeValue, float64(n), g.set.values(k[0], k[1], k[2], k[3])...)
		}
		for k, n := range conns {
			ch <- prometheus.MustNewConstMetric(g.connections, prometheus.GaugeValue, float64(n), g.set.values(k[0], k[1], k[2], k[3])...)
		}
		for k, n := range waiting {
			ch <- prometheus.MustNewConstMetric(g.waiting, prometheus.GaugeValue, float64(n), g.set.values(k[0], k[1], k[2])...)
		}
		ch <- prometheus.MustNewConstMetric(g.projects, prometheus.GaugeValue, float64(c.Projects))
	}
	if fs != nil {
		// Both revisions always, so that a revision without sessions reads 0, not absent.
		byRevision := map[[3]string]int{{"", "", RevisionStateful}: 0, {"", "", RevisionStateless}: 0}
		for _, s := range fs() {
			k := [3]string{"", "", s.Revision}
			if g.set.projectLabels {
				k[0], k[1] = s.Namespace, s.Project
			}
			byRevision[k] += s.Count
		}
		for k, n := range byRevision {
			if g.set.projectLabels && k[0] == "" && k[1] == "" {
				continue
			}
			ch <- prometheus.MustNewConstMetric(g.sessions, prometheus.GaugeValue, float64(n), g.set.values(k[0], k[1], k[2])...)
		}
	}
}

// counterVec and histogramVec declare a metric by its name, help and labels: the options the
// metrics here set, and nothing else.
func counterVec(name, help string, labels []string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

func histogramVec(name, help string, buckets []float64, labels []string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
}

// shareLabel is a connection's scope as the share label has it: one of the four scopes, a
// connection built before its scope was known counting as project. Never a connection key.
func shareLabel(scope string) string {
	switch scope {
	case "principal", "session", "worktree":
		return scope
	}
	return "project"
}
