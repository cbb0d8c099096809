// Package conn supervises one live MCP client connection to one server of one project.
//
// The MCP Go SDK never reconnects: a broken ClientSession stays broken. A Conn wraps the SDK
// session in a supervisor goroutine that connects (under a deadline), lists what the server
// declared (tools, prompts, resources), watches for death (process exit, session loss, failed
// health call), and reconnects with exponential backoff and jitter until the reconnect budget
// is spent:
//
//	        connect ok                    died
//	Connecting ─────────▶ Ready ─────────────────▶ Disconnected ──backoff──▶ (connect again)
//	     │ failed                                       │ budget spent
//	     └──────────────▶ Disconnected                  ▼
//	                                                  Failed (tools withdrawn; waits for Destroy)
//
// A Conn never outlives Destroy: it owns its goroutines, its child process group and its HTTP
// transport, and Destroy returns only when all of them have ended.
package conn

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/utils/clock"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/fair"
	"github.com/dsh-dev/projectmcp/internal/metrics"
	"github.com/dsh-dev/projectmcp/internal/tracing"
)

// ErrUnavailable is returned by Call while the connection is not Ready. The error message names
// the server so that an agent sees which tool set is down.
var ErrUnavailable = errors.New("server unavailable")

// ErrDestroyed is returned by Call on a connection that Destroy has begun to end (a repoint,
// rebuild or retire replaced it) before the call was sent: the server never saw it, so the
// caller may send it again on the slot's current connection.
var ErrDestroyed = errors.New("connection replaced")

// Policy is the reconnect budget.
type Policy struct {
	MaxAttempts    int
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
}

// Window is the wait before reconnect attempt n (1 the first) without its jitter: InitialBackoff,
// doubled at every later attempt, capped at MaxBackoff (the defaults standing for zero values,
// as in a connection's Options). Zero for n < 1.
func (p Policy) Window(n int) time.Duration {
	if n < 1 {
		return 0
	}
	o := Options{Policy: p}
	o.defaults()
	d := o.Policy.InitialBackoff
	for i := 1; i < n && d < o.Policy.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, o.Policy.MaxBackoff)
}

// Options configure a Conn. Server is the unexpanded configuration.
type Options struct {
	Project string // namespace/name, for logs and errors
	Server  v1alpha1.MCPServer
	// Variables returns the values ${VAR} references expand to (the project's Secret). It is
	// called at every connect attempt, so a fixed Secret is picked up by the next reconnect;
	// nil means no variables.
	Variables func(ctx context.Context) (map[string]string, error)
	// Bearer, for a remote server with oauth, is its grant's token source (bearer.go); nil: none.
	Bearer Bearer
	Policy Policy
	// Attempts are the reconnect attempts of the budget already spent when the connection
	// starts: a rebuild of a connection that spent its budget (registry, at a session's mount)
	// is one more attempt of that budget, not a new one, so a server that still fails is tried
	// once, not MaxAttempts times more. Being Ready gives the budget back, as always.
	Attempts int
	// Settings are the controller's, the same for every connection it makes.
	Settings

	// StartAfter, when not nil, holds the first connect attempt until it is closed: a repoint
	// or rebuild passes the previous connection's Done, so the old server is torn down before
	// the new one starts (a server holding an exclusive resource cannot run twice). A Conn
	// destroyed before it started closes Done only once StartAfter is closed, so a chain of
	// replacements never overlaps.
	StartAfter <-chan struct{}
	// Clock stamps ReadySince and FailedAt and times the reconnect backoff (default: real).
	Clock clock.WithTicker

	Log logr.Logger
	// OnChange is called after every state or tool-list change, from the supervisor goroutine,
	// and when the sessions' queue on the connection forms, doubles or empties (internal/fair),
	// from the goroutine of the request that changed it; always with no lock held. It must not
	// block.
	OnChange func()
	// OnNotice receives the server's notifications meant for sessions (resources/updated,
	// log messages), from the SDK's receive loop: it must not block.
	OnNotice func(Notice)
	// LogLevel and Subscriptions are applied at every connect: the level sessions asked for,
	// and the resource URIs subscribed (with reference counts), carried over from the previous
	// connection of the server on a repoint or rebuild.
	LogLevel      mcp.LoggingLevel
	Subscriptions map[string]int
	// Roots answer a server's roots/list when no session's request is in flight (the
	// project's folder).
	Roots []*mcp.Root
}

