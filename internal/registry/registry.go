// Package registry owns every live MCP connection of the controller process: at most one per
// (project, server), never a pool. It also holds the session slots that bind agent sessions to
// those connections, the idle timers, and the wake-ups that tell the reconciler something
// changed.
//
// Ownership: the reconciler creates, repoints, retires and rebuilds connections (Connect and
// Retire); sessions only bind and release slots (Mount and Release), with one exception
// (docs/lifecycle-contracts.md#the-mounts-exception): a mount that finds a bound connection
// dead rebuilds it at once, within limits (Mount); an idle timer only destroys a connection no
// slot uses. A swap always tears the old connection down before the new one starts. Lock
// order: Registry.mu is never held while a connection is built, destroyed or waited for, nor
// during any network I/O.
package registry

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/metrics"
)

// coalesceWindow batches wake-ups: a burst of mounts or state changes within it becomes one
// reconcile (and so at most one status write) per project.
const coalesceWindow = 50 * time.Millisecond

// Desired is what the reconciler last decided a project needs; sessions mount against it.
type Desired struct {
	// Servers are the enabled servers' names.
	Servers      []string
	IdleTimeout  time.Duration // 0 = never reclaim
	ReadyTimeout time.Duration // 0 = do not wait
	// RBAC: each identity's items are authorized on their own (spec.toolAuthorization: RBAC).
	RBAC bool
}

// Registry is the single owner of the process's MCP connections.
type Registry struct {
	clock clock.WithDelayedExecution
	log   logr.Logger

	mu           sync.Mutex
	closed       bool   // after Shutdown: nothing new may be installed
	incarnations uint64 // counts projects set up, so a recreated project is told apart
	projects     map[types.NamespacedName]*project
	pending      map[types.NamespacedName]bool
	wake         chan struct{}
	events       chan event.GenericEvent
	watchers     []func(types.NamespacedName)
	notices      []func(types.NamespacedName, string, conn.Notice)
	// setUp is closed and replaced whenever a project becomes known (its first SetDesired),
	// waking requests that arrived before their project's first reconcile (WaitKnown).
	setUp chan struct{}
	// maxSessions bounds the sessions of one project (0: no bound): each is a line of status,
	// whose size every session of the project shares.
	maxSessions int
	// teardowns are the replaced connections Connect is destroying in the background.
	teardowns sync.WaitGroup
}

// LimitSessions bounds the sessions one project may have mounted at once (0: no bound).
func (r *Registry) LimitSessions(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.maxSessions = n
}

type project struct {
	logLevel    mcp.LoggingLevel // the most verbose level a session asked for (SetLogLevel)
	incarnation uint64
	desired     Desired
	known       bool // SetDesired has been called
	servers     map[string]*entry
	sessions    map[string]*Session
	changed     chan struct{} // closed and replaced on every change, for Mount's wait
	// teardowns are the project's replaced connections Connect is destroying in the background.
	teardowns sync.WaitGroup
	// serverLevels are servers' own levels, which stand in for logLevel (SetServerLogLevel).
	serverLevels map[string]mcp.LoggingLevel
}

// entry is one (project, server): the connection (if any) and the slots bound to it. The
// entry outlives its connection when an idle timer reclaims it, so that status can say Idle
// and a later mount brings the server back.
type entry struct {
	conn *conn.Conn
	hash string
	opts conn.Options // what conn was built from, for a rebuild at mount
	// carried is the previous connection's last state, whose tools, prompts and resources are
	// offered while conn is starting after a repoint or rebuild, so a swap neither withdraws
	// nor renames them.
	carried     *conn.Snapshot
	lastRebuild Rebuild
	// rebuilds counts the rebuilds at mount since a mount last found the server healthy (Ready
	// and offering something) or the reconciler last built its connection: they are spaced
	// like the attempts of the reconnect budget (rebuildAtMount).
	rebuilds  int
	refs      int
	idle      clock.Timer
	reclaimed bool      // destroyed by the idle timer
	lastMount time.Time // the last time a session bound a slot here
}

// Rebuild records the last rebuild the registry did by itself: the one exception to "only the
// reconciler builds connections" is a mount that finds its connection dead
// (docs/lifecycle-contracts.md#the-mounts-exception).
type Rebuild struct {
	At         time.Time
	Reason     string // RebuildDeadAtMount
	Connection string // the connection built
	Previous   string // why the old one was dead, for events and status
}

