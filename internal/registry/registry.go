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
	"github.com/dsh-dev/projectmcp/internal/share"
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
	// Scopes are the servers' sharing scopes in force (share.Effective); a server missing
	// here is under share project. A server's connections follow the scope they were last
	// built under (Connect): this keys the slots of a server not built yet.
	Scopes map[string]v1alpha1.Share
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
	notices      []func(types.NamespacedName, string, Notice)
	// setUp is closed and replaced whenever a project becomes known (its first SetDesired),
	// waking requests that arrived before their project's first reconcile (WaitKnown).
	setUp chan struct{}
	// maxSessions bounds the sessions of one project (0: no bound): each is a line of status,
	// whose size every session of the project shares.
	maxSessions int
	// teardowns are the replaced connections Connect is destroying in the background.
	teardowns sync.WaitGroup
	// maxPerServer and maxPerPrincipal bound keyed connections (LimitConnections; 0: none).
	maxPerServer, maxPerPrincipal int
	// local: the controller is in local mode (ServeLocal), where share worktree is served.
	local bool
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
	servers     map[string]*server
	sessions    map[string]*Session
	changed     chan struct{} // closed and replaced on every change, for Mount's wait
	// teardowns are the project's replaced connections Connect is destroying in the background.
	teardowns sync.WaitGroup
	// serverLevels are servers' own levels, which stand in for logLevel (SetServerLogLevel).
	serverLevels map[string]mcp.LoggingLevel
}

// server is one (project, server): what the reconciler last built it from, and its
// connections by connection key (share.Key): the one of key "" under share project, one per
// principal or session otherwise.
type server struct {
	scope v1alpha1.Share
	// configured: Connect has run, so hash and opts are the reconciler's and a mount may build
	// a connection of a keyed scope from them.
	configured bool
	hash       string
	opts       conn.Options // what its connections are built from, for a build or rebuild at mount
	conns      map[string]*entry
	// lead is the key of the connection whose items the server offers (leadLocked).
	lead string
}

// entry is one connection of a server and the slots bound to it. Under share project the entry
// outlives its connection when an idle timer reclaims it, so that status can say Idle and a
// later mount brings the server back; a keyed entry goes once it has neither.
type entry struct {
	key       string
	principal string    // whose sessions made it (keyed scopes), for the per-principal bound
	made      time.Time // when its connection was last built, for the choice of the lead
	conn      *conn.Conn
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
	who     share.Who
	slots   map[string]slot
}