func (o *Options) defaults() {
	o.Settings.defaults()
	if o.Policy.InitialBackoff <= 0 {
		o.Policy.InitialBackoff = v1alpha1.DefaultInitialBackoff
	}
	if o.Policy.MaxBackoff < o.Policy.InitialBackoff {
		o.Policy.MaxBackoff = max(o.Policy.InitialBackoff, v1alpha1.DefaultMaxBackoff)
	}
	if o.OnChange == nil {
		o.OnChange = func() {}
	}
	if o.OnNotice == nil {
		o.OnNotice = func(Notice) {}
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Variables == nil {
		o.Variables = func(context.Context) (map[string]string, error) { return nil, nil }
	}
}

// Snapshot is a Conn's observable state at one moment.
type Snapshot struct {
	ID    string
	Phase v1alpha1.ServerPhase
	// Tools are the tools offered (after the allow/deny filter); nil when Failed.
	Tools []*mcp.Tool
	// RawToolCount is how many tools the server listed before filtering.
	RawToolCount int
	// OmittedTools counts the tools that passed the filter but were left out for a bound
	// (--max-schema-bytes); Notes say which, for the server's status message.
	OmittedTools int
	Notes        []string
	// Prompts, Resources and Templates are what the server lists (nil when it declares none
	// or while not Ready); like Tools they are shared and must not be modified.
	Prompts   []*mcp.Prompt
	Resources []*mcp.Resource
	Templates []*mcp.ResourceTemplate
	// Capabilities and Instructions are what the server declared at initialize.
	Capabilities *mcp.ServerCapabilities
	Instructions string
	// AlwaysLoad is the spec's alwaysLoad: this connection's tools are listed marked so.
	AlwaysLoad bool
	// ToolHints are the spec's toolHints, edits to this connection's tools as they are listed;
	// shared, like Tools.
	ToolHints []v1alpha1.ToolHint
	// ReadySince is when the current session became Ready (zero when not Ready).
	ReadySince time.Time
	// EverReady is true once any session of this connection has been Ready.
	EverReady         bool
	ReconnectAttempts int
	LastError         string
	// FailedAt is when the connection went Failed (zero otherwise).
	FailedAt time.Time
	// Waiting is how many sessions' requests wait for their turn now, and Waited how many
	// ever have (internal/fair).
	Waiting int
	Waited  uint64
	// PID is the stdio server's process id (0 for remote servers or when not running).
	PID int
	// Sandbox names the layers of the stdio server's sandbox, in force and missing (""
	// without one, and for remote servers).
	Sandbox string
	// Permanent is true when the last failure cannot heal by retrying (e.g. a missing
	// variable); the connection went to Failed without spending its budget.
	Permanent bool
	// Generation counts changes, so observers can tell whether anything happened.
	Generation uint64

	catalog *catalog // what Tools, Prompts, Resources and Templates come from (interned)
}

// Conn is one supervised connection. All methods are safe for concurrent use.
//
// Conn is the supervisor: it runs the connection's life (connect, serve, reconnect with
// backoff, fail), publishes its state (the Snapshot) and sends the sessions' requests on its
// current session. Everything else is owned by a type of its own, each with its own lock
// where it needs one: the requests in flight and the drain (flight), the log level and the
// subscriptions (subscriptions), the progress relay (progressRelay), the secret values
// (scrubber), the supervisor's signals and the counters. Per session, a lister reads the
// catalog, a responder answers what the server asks, and an upstream carries forwarded
// requests (upstream.go).
//
// Locks: mu guards state, live and changed. The locks of the connection's parts (mu, and
// those of flight, the fair queue, subscriptions, the progress relay, the scrubber and the
// stdio upstream) are leaves: none is taken while another of them is held, so there is no
// order to keep. Two are held while calling out, on purpose: update counts a phase change in
// the metrics under mu, and a progress watch holds its own lock while it hands a notification
// to its request (so that the request's done waits for it).
type Conn struct {
	opts   Options
	id     string
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	state   Snapshot
	live    live          // the Ready session, if any
	changed chan struct{} // closed and replaced on every change

	signals  *signals
	counts   *counters
	flight   *flight
	subs     *subscriptions
	progress *progressRelay
	secrets  *scrubber
}

// live is the connection's Ready session and its upstream (nil on legacy SSE, which has none),
// set and read together.
type live struct {
	session *mcp.ClientSession
	up      upstream
}

// New starts supervising a connection. The caller owns the Conn and must call Destroy.
func New(opts Options) *Conn {
	opts.defaults()
	ctx, cancel := context.WithCancel(context.Background())
	id := newID()
	namespace, project, _ := strings.Cut(opts.Project, "/")
	counts := &counters{metrics: metrics.ServerOf(namespace, project, opts.Server.Name)}
	secrets := &scrubber{server: opts.Server.Name}
	c := &Conn{
		opts:     opts,
		id:       id,
		ctx:      ctx,
		cancel:   cancel,
		done:     make(chan struct{}),
		state:    Snapshot{ID: id, Phase: v1alpha1.PhaseConnecting},
		changed:  make(chan struct{}),
		signals:  newSignals(),
		counts:   counts,
		flight:   newFlight(opts.Server.Name, fair.New(opts.MaxCalls, opts.MaxCallsPerSession, opts.OnChange), counts.metrics),
		progress: newProgressRelay(id),
		secrets:  secrets,
	}
	c.subs = newSubscriptions(ctx, &c.opts, secrets)
	go c.run()
	return c
}

func newID() string {
	b := make([]byte, 4)
	_, _ = crand.Read(b)
	return hex.EncodeToString(b)
}

// ID identifies this connection; a new Conn (create, repoint, rebuild) has a new ID.
func (c *Conn) ID() string { return c.id }

// Server is the name of the server this connection serves.
func (c *Conn) Server() string { return c.opts.Server.Name }

// Timeout is the deadline of one request to the server that its spec sets (a client's
// per-server "timeout"), or 0 when it sets none.
func (c *Conn) Timeout() time.Duration {
	if t := c.opts.Server.Timeout; t != nil {
		return t.Duration
	}
	return 0
}

// Snapshot returns the current state. Tools is shared and must not be modified.
func (c *Conn) Snapshot() Snapshot {
	c.mu.Lock()
	s := c.state
	c.mu.Unlock()
	s.Waiting, s.Waited = c.flight.fair.Depth()
	s.AlwaysLoad = c.opts.Server.AlwaysLoad
	s.ToolHints = c.opts.Server.ToolHints
	return s
}

// Changed returns a channel closed at the next state change.
func (c *Conn) Changed() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changed
}