// RebuildDeadAtMount is the reason of a rebuild started by a session's mount.
const RebuildDeadAtMount = v1alpha1.RebuildReasonDeadAtMount

// Session is one agent session bound to a project: one slot per server it mounted.
type Session struct {
	ID      string
	Client  string
	BoundAt time.Time
	slots   map[string]bool
}

// New makes an empty registry. Start must run (the manager runs it) for wake-ups to reach the
// reconciler and for connections to be destroyed at shutdown.
func New(clk clock.WithDelayedExecution, log logr.Logger) *Registry {
	return &Registry{
		clock:    clk,
		log:      log,
		projects: map[types.NamespacedName]*project{},
		pending:  map[types.NamespacedName]bool{},
		wake:     make(chan struct{}, 1),
		events:   make(chan event.GenericEvent, 64),
		setUp:    make(chan struct{}),
	}
}

// Events is the channel a source.Channel reads: one GenericEvent per project that changed.
func (r *Registry) Events() <-chan event.GenericEvent { return r.events }

// Start forwards coalesced wake-ups until ctx ends, then destroys every connection.
func (r *Registry) Start(ctx context.Context) error {
	defer r.Shutdown()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.wake:
		}
		t := r.clock.NewTimer(coalesceWindow)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C():
		}
		r.mu.Lock()
		keys := slices.Collect(maps.Keys(r.pending))
		clear(r.pending)
		r.mu.Unlock()
		for _, k := range keys {
			obj := &v1alpha1.ProjectMCP{}
			obj.Name, obj.Namespace = k.Name, k.Namespace
			select {
			case r.events <- event.GenericEvent{Object: obj}:
			case <-ctx.Done():
				return nil
			}
		}
	}
}

// Shutdown destroys every connection, in parallel, and waits for them.
func (r *Registry) Shutdown() {
	r.mu.Lock()
	r.closed = true
	var conns []*conn.Conn
	for _, p := range r.projects {
		for _, e := range p.servers {
			if e.conn != nil {
				conns = append(conns, e.conn)
			}
			stopTimer(e)
		}
	}
	r.projects = map[types.NamespacedName]*project{}
	r.mu.Unlock()
	destroyAll(conns)
	r.teardowns.Wait()
}

func destroyAll(conns []*conn.Conn) {
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(c.Destroy)
	}
	wg.Wait()
}

// notifyLocked marks a project changed: Mount waiters wake now, the reconciler after the
// coalescing window. Callers hold r.mu.
func (r *Registry) notifyLocked(key types.NamespacedName, p *project) {
	if p != nil {
		close(p.changed)
		p.changed = make(chan struct{})
	}
	r.pending[key] = true
	select {
	case r.wake <- struct{}{}:
	default:
	}
	for _, fn := range r.watchers {
		fn(key)
	}
}

// Watch registers fn to be told, at once, of every change to a project (connection state,
// tools, slots). fn runs with the registry's lock held: it must only record the key and return.
// The gateway uses it to keep each project's tool projection current.
func (r *Registry) Watch(fn func(types.NamespacedName)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.watchers = append(r.watchers, fn)
}

// OnNotice registers fn to receive the servers' notifications meant for sessions
// (resources/updated, log messages), with the project and server they come from. fn runs on
// the connection's receive loop with no lock held: it must not block.
func (r *Registry) OnNotice(fn func(key types.NamespacedName, server string, n conn.Notice)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notices = append(r.notices, fn)
}

// SetLogLevel sets the level of log messages every server of the project sends (the most
// verbose level any session wants), now and for connections built later. It replaces the
// servers' own levels (SetServerLogLevel).
func (r *Registry) SetLogLevel(ctx context.Context, key types.NamespacedName, level mcp.LoggingLevel) {
	r.mu.Lock()
	p := r.projects[key]
	if p == nil || p.logLevel == level && len(p.serverLevels) == 0 {
		r.mu.Unlock()
		return
	}
	p.logLevel = level
	p.serverLevels = nil
	var conns []*conn.Conn
	for _, e := range p.servers {
		if e.conn != nil {
			conns = append(conns, e.conn)
		}
	}
	r.mu.Unlock()
	for _, c := range conns {
		c.SetLogLevel(ctx, level)
	}
}