// slot is a session's binding to one server: the key of its connection, or why it has none
// (a bound on connections refused it one).
type slot struct {
	key     string
	refused error
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
		for _, srv := range p.servers {
			conns = append(conns, srv.stopAll()...)
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

// Notice is a server's notification meant for sessions, with the key of the connection it came
// on: only the sessions bound to that connection may be told of it (Bound).
type Notice struct {
	conn.Notice
	Conn string // the connection key ("" under share project)
}

// OnNotice registers fn to receive the servers' notifications meant for sessions
// (resources/updated, log messages), with the project and server they come from. fn runs on
// the connection's receive loop with no lock held: it must not block.
func (r *Registry) OnNotice(fn func(key types.NamespacedName, server string, n Notice)) {
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
	for _, srv := range p.servers {
		conns = append(conns, srv.live()...)
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
	var conns []*conn.Conn
	if srv := p.servers[server]; srv != nil {
		conns = srv.live()
	}
	r.mu.Unlock()
	for _, c := range conns {
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
		p = &project{incarnation: r.incarnations, servers: map[string]*server{}, sessions: map[string]*Session{}, changed: make(chan struct{})}
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
	now := r.clock.Now()
	for _, name := range d.Servers {
		for _, s := range p.sessions {
			if _, ok := s.slots[name]; !ok {
				r.bindLocked(p, s, name, now)
				added = true
			}
		}
	}
	if rearm || added { // re-arming on every reconcile would postpone reclaiming forever
		for name, srv := range p.servers {
			for _, e := range srv.conns {
				r.armIdleLocked(key, p, name, e)
			}
		}
	}
	if added {
		r.notifyLocked(key, p)
	}
}

// serverLocked returns a server's record, creating an empty one. Callers hold r.mu.
func (p *project) serverLocked(name string) *server {
	srv := p.servers[name]
	if srv == nil {
		srv = &server{scope: p.scopeOf(name), conns: map[string]*entry{}}
		p.servers[name] = srv
	}
	return srv
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
func (r *Registry) connOptions(key types.NamespacedName, connKey string, opts conn.Options) conn.Options {
	opts.Project = key.String()
	opts.Log = r.log.WithValues("projectmcp", key.String(), "server", opts.Server.Name)
	if connKey != "" {
		opts.Log = opts.Log.WithValues("share", share.Label(connKey)) // never the key itself
	}
	opts.OnChange = func() { r.notify(key) }
	server := opts.Server.Name
	opts.OnNotice = func(n conn.Notice) {
		r.mu.Lock()
		fns := r.notices
		r.mu.Unlock()
		for _, fn := range fns {
			fn(key, server, Notice{Notice: n, Conn: connKey})
		}
	}
	if clk, ok := r.clock.(clock.WithTicker); ok {
		opts.Clock = clk
	}
	return opts
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
//
// who names the session (who.Session is its id) and what keys its connections: under a keyed
// scope (share principal, session) the slot binds the connection of its key, and the first
// session of a key builds that connection here, from what the reconciler last gave the server,
// within the same wait; a session past a bound on connections gets a slot with no connection
// (LimitConnections).
func (r *Registry) Mount(ctx context.Context, key types.NamespacedName, who share.Who, client string) (*Session, error) {
	id := who.Session
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
	s := &Session{ID: id, Client: client, BoundAt: now, who: who, slots: map[string]slot{}}
	p.sessions[id] = s
	var dead []*conn.Conn
	for _, name := range p.desired.Servers {
		e := r.bindLocked(p, s, name, now)
		if e == nil {
			continue // refused by a bound: no connection
		}
		srv := p.servers[name]
		if e.conn == nil {
			if e.key != "" && srv.configured {
				r.swapLocked(key, p, srv, e, nil) // the first session of its key makes its connection
			}
			continue
		}
		if old := r.rebuildDeadLocked(key, p, srv, e, now); old != nil {
			dead = append(dead, old)
		}
	}
	ready := p.desired.ReadyTimeout
	r.notifyLocked(key, p) // the reconciler creates what the mount demands and writes status
	r.mu.Unlock()
	destroyAll(dead) // the rebuilt connections start once these have ended

	if ready > 0 {
		start := r.clock.Now()
		wait, cancel := context.WithTimeout(ctx, ready)
		defer cancel()
		r.waitStarted(wait, key, id)
		metrics.MountWaited(key.Namespace, key.Name, r.clock.Since(start))
	}
	return s, nil
}

// rebuildDeadLocked rebuilds e's connection when a mount at now finds it dead and may rebuild
// it (rebuildAtMount), and returns the dead one for the caller to destroy outside the lock
// (nil: nothing rebuilt). Callers hold r.mu.
func (r *Registry) rebuildDeadLocked(key types.NamespacedName, p *project, srv *server, e *entry, now time.Time) *conn.Conn {
	snap := e.conn.Snapshot()
	if snap.Phase == v1alpha1.PhaseReady && snap.Items() > 0 {
		e.rebuilds = 0 // healthy: a later failure's rebuilds start over
	}
	if !rebuildAtMount(now, snap, e.conn.InUse(), e.lastRebuild.At, e.rebuilds, srv.opts.Policy) {
		return nil
	}
	base := srv.opts
	if snap.Phase == v1alpha1.PhaseFailed {
		srv.opts.Attempts = srv.opts.Policy.MaxAttempts // one more attempt of the budget it spent, not a new budget
	}
	c, old := r.swapLocked(key, p, srv, e, nil)
	srv.opts = base // what the reconciler built it from: the next rebuild decides its attempts anew
	e.lastRebuild = Rebuild{At: now, Reason: RebuildDeadAtMount, Connection: c.ID(), Previous: deadReason(snap)}
	e.rebuilds++
	metrics.Rebuilt(key.Namespace, key.Name, srv.opts.Server.Name, metrics.ReasonDeadAtMount)
	return old
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
	pending, unsettled := settleLocked(p, s)
	r.mu.Unlock()
	if left <= 0 {
		return false
	}
	if pending != nil || unsettled {
		wait, cancel := context.WithTimeout(ctx, left)
		defer cancel()
		r.waitStarted(wait, key, id)
	}
	return true
}

// settleLocked says what a session's mount still waits for: a connection of its slots that is
// starting (pending), or a slot whose connection the reconciler has yet to create (unsettled).
// A slot a bound refused waits for nothing. Callers hold r.mu.
func settleLocked(p *project, s *Session) (pending *conn.Conn, unsettled bool) {
	for _, name := range p.desired.Servers {
		sl, bound := s.slots[name]
		if bound && sl.refused != nil {
			continue
		}
		var e *entry
		if srv := p.servers[name]; srv != nil && bound {
			e = srv.conns[sl.key]
		}
		switch {
		case e == nil || e.conn == nil:
			unsettled = true
		case e.conn.Snapshot().Starting():
			pending = e.conn
		}
	}
	return pending, unsettled
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

// waitStarted waits until every server a session is bound to has a connection for it that is
// no longer starting (conn.Snapshot.Starting), or ctx ends, or the session is released.
func (r *Registry) waitStarted(ctx context.Context, key types.NamespacedName, id string) {
	for {
		r.mu.Lock()
		p := r.projects[key]
		if p == nil || p.sessions[id] == nil {
			r.mu.Unlock()
			return
		}
		pendingConn, unsettled := settleLocked(p, p.sessions[id])
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
// slots starts its idle timer; it stays. A connection of share session is the session's own,
// which no later session can bind: it ends now (in the background, as Connect's teardowns).
func (r *Registry) Release(key types.NamespacedName, id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.projects[key]
	if p == nil || p.sessions[id] == nil {
		return
	}
	s := p.sessions[id]
	delete(p.sessions, id)
	var ended []*conn.Conn
	for name, sl := range s.slots {
		srv := p.servers[name]
		if srv == nil || sl.refused != nil || srv.conns[sl.key] == nil {
			continue
		}
		e := srv.conns[sl.key]
		e.refs--
		switch {
		case e.refs > 0 || sl.key == "":
			r.armIdleLocked(key, p, name, e)
		case srv.scope == v1alpha1.ShareSession || e.conn == nil:
			stopTimer(e)
			delete(srv.conns, sl.key)
			if e.conn != nil {
				ended = append(ended, e.conn)
			}
		default:
			r.armIdleLocked(key, p, name, e)
		}
	}
	r.teardownLocked(p, ended)
	r.notifyLocked(key, p)
}

// Lookup returns the connection a session's slot currently points at, or nil when the slot
// was dropped or the server has no connection right now.
func (r *Registry) Lookup(key types.NamespacedName, id, server string) *conn.Conn {
	c, _, _ := r.lookup(key, id, server)
	return c
}

// lookup is the connection a session's slot on server points at (nil: none), the project's
// readyTimeout, and why the slot has no connection when a bound refused it one.
func (r *Registry) lookup(key types.NamespacedName, id, server string) (*conn.Conn, time.Duration, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.projects[key]
	if p == nil || p.sessions[id] == nil || p.servers[server] == nil {
		return nil, 0, nil
	}
	sl, bound := p.sessions[id].slots[server]
	if !bound || sl.refused != nil {
		return nil, 0, sl.refused
	}
	if e := p.servers[server].conns[sl.key]; e != nil {
		return e.conn, p.desired.ReadyTimeout, nil
	}
	return nil, 0, nil
}

// Await is Lookup for a call: while the slot's connection is still starting (created,
// repointed or rebuilt a moment ago) it waits up to the project's readyTimeout for it, so a
// call made during a swap reaches the new connection instead of failing at once. A
// connection that was Ready and dropped is returned at once (its calls fail at once).
func (r *Registry) Await(ctx context.Context, key types.NamespacedName, id, server string) *conn.Conn {
	c, _ := r.AwaitSlot(ctx, key, id, server)
	return c
}

// AwaitSlot is Await with, for a slot a bound on connections refused (nil connection), the
// error that says so: the server, its scope and the bound.
func (r *Registry) AwaitSlot(ctx context.Context, key types.NamespacedName, id, server string) (*conn.Conn, error) {
	c, ready, refused := r.lookup(key, id, server)
	if c != nil && ready > 0 && c.Snapshot().Starting() {
		wait, cancel := context.WithTimeout(ctx, ready)
		defer cancel()
		c.WaitStarted(wait)
	}
	return c, refused
}

// Bound reports whether a session's slot on server is bound to the connection of key connKey:
// a connection's notices go to the sessions bound to it alone.
func (r *Registry) Bound(key types.NamespacedName, id, server, connKey string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.projects[key]
	if p == nil || p.sessions[id] == nil {
		return false
	}
	sl, bound := p.sessions[id].slots[server]
	return bound && sl.refused == nil && sl.key == connKey
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
	// Scope is the sharing scope the server's connections are keyed under; Connections how many
	// it has; Configured whether the reconciler has given it what they are built from (Connect).
	// Under a keyed scope the state above is its lead connection's (the one whose items are
	// offered) and Refs count the slots of all of them.
	Scope       v1alpha1.Share
	Connections int
	Configured  bool
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
	// Label names the slot's connection key (share.Label): empty under share project.
	Label string
	// Refused: a bound on connections left the slot without one.
	Refused bool
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
		for name, sl := range s.slots {
			slot := SlotState{Server: name, Label: share.Label(sl.key), Refused: sl.refused != nil}
			if srv := p.servers[name]; srv != nil && sl.refused == nil {
				if e := srv.conns[sl.key]; e != nil && e.conn != nil {
					slot.Connection = e.conn.ID()
				}
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
	for name, srv := range p.servers {
		servers[name] = srv.stateLocked(name)
	}
	return servers
}

// stateLocked is a server's state: its lead connection's (leadLocked), with the counts of all
// of its connections. A keyed server without a connection is reclaimed (Idle): a session's
// mount makes the connection of its key. Callers hold r.mu.
func (srv *server) stateLocked(name string) ServerState {
	st := ServerState{Name: name, Hash: srv.hash, Scope: srv.scope, Configured: srv.configured}
	for _, e := range srv.conns {
		st.Refs += e.refs
		if e.conn != nil {
			st.Connections++
		}
		if e.lastMount.After(st.LastMount) {
			st.LastMount = e.lastMount
		}
		if e.lastRebuild.At.After(st.LastRebuild.At) {
			st.LastRebuild = e.lastRebuild
		}
	}
	lead := srv.leadLocked()
	if lead == nil {
		st.Reclaimed = srv.configured && srv.keyed()
		return st
	}
	st.Reclaimed, st.Carried = lead.reclaimed, lead.carried
	if lead.conn != nil {
		st.HasConn, st.Conn = true, lead.conn.Snapshot()
	}
	return st
}

// keyed reports whether a server has a connection per key (share principal, session) rather
// than one (share project).
func (srv *server) keyed() bool {
	return srv.scope != v1alpha1.ShareProject && srv.scope != ""
}

// Counts are the process's projects and connections (with their phases), for /metrics.
func (r *Registry) Counts() metrics.Counts {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := metrics.Counts{Projects: len(r.projects)}
	for key, p := range r.projects {
		for name, srv := range p.servers {
			for _, e := range srv.conns {
				if e.conn == nil {
					continue
				}
				snap := e.conn.Snapshot()
				c.Connections = append(c.Connections, metrics.Connection{Namespace: key.Namespace, Project: key.Name,
					Server: name, Share: string(srv.scope), Phase: string(snap.Phase), Waiting: snap.Waiting})
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