// DeadAfter is how long a connected server may offer nothing (no tool, prompt, resource or
// resource template) before it counts as dead: a server that is up but lists nothing is as
// useless to an agent as one that is down. A server that offers only resources or only
// prompts (a docs server, a prompt library) offers something, and is not dead.
const DeadAfter = 5 * time.Second

// Items counts what the server lists: its tools (before the allow/deny filter: a filter that
// hides them all is the project's choice, not the server's failure), prompts, resources and
// resource templates.
func (s Snapshot) Items() int {
	return s.RawToolCount + len(s.Prompts) + len(s.Resources) + len(s.Templates)
}

// Starting reports a connection still coming up: Connecting, or Disconnected before it was
// ever Ready (its first attempts failing inside the reconnect budget). Whoever waits for
// readiness (a mount, a call during a repoint) waits through it; a connection that was Ready
// and dropped is not starting, and calls to it fail at once.
func (s Snapshot) Starting() bool {
	return s.Phase == v1alpha1.PhaseConnecting || (s.Phase == v1alpha1.PhaseDisconnected && !s.EverReady)
}

// Dead reports a connection that will not heal by itself: Failed (budget spent), or Ready
// offering nothing (Items) for longer than DeadAfter. Such a connection is rebuilt at a later
// session's mount, within the registry's limits (docs/lifecycle-contracts.md#the-mounts-exception).
func (s Snapshot) Dead(now time.Time) bool {
	switch s.Phase {
	case v1alpha1.PhaseFailed:
		return true
	case v1alpha1.PhaseReady:
		return s.Items() == 0 && now.Sub(s.ReadySince) > DeadAfter
	}
	return false
}