// SetServerLogLevel sets the level of log messages one server of the project sends, now and
// for its connections built later: on a project whose sessions may each read only some
// servers' lines, each server is set to the most verbose level of the sessions that may read
// its own.
func (r *Registry) SetServerLogLevel(ctx context.Context, key types.NamespacedName, server string, level mcp.LoggingLevel) {
	r.mu.Lock()
	p := r.projects[key]
	if p == nil || p.levelOf(server) == level {
		r.mu.Unlock()
		return
	}
	if p.serverLevels == nil {
		p.serverLevels = map[string]mcp.LoggingLevel{}
	}
	p.serverLevels[server] = level
	var c *conn.Conn
	if e := p.servers[server]; e != nil {
		c = e.conn
	}
	r.mu.Unlock()
	if c != nil {
		c.SetLogLevel(ctx, level)
	}
}

// levelOf is the level server is set to: its own, else the project's.
func (p *project) levelOf(server string) mcp.LoggingLevel {
	if level, ok := p.serverLevels[server]; ok {
		return level
	}
	return p.logLevel
}

// notify wakes the reconciler for a project (used as a connection's OnChange).
func (r *Registry) notify(key types.NamespacedName) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notifyLocked(key, r.projects[key])
}

func (r *Registry) projectLocked(key types.NamespacedName) *project {
	p := r.projects[key]
	if p == nil {
		r.incarnations++
		p = &project{incarnation: r.incarnations, servers: map[string]*entry{}, sessions: map[string]*Session{}, changed: make(chan struct{})}
		r.projects[key] = p
	}
	return p
}

// SetDesired records the enabled servers and timeouts the reconciler derived from spec.
func (r *Registry) SetDesired(key types.NamespacedName, d Desired) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.projectLocked(key)
	rearm := p.desired.IdleTimeout != d.IdleTimeout
	if !p.known {
		close(r.setUp)
		r.setUp = make(chan struct{})
	}
	p.desired, p.known = d, true
	// A server added to the config reaches the sessions already mounted: each gets a slot.
	added := false
	for _, name := range d.Servers {
		for _, s := range p.sessions {
			if !s.slots[name] {
				s.slots[name] = true
				r.entryLocked(p, name).refs++
				added = true
			}
		}
	}
	if rearm || added { // re-arming on every reconcile would postpone reclaiming forever
		for _, e := range p.servers {
			r.armIdleLocked(key, p, e)
		}
	}
	if added {
		r.notifyLocked(key, p)
	}
}

// entryLocked returns a server's entry, creating an empty one. Callers hold r.mu.
func (r *Registry) entryLocked(p *project, name string) *entry {
	e := p.servers[name]
	if e == nil {
		e = &entry{}
		p.servers[name] = e
	}
	return e
}

// RBAC reports whether a project's items are authorized per identity by RBAC.
func (r *Registry) RBAC(key types.NamespacedName) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.projects[key]
	return p != nil && p.desired.RBAC
}

// Known reports whether the reconciler has set up a project (a ProjectMCP exists for it).
func (r *Registry) Known(key types.NamespacedName) bool { return r.Incarnation(key) != 0 }

// Incarnation identifies the current incarnation of a project: 0 when unknown, a new value when a
// deleted project is created again, so holders of per-project state can tell they are stale.
func (r *Registry) Incarnation(key types.NamespacedName) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p := r.projects[key]; p != nil && p.known {
		return p.incarnation
	}
	return 0
}

// WaitKnown waits until the reconciler has set up a project and returns its incarnation, or 0
// when ctx ends first. The gateway uses it for sessions that arrive between a ProjectMCP's
// creation (or a controller restart) and its first reconcile.
func (r *Registry) WaitKnown(ctx context.Context, key types.NamespacedName) uint64 {
	for {
		r.mu.Lock()
		var incarnation uint64
		if p := r.projects[key]; p != nil && p.known {
			incarnation = p.incarnation
		}
		setUp := r.setUp
		r.mu.Unlock()
		if incarnation != 0 {
			return incarnation
		}
		select {
		case <-setUp:
		case <-ctx.Done():
			return 0
		}
	}
}

// Mounted reports whether a session is bound to a project.
func (r *Registry) Mounted(key types.NamespacedName, id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.projects[key]
	return p != nil && p.sessions[id] != nil
}

// connOptions completes a connection's options with the registry's wiring.
func (r *Registry) connOptions(key types.NamespacedName, opts conn.Options) conn.Options {
	opts.Project = key.String()
	opts.Log = r.log.WithValues("projectmcp", key.String(), "server", opts.Server.Name)
	opts.OnChange = func() { r.notify(key) }
	server := opts.Server.Name
	opts.OnNotice = func(n conn.Notice) {
		r.mu.Lock()
		fns := r.notices
		r.mu.Unlock()
		for _, fn := range fns {
			fn(key, server, n)
		}
	}
	if clk, ok := r.clock.(clock.WithTicker); ok {
		opts.Clock = clk
	}
	return opts
}

// Connect makes a new connection the server's connection: the create, repoint and rebuild
// actions. The previous connection, if any, is torn down first and the new one starts only
// after it has ended (a server holding an exclusive resource cannot run twice). During the
// swap every slot keeps its reference (slots follow the entry) and the old tools stay listed
// under the same names until the new connection is up (Offered); calls wait for it (Await).
// A connection with no slot bound gets one idle window, so its tools are warm for the first
// session. Connect returns nil after Shutdown.
//
// The teardown runs in the background: the caller (a reconcile worker) does not wait for the
// old connection's requests to drain (up to conn.DrainTimeout) and its server to end, which
// held one of the few workers per repoint, and so every other project's reconciles behind it,
// for as long as the calls in flight took. Shutdown waits for it.
func (r *Registry) Connect(key types.NamespacedName, hash string, opts conn.Options) *conn.Conn {
	r.mu.Lock()
	if r.closed { // a reconcile still running while the manager stops must not start a server
		r.mu.Unlock()
		return nil
	}
	p := r.projectLocked(key)
	metrics.UseServer(key.Namespace, key.Name, opts.Server.Name) // until Retire or Forget
	e := r.entryLocked(p, opts.Server.Name)
	c, old := r.swapLocked(key, p, e, hash, opts)
	e.rebuilds = 0 // a connection the reconciler built (a create, a repoint, a rebuild asked for) owes mounts nothing
	if old != nil {
		// Under r.mu: Shutdown (which sets closed under it) and Forget (which removes the
		// project under it) wait for this one.
		r.teardowns.Add(1)
		p.teardowns.Add(1)
	}
	r.mu.Unlock()
	if old != nil {
		go func() {
			defer r.teardowns.Done()
			defer p.teardowns.Done()
			old.Destroy()
		}()
	}
	return c
}

// swapLocked installs a new connection in e, started once the current one (returned as old,
// for the caller to Destroy outside the lock) has ended. Callers hold r.mu.
func (r *Registry) swapLocked(key types.NamespacedName, p *project, e *entry, hash string, opts conn.Options) (c, old *conn.Conn) {
	old = e.conn
	run := r.connOptions(key, opts)
	run.LogLevel = p.levelOf(opts.Server.Name)
	if old != nil {
		run.StartAfter = old.Done()
		run.Subscriptions, _ = old.Subscriptions() // subscribers stay subscribed across the swap
		// What sessions see now goes on being offered: the old connection's lists, or, when it
		// was itself still starting (a second edit before the first repoint was up), what it
		// carried; otherwise the server's tools would vanish until the newest one is up.
		e.carried = (ServerState{HasConn: true, Conn: old.Snapshot(), Carried: e.carried}).offering()
	} else {
		e.carried = nil
	}
	c = conn.New(run)
	e.conn, e.hash, e.opts, e.reclaimed = c, hash, opts, false
	r.armIdleLocked(key, p, e)
	r.notifyLocked(key, p)
	return c, old
}

// Retire drops every slot bound to a server and destroys its connection now (no idle wait).
func (r *Registry) Retire(key types.NamespacedName, server string) {
	r.mu.Lock()
	p := r.projects[key]
	if p == nil || p.servers[server] == nil {
		r.mu.Unlock()
		return
	}
	e := p.servers[server]
	delete(p.servers, server)
	stopTimer(e)
	for _, s := range p.sessions {
		delete(s.slots, server)
	}
	r.notifyLocked(key, p)
	r.mu.Unlock()
	if e.conn != nil {
		e.conn.Destroy()
	}
	metrics.ForgetServer(key.Namespace, key.Name, server)
}

// Forget retires every server of a project and drops its sessions (the object is deleted).
func (r *Registry) Forget(key types.NamespacedName) {
	r.mu.Lock()
	p := r.projects[key]
	delete(r.projects, key)
	var conns []*conn.Conn
	if p != nil {
		for _, e := range p.servers {
			stopTimer(e)
			if e.conn != nil {
				conns = append(conns, e.conn)
			}
		}
		close(p.changed)
	}
	for _, fn := range r.watchers { // not the reconciler: the object is gone
		fn(key)
	}
	r.mu.Unlock()
	destroyAll(conns)
	if p != nil {
		p.teardowns.Wait() // no server of a forgotten project runs on
	}
	metrics.ForgetProject(key.Namespace, key.Name)
}