// DeadAt is when a Ready connection offering nothing becomes dead (zero for any other state).
func (s Snapshot) DeadAt() time.Time {
	if s.Phase != v1alpha1.PhaseReady || s.Items() != 0 {
		return time.Time{}
	}
	return s.ReadySince.Add(DeadAfter)
}

// WaitStarted waits until the connection is no longer Starting (it is Ready, Failed, or
// Disconnected after having been Ready) or ctx ends.
func (c *Conn) WaitStarted(ctx context.Context) {
	for {
		c.mu.Lock()
		starting, ch := c.state.Starting(), c.changed
		c.mu.Unlock()
		if !starting {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
	}
}

// update changes the state under the lock, then wakes waiters and the owner.
func (c *Conn) update(f func(s *Snapshot)) {
	c.mu.Lock()
	from := c.state.Phase
	f(&c.state)
	if c.state.Phase != from {
		c.counts.metrics.Transition(string(from), string(c.state.Phase))
	}
	c.state.Generation++
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
	c.opts.OnChange()
}

// Notice is a server notification meant for the project's sessions: exactly one field is set.
type Notice struct {
	ResourceUpdated *mcp.ResourceUpdatedNotificationParams
	Log             *mcp.LoggingMessageParams
	// Unchanged: the server announced a change of these lists, and listing them again found
	// none. Sessions of the whole project need not hear of it; a session that sees this one
	// server as if directly (a per-server endpoint) is told, as the server told the gateway.
	Unchanged Lists
	// InRequest: the server sent it on the stream of one forwarded request, so it belongs to
	// that request's session, Caller (nil when that session is one the server cannot ask,
	// a 2026-07-28 one), and to no other.
	InRequest bool
	Caller    Caller
}

// SetLogLevel sets the level of log messages the server should send, now (when Ready) and at
// every later connect. Failures are the server's business (it may not support logging).
func (c *Conn) SetLogLevel(ctx context.Context, level mcp.LoggingLevel) {
	c.subs.setLevel(level)
	c.mu.Lock()
	s := c.live.session
	c.mu.Unlock()
	if s != nil && level != "" {
		c.subs.applyLevel(ctx, s, level)
	}
}

// Subscribe subscribes the connection to a resource's updates, once for any number of
// sessions: the first subscriber sends resources/subscribe, later ones only count. Past
// MaxSubscriptions URIs another URI is refused (an invalid request naming the bound).
func (c *Conn) Subscribe(ctx context.Context, uri string) error {
	if first, err := c.subs.add(uri); !first {
		return err
	}
	_, err := roundTrip(c, ctx, func(ctx context.Context, s *mcp.ClientSession) (struct{}, error) {
		return struct{}{}, s.Subscribe(ctx, &mcp.SubscribeParams{URI: uri})
	})
	if err != nil {
		c.subs.undo(uri)
	}
	return err
}

// Unsubscribe drops one subscriber of a resource; the last one sends resources/unsubscribe, in
// the background (chore): it returns at once.
func (c *Conn) Unsubscribe(uri string) {
	if !c.subs.remove(uri) {
		return
	}
	c.subs.chore("resources/unsubscribe", func(ctx context.Context) {
		_, _ = roundTrip(c, ctx, func(ctx context.Context, s *mcp.ClientSession) (struct{}, error) {
			return struct{}{}, s.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: uri})
		})
	})
}

// InUse reports a connection whose server serves sessions now: requests in flight (or waiting
// for their turn), or subscriptions it holds (a Ready session with subscribed URIs). Tearing it down would fail
// those requests and drop those subscriptions until a new session restores them. A connection
// that is not Ready holds no subscription on its server: what sessions subscribed is only
// remembered, to be restored by the next session (or a replacement connection).
func (c *Conn) InUse() bool {
	c.mu.Lock()
	ready := c.live.session != nil && c.state.Phase == v1alpha1.PhaseReady
	c.mu.Unlock()
	waiting, _ := c.flight.fair.Depth()
	return waiting > 0 || c.flight.busy() || (ready && c.subs.any())
}

// Subscriptions returns the subscribed URIs with their reference counts (a copy), and the log
// level: what a replacement connection takes over.
func (c *Conn) Subscriptions() (map[string]int, mcp.LoggingLevel) {
	return c.subs.taken()
}

// DrainTimeout is how long Destroy lets requests already sent finish before it cancels them:
// a call in flight when a config edit repoints its server usually completes, and a hung one
// holds the teardown (and so the new connection) this long at most.
const DrainTimeout = 2 * time.Second

// Destroy ends the connection: new requests fail with ErrDestroyed at once (callers send them
// to the replacement), requests already sent get DrainTimeout to finish and are then
// cancelled, the session is closed, a stdio server's whole process group is terminated. It
// returns when everything has ended and is idempotent.
func (c *Conn) Destroy() {
	drained := c.flight.close()
	drain := time.NewTimer(DrainTimeout)
	select {
	case <-drained:
	case <-c.done: // the supervisor ended by itself (never, before cancel; kept for safety)
	case <-drain.C:
	}
	drain.Stop()
	c.cancel()
	<-c.done
}

// Done is closed when the supervisor has ended (after Destroy).
func (c *Conn) Done() <-chan struct{} { return c.done }

// Call sends a tool call to the server on the typed path. While the connection is not Ready it
// fails at once with ErrUnavailable. A session the server forgot (HTTP 404) is re-initialized
// and the call retried once: the server never saw the first attempt. onProgress, when not nil,
// receives the server's progress notifications for this call (the call gets a progress token
// of its own).
func (c *Conn) Call(ctx context.Context, params *mcp.CallToolParams, onProgress func(*mcp.ProgressNotificationParams)) (*mcp.CallToolResult, error) {
	if onProgress != nil {
		token, done := c.progress.watch(onProgress)
		defer done()
		params.SetProgressToken(token)
	}
	c.subs.withLevel(params)
	tracing.ToMeta(ctx, params)
	return roundTrip(c, ctx, func(ctx context.Context, s *mcp.ClientSession) (*mcp.CallToolResult, error) {
		return s.CallTool(ctx, params)
	})
}

// GetPrompt sends prompts/get on the typed path, with Call's rules.
func (c *Conn) GetPrompt(ctx context.Context, params *mcp.GetPromptParams) (*mcp.GetPromptResult, error) {
	return typed(c, ctx, params, (*mcp.ClientSession).GetPrompt)
}

// ReadResource sends resources/read on the typed path, with Call's rules.
func (c *Conn) ReadResource(ctx context.Context, params *mcp.ReadResourceParams) (*mcp.ReadResourceResult, error) {
	return typed(c, ctx, params, (*mcp.ClientSession).ReadResource)
}

// Complete sends completion/complete on the typed path, with Call's rules.
func (c *Conn) Complete(ctx context.Context, params *mcp.CompleteParams) (*mcp.CompleteResult, error) {
	return typed(c, ctx, params, (*mcp.ClientSession).Complete)
}

// typedParams are the params of a request on the typed path: their _meta carries the
// sessions' log level and the trace context.
type typedParams interface {
	mcp.Params
	GetMeta() map[string]any
	SetMeta(map[string]any)
}