// armIdleLocked starts the idle timer of an unused connection, or stops it while the
// connection is in use or reclaiming is off. Callers hold r.mu.
func (r *Registry) armIdleLocked(key types.NamespacedName, p *project, e *entry) {
	stopTimer(e)
	if e.conn == nil || e.refs > 0 || p.desired.IdleTimeout <= 0 {
		return
	}
	c := e.conn
	e.idle = r.clock.AfterFunc(p.desired.IdleTimeout, func() { r.reclaim(key, c) })
}

func stopTimer(e *entry) {
	if e.idle != nil {
		e.idle.Stop()
		e.idle = nil
	}
}

// reclaim destroys an idle connection if it is still the server's connection and still unused.
func (r *Registry) reclaim(key types.NamespacedName, c *conn.Conn) {
	r.mu.Lock()
	p := r.projects[key]
	var e *entry
	if p != nil {
		e = p.servers[c.Server()]
	}
	if e == nil || e.conn != c || e.refs > 0 {
		r.mu.Unlock()
		return
	}
	e.conn, e.reclaimed, e.idle = nil, true, nil
	r.notifyLocked(key, p)
	r.mu.Unlock()
	r.log.V(1).Info("Reclaimed idle MCP connection", "projectmcp", key.String(), "server", c.Server())
	c.Destroy()
}

// ErrUnknownProject is returned by Mount for a project the reconciler has not seen.
var ErrUnknownProject = errors.New("unknown project")

// ErrTooManySessions is Mount's answer for a new session of a project that has as many
// sessions as LimitSessions allows.
var ErrTooManySessions = errors.New("too many sessions")

// Mount binds a new session: one slot per enabled server. A bound connection that is dead
// (Failed, or Ready offering nothing for longer than conn.DeadAfter) is rebuilt here, at once,
// unless it is in use or was rebuilt so within its reconnect backoff window (rebuildAtMount):
// the rebuild at mount (docs/lifecycle-contracts.md#the-mounts-exception), recorded as
// lastRebuild for status and events. Mount then waits up to the project's readyTimeout until
// every slot's connection is Ready, Failed for good, or Disconnected after having been Ready
// (first attempts failing inside the reconnect budget are waited through). A server that is
// late or failed never fails the mount; its tools are simply absent for now
// (docs/lifecycle-contracts.md#ready-before-the-first-turn).
func (r *Registry) Mount(ctx context.Context, key types.NamespacedName, id, client string) (*Session, error) {
	r.mu.Lock()
	p := r.projects[key]
	if p == nil || !p.known {
		r.mu.Unlock()
		return nil, fmt.Errorf("%w %s", ErrUnknownProject, key)
	}
	if s := p.sessions[id]; s != nil {
		r.mu.Unlock()
		return s, nil
	}
	if r.maxSessions > 0 && len(p.sessions) >= r.maxSessions {
		r.mu.Unlock()
		return nil, fmt.Errorf("%w: %s has %d sessions, the most the controller allows one project (--max-sessions-per-project)", ErrTooManySessions, key, r.maxSessions)
	}
	now := r.clock.Now()
	s := &Session{ID: id, Client: client, BoundAt: now, slots: map[string]bool{}}
	p.sessions[id] = s
	var dead []*conn.Conn
	for _, name := range p.desired.Servers {
		e := r.entryLocked(p, name)
		s.slots[name] = true
		e.refs++
		e.lastMount = now
		stopTimer(e)
		if e.conn == nil {
			continue
		}
		snap := e.conn.Snapshot()
		if snap.Phase == v1alpha1.PhaseReady && snap.Items() > 0 {
			e.rebuilds = 0 // healthy: a later failure's rebuilds start over
		}
		if !rebuildAtMount(now, snap, e.conn.InUse(), e.lastRebuild.At, e.rebuilds, e.opts.Policy) {
			continue
		}
		base, opts := e.opts, e.opts
		if snap.Phase == v1alpha1.PhaseFailed {
			opts.Attempts = opts.Policy.MaxAttempts // one more attempt of the budget it spent, not a new budget
		}
		c, old := r.swapLocked(key, p, e, e.hash, opts)
		e.opts = base // what the reconciler built it from: the next rebuild decides its attempts anew
		e.lastRebuild = Rebuild{At: now, Reason: RebuildDeadAtMount, Connection: c.ID(), Previous: deadReason(snap)}
		e.rebuilds++
		metrics.Rebuilt(key.Namespace, key.Name, name, metrics.ReasonDeadAtMount)
		dead = append(dead, old)
	}
	ready := p.desired.ReadyTimeout
	r.notifyLocked(key, p) // the reconciler creates what the mount demands and writes status
	r.mu.Unlock()
	destroyAll(dead) // the rebuilt connections start once these have ended

	if ready > 0 {
		start := r.clock.Now()
		wait, cancel := context.WithTimeout(ctx, ready)
		defer cancel()
		r.waitStarted(wait, key)
		metrics.MountWaited(key.Namespace, key.Name, r.clock.Since(start))
	}
	return s, nil
}