// typed sends one request on the typed path, by roundTrip's rules.
func typed[P typedParams, R any](c *Conn, ctx context.Context, params P, send func(*mcp.ClientSession, context.Context, P) (R, error)) (R, error) {
	c.subs.withLevel(params)
	tracing.ToMeta(ctx, params)
	return roundTrip(c, ctx, func(ctx context.Context, s *mcp.ClientSession) (R, error) {
		return send(s, ctx, params)
	})
}

// roundTrip runs one request on the connection's current session. While the connection is not
// Ready it fails at once with ErrUnavailable; on a connection Destroy has begun to end it
// fails with ErrDestroyed before sending. A session the server forgot (HTTP 404) is
// re-initialized and the request retried once: the server never saw the first attempt.
func roundTrip[T any](c *Conn, ctx context.Context, do func(context.Context, *mcp.ClientSession) (T, error)) (T, error) {
	var zero T
	for attempt := 0; ; attempt++ {
		c.mu.Lock()
		s, phase, lastErr, ch := c.live.session, c.state.Phase, c.state.LastError, c.changed
		c.mu.Unlock()
		if c.flight.closed() || c.ctx.Err() != nil {
			return zero, fmt.Errorf("%w: MCP server %q", ErrDestroyed, c.opts.Server.Name)
		}
		if s == nil || phase != v1alpha1.PhaseReady {
			state := strings.ToLower(string(phase))
			if phase == v1alpha1.PhaseReady { // its session has just gone; the supervisor is replacing it
				state = "reconnecting"
			}
			msg := fmt.Sprintf("MCP server %q is %s", c.opts.Server.Name, state)
			if lastErr != "" {
				msg += ": " + lastErr
			}
			return zero, fmt.Errorf("%w: %s", ErrUnavailable, msg)
		}
		sender := senderFrom(ctx)
		if err := c.flight.admit(ctx, sender); err != nil {
			return zero, err
		}
		caller := callerFrom(ctx)
		if !c.flight.begin(caller) {
			c.flight.dismiss(sender)
			return zero, fmt.Errorf("%w: MCP server %q", ErrDestroyed, c.opts.Server.Name)
		}
		callCtx, cancel := upstreamContext(ctx)
		stop := context.AfterFunc(c.ctx, cancel) // Destroy cancels requests still running after the drain
		res, err := do(callCtx, s)
		stop()
		cancel()
		c.flight.end(caller)
		c.flight.dismiss(sender)
		if err == nil {
			return res, nil
		}
		if c.ctx.Err() != nil && ctx.Err() == nil {
			return zero, fmt.Errorf("MCP server %q: the connection was replaced or removed while the request ran; it may or may not have completed", c.opts.Server.Name)
		}
		if !isGone(err) {
			return zero, c.secrets.callError(err)
		}
		c.signals.signalDead()
		if attempt > 0 || !errors.Is(err, mcp.ErrSessionMissing) {
			return zero, c.secrets.callError(err)
		}
		// Wait for the supervisor to replace the session, then retry once.
		if !c.awaitNewSession(ctx, s, ch) {
			return zero, c.secrets.callError(err)
		}
	}
}

// upstreamContext carries ctx's cancellation, caller, log sink, client capabilities and trace context to a request
// for the server, and none of its other values: the gateway's requests come with contexts of the SDK's server
// side, whose values (the session's protocol version among them) the SDK's client side would
// take for its own, e.g. send a 2026-07-28 session's version header to a 2025-11-25 server.
func upstreamContext(ctx context.Context) (context.Context, context.CancelFunc) {
	base := trace.ContextWithSpanContext(context.Background(), trace.SpanContextFromContext(ctx))
	if caller := callerFrom(ctx); caller != nil {
		base = WithCaller(base, caller)
	}
	if sink, ok := ctx.Value(requestLogsKey{}).(*requestLogs); ok {
		base = context.WithValue(base, requestLogsKey{}, sink)
	}
	if caps := capabilitiesFrom(ctx); caps != nil {
		base = WithClientCapabilities(base, caps)
	}
	// No deadline of its own: the request ends when ctx does, never before (the caller tells
	// its own deadline from the server's failures by ctx alone).
	out, cancel := context.WithCancelCause(base)
	stop := context.AfterFunc(ctx, func() { cancel(ctx.Err()) }) // context.Cause tells why
	return out, func() { stop(); cancel(context.Canceled) }
}