// AwaitStarted waits, as a session's Mount does, until every server of the project has a
// connection that is no longer starting, but only within the session's own mount window (its
// first ReadyTimeout since it was bound); false when the session is past it, or not mounted.
// A stateless session's requests can arrive together: the first one's Mount is still waiting
// while the others find the session mounted and the project's servers not started yet (a
// project just made again, as a replica taking a bucket over makes its projects). Later
// requests never wait here: a server that starts again later (a repoint, a rebuild) keeps its
// old tools listed meanwhile, and its calls wait in Await.
func (r *Registry) AwaitStarted(ctx context.Context, key types.NamespacedName, id string) bool {
	r.mu.Lock()
	p := r.projects[key]
	var s *Session
	if p != nil {
		s = p.sessions[id]
	}
	if s == nil {
		r.mu.Unlock()
		return false
	}
	left := s.BoundAt.Add(p.desired.ReadyTimeout).Sub(r.clock.Now())
	started := r.startedLocked(p)
	r.mu.Unlock()
	if left <= 0 {
		return false
	}
	if !started {
		wait, cancel := context.WithTimeout(ctx, left)
		defer cancel()
		r.waitStarted(wait, key)
	}
	return true
}

// startedLocked reports whether every server of p has a connection that is no longer
// starting. Callers hold r.mu.
func (r *Registry) startedLocked(p *project) bool {
	for _, name := range p.desired.Servers {
		e := p.servers[name]
		if e == nil || e.conn == nil || e.conn.Snapshot().Starting() {
			return false
		}
	}
	return true
}

// deadReason says why a dead connection counts as dead.
func deadReason(s conn.Snapshot) string {
	if s.Phase == v1alpha1.PhaseFailed {
		return "failed: " + s.LastError
	}
	return fmt.Sprintf("connected offering nothing (no tool, prompt or resource) for more than %s", conn.DeadAfter)
}

// rebuildAtMount decides whether a session's mount at now rebuilds a server's connection (s),
// the one rebuild the registry does by itself: only a dead one (conn.Snapshot.Dead), never
// one in use (conn.Conn.InUse: tearing it down would fail requests sessions are waiting for,
// and drop their subscriptions), and at most once per reconnect backoff window: the first
// rebuild since a mount last found the server healthy at once, each later one only
// policy.Window(rebuilds) after the last (1×, 2×, 4× InitialBackoff..., up to MaxBackoff), as
// the budget spaces a connection's own attempts. A server that fails fast, or a stream of
// sessions opened to make it restart, then costs one process per window, not one per session.
func rebuildAtMount(now time.Time, s conn.Snapshot, inUse bool, last time.Time, rebuilds int, policy conn.Policy) bool {
	if !s.Dead(now) || inUse {
		return false
	}
	return rebuilds == 0 || !now.Before(last.Add(policy.Window(rebuilds)))
}

// waitStarted waits until every slot-bound server of the project has a connection that is no
// longer starting (conn.Snapshot.Starting), or ctx ends.
func (r *Registry) waitStarted(ctx context.Context, key types.NamespacedName) {
	for {
		r.mu.Lock()
		p := r.projects[key]
		if p == nil {
			r.mu.Unlock()
			return
		}
		var pendingConn *conn.Conn
		unsettled := false
		for _, name := range p.desired.Servers {
			e := p.servers[name]
			if e == nil || e.conn == nil {
				unsettled = true // the reconciler has yet to create it
				continue
			}
			if e.conn.Snapshot().Starting() {
				pendingConn = e.conn
			}
		}
		changed := p.changed
		r.mu.Unlock()
		switch {
		case pendingConn != nil:
			select {
			case <-pendingConn.Changed():
			case <-changed:
			case <-ctx.Done():
				return
			}
		case unsettled:
			select {
			case <-changed:
			case <-ctx.Done():
				return
			}
		default:
			return
		}
	}
}

// Release ends a session: its slots return their references, and a connection left without
// slots starts its idle timer. The connection itself stays.
func (r *Registry) Release(key types.NamespacedName, id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.projects[key]
	if p == nil || p.sessions[id] == nil {
		return
	}
	s := p.sessions[id]
	delete(p.sessions, id)
	for name := range s.slots {
		if e := p.servers[name]; e != nil {
			e.refs--
			r.armIdleLocked(key, p, e)
		}
	}
	r.notifyLocked(key, p)
}

// Lookup returns the connection a session's slot currently points at, or nil when the slot
// was dropped or the server has no connection right now.
func (r *Registry) Lookup(key types.NamespacedName, id, server string) *conn.Conn {
	c, _ := r.lookup(key, id, server)
	return c
}

func (r *Registry) lookup(key types.NamespacedName, id, server string) (*conn.Conn, time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.projects[key]
	if p == nil || p.sessions[id] == nil || !p.sessions[id].slots[server] || p.servers[server] == nil {
		return nil, 0
	}
	return p.servers[server].conn, p.desired.ReadyTimeout
}

// Await is Lookup for a call: while the slot's connection is still starting (created,
// repointed or rebuilt a moment ago) it waits up to the project's readyTimeout for it, so a
// call made during a swap reaches the new connection instead of failing at once. A
// connection that was Ready and dropped is returned at once (its calls fail at once).
func (r *Registry) Await(ctx context.Context, key types.NamespacedName, id, server string) *conn.Conn {
	c, ready := r.lookup(key, id, server)
	if c != nil && ready > 0 && c.Snapshot().Starting() {
		wait, cancel := context.WithTimeout(ctx, ready)
		defer cancel()
		c.WaitStarted(wait)
	}
	return c
}

// ServerState is one server's entry as the reconciler observes it.
type ServerState struct {
	Name    string
	HasConn bool
	Hash    string
	Conn    conn.Snapshot // zero when HasConn is false
	Refs    int
	// Reclaimed is true when an idle timer destroyed the connection.
	Reclaimed bool
	LastMount time.Time
	// Carried is the previous connection's state while a new one is starting (see Offered).
	Carried *conn.Snapshot
	// LastRebuild is the last rebuild a mount started (zero if none).
	LastRebuild Rebuild
}

// Offered are the tools sessions should see from this server: those of a Ready or
// Disconnected connection (a brief disconnect must not withdraw them); while a repoint or
// rebuild brings up a new connection, the previous one's (names unchanged during the swap);
// none from a Failed or absent one. Prompts and resources follow the same rule.
func (s ServerState) Offered() []*mcp.Tool {
	if o := s.offering(); o != nil {
		return o.Tools
	}
	return nil
}

// OfferedPrompts are the prompts sessions should see (see Offered).
func (s ServerState) OfferedPrompts() []*mcp.Prompt {
	if o := s.offering(); o != nil {
		return o.Prompts
	}
	return nil
}

// OfferedResources are the resources and resource templates sessions should see (see Offered).
func (s ServerState) OfferedResources() ([]*mcp.Resource, []*mcp.ResourceTemplate) {
	if o := s.offering(); o != nil {
		return o.Resources, o.Templates
	}
	return nil, nil
}

// RawItem is an item the lists above hold, as its server sent it (conn.Snapshot.RawItem), or
// nil.
func (s ServerState) RawItem(kind conn.Kind, key string) *conn.RawItem {
	if o := s.offering(); o != nil {
		return o.RawItem(kind, key)
	}
	return nil
}

// AlwaysLoad is the alwaysLoad of the connection whose tools are offered (see Offered): during a
// swap the tools keep the mark they had, like their names.
func (s ServerState) AlwaysLoad() bool {
	o := s.offering()
	return o != nil && o.AlwaysLoad
}

// ToolHints are the toolHints of the connection whose tools are offered, as AlwaysLoad.
func (s ServerState) ToolHints() []v1alpha1.ToolHint {
	if o := s.offering(); o != nil {
		return o.ToolHints
	}
	return nil
}