// Offers reports whether the server's allow/deny filter offers the tool named (as the server
// names it).
func (c *Conn) Offers(tool string) bool { return Offered(c.opts.Server.Tools, tool) }

// awaitNewSession waits until a Ready session other than old is in place.
func (c *Conn) awaitNewSession(ctx context.Context, old *mcp.ClientSession, ch <-chan struct{}) bool {
	deadline := time.NewTimer(c.opts.ConnectTimeout)
	defer deadline.Stop()
	for {
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		case <-c.ctx.Done():
			return false
		case <-deadline.C:
			return false
		}
		c.mu.Lock()
		s, phase := c.live.session, c.state.Phase
		ch = c.changed
		c.mu.Unlock()
		if s != nil && s != old && phase == v1alpha1.PhaseReady {
			return true
		}
		if phase == v1alpha1.PhaseFailed {
			return false
		}
	}
}

// isGone reports errors meaning the session can no longer be used.
func isGone(err error) bool {
	return errors.Is(err, mcp.ErrConnectionClosed) || errors.Is(err, mcp.ErrSessionMissing) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrClosedPipe)
}

// run is the supervisor loop; it owns every session and process of this Conn.
func (c *Conn) run() {
	defer close(c.done)
	if c.opts.StartAfter != nil {
		select {
		case <-c.opts.StartAfter:
		case <-c.ctx.Done():
			// Destroyed before it started, it still ends only after its predecessor: a later
			// replacement waits for this one, so through it for every connection before.
			<-c.opts.StartAfter
			return
		}
	}
	attempts := c.opts.Attempts // since the connection was last Ready
	for {
		wasReady, err := c.connectAndServe()
		if c.ctx.Err() != nil {
			return
		}
		if wasReady {
			attempts = 0
		}
		msg := c.secrets.scrub(err.Error())
		permanent := isPermanent(err)
		if permanent || attempts >= c.opts.Policy.MaxAttempts {
			c.opts.Log.Info("MCP server failed; tools withdrawn", "error", msg, "attempts", attempts)
			c.update(func(s *Snapshot) {
				s.Phase, s.Tools, s.LastError, s.Permanent, s.PID = v1alpha1.PhaseFailed, nil, msg, permanent, 0
				s.Prompts, s.Resources, s.Templates, s.Notes, s.OmittedTools, s.catalog = nil, nil, nil, nil, 0, nil
				s.ReadySince, s.FailedAt = time.Time{}, c.opts.Clock.Now()
			})
			<-c.ctx.Done()
			return
		}
		attempts++
		c.counts.metrics.Reconnecting()
		c.opts.Log.V(1).Info("MCP server disconnected; reconnecting", "error", msg, "attempt", attempts)
		c.update(func(s *Snapshot) {
			s.Phase, s.ReconnectAttempts, s.LastError, s.PID = v1alpha1.PhaseDisconnected, attempts, msg, 0
			s.ReadySince = time.Time{}
		})
		t := c.opts.Clock.NewTimer(backoff(c.opts.Policy, attempts))
		select {
		case <-t.C():
		case <-c.ctx.Done():
			t.Stop()
			return
		}
	}
}

// backoff is the policy's Window with ±20% jitter, so that many connections dropped by one
// event do not reconnect in lockstep.
func backoff(p Policy, attempt int) time.Duration {
	jitter := 0.8 + 0.4*rand.Float64()
	return time.Duration(float64(p.Window(attempt)) * jitter)
}