// offering is the state whose lists sessions see, or nil.
func (s ServerState) offering() *conn.Snapshot {
	switch {
	case !s.HasConn:
		return nil
	case s.Conn.Starting() && s.Carried != nil:
		return s.Carried
	case s.Conn.Phase == v1alpha1.PhaseReady || s.Conn.Phase == v1alpha1.PhaseDisconnected:
		return &s.Conn
	}
	return nil
}

// SlotState is one session's binding as status shows it.
type SlotState struct {
	Server, Connection string
}

// SessionState is one session as status shows it.
type SessionState struct {
	ID, Client string
	BoundAt    time.Time
	Slots      []SlotState
}

// Observation is a project's registry state at one moment.
type Observation struct {
	Servers  map[string]ServerState
	Sessions []SessionState // newest first
}

// Observe returns a project's servers and sessions.
func (r *Registry) Observe(key types.NamespacedName) Observation {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.projects[key]
	obs := Observation{Servers: serversLocked(p)}
	if p == nil {
		return obs
	}
	for _, s := range p.sessions {
		ss := SessionState{ID: s.ID, Client: s.Client, BoundAt: s.BoundAt}
		for name := range s.slots {
			slot := SlotState{Server: name}
			if e := p.servers[name]; e != nil && e.conn != nil {
				slot.Connection = e.conn.ID()
			}
			ss.Slots = append(ss.Slots, slot)
		}
		sort.Slice(ss.Slots, func(i, j int) bool { return ss.Slots[i].Server < ss.Slots[j].Server })
		obs.Sessions = append(obs.Sessions, ss)
	}
	sort.Slice(obs.Sessions, func(i, j int) bool {
		a, b := obs.Sessions[i], obs.Sessions[j]
		if !a.BoundAt.Equal(b.BoundAt) {
			return a.BoundAt.After(b.BoundAt)
		}
		return a.ID < b.ID
	})
	return obs
}

// ObserveServers is Observe without the sessions: what the gateway's projection and the
// instructions need, at a cost that does not grow with the project's sessions (Observe lists
// and sorts them all, under the lock every project's calls take).
func (r *Registry) ObserveServers(key types.NamespacedName) Observation {
	r.mu.Lock()
	defer r.mu.Unlock()
	return Observation{Servers: serversLocked(r.projects[key])}
}

// serversLocked is the state of a project's servers (none for nil). Callers hold r.mu.
func serversLocked(p *project) map[string]ServerState {
	servers := map[string]ServerState{}
	if p == nil {
		return servers
	}
	for name, e := range p.servers {
		st := ServerState{Name: name, Hash: e.hash, Refs: e.refs, Reclaimed: e.reclaimed, LastMount: e.lastMount,
			Carried: e.carried, LastRebuild: e.lastRebuild}
		if e.conn != nil {
			st.HasConn, st.Conn = true, e.conn.Snapshot()
		}
		servers[name] = st
	}
	return servers
}

// Counts are the process's projects and connections (with their phases), for /metrics.
func (r *Registry) Counts() metrics.Counts {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := metrics.Counts{Projects: len(r.projects)}
	for key, p := range r.projects {
		for name, e := range p.servers {
			if e.conn != nil {
				snap := e.conn.Snapshot()
				c.Connections = append(c.Connections, metrics.Connection{Namespace: key.Namespace, Project: key.Name,
					Server: name, Phase: string(snap.Phase), Waiting: snap.Waiting})
			}
		}
	}
	return c
}

// Tools is, per server, the tools sessions should see (ServerState.Offered): the input of
// the tool projection.
func (o Observation) Tools() map[string][]*mcp.Tool {
	out := make(map[string][]*mcp.Tool, len(o.Servers))
	for name, st := range o.Servers {
		out[name] = st.Offered()
	}
	return out
}

// Prompts is, per server, the prompts sessions should see.
func (o Observation) Prompts() map[string][]*mcp.Prompt {
	out := make(map[string][]*mcp.Prompt, len(o.Servers))
	for name, st := range o.Servers {
		out[name] = st.OfferedPrompts()
	}
	return out
}

// Resources is, per server, the resources and resource templates sessions should see.
func (o Observation) Resources() (map[string][]*mcp.Resource, map[string][]*mcp.ResourceTemplate) {
	res := make(map[string][]*mcp.Resource, len(o.Servers))
	tmpl := make(map[string][]*mcp.ResourceTemplate, len(o.Servers))
	for name, st := range o.Servers {
		res[name], tmpl[name] = st.OfferedResources()
	}
	return res, tmpl
}
