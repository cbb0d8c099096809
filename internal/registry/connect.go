package registry

import (
	"errors"
	"fmt"
	"maps"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/metrics"
	"github.com/dsh-dev/projectmcp/internal/share"
)

// Connect makes a new connection the server's connection: the create, repoint and rebuild
// actions (ConnectAll, for a server of share project). It returns the connection built, or nil
// after Shutdown or when a keyed server has no connection to build.
func (r *Registry) Connect(key types.NamespacedName, hash string, opts conn.Options) *conn.Conn {
	made, _ := r.ConnectAll(key, hash, opts)
	if len(made) == 0 {
		return nil
	}
	return made[0]
}

// ConnectAll records what the server's connections are built from (hash, opts) and builds
// them anew: the create, repoint and rebuild actions. Under share project that is the one
// connection, built whether or not a session is bound (a connection with no slot gets one
// idle window, so its tools are warm for the first session). Under a keyed scope it is every
// live connection, each in place under its key, and one for each key sessions are bound to
// that has none yet; a key nobody is bound to gets its connection at a session's mount, never
// here. A change of scope ends every connection and binds each slot under the new scope's key.
//
// Each previous connection is torn down first and its replacement starts only after it has
// ended (a server holding an exclusive resource cannot run twice). During the swap every slot
// keeps its reference (slots follow the entry) and the old tools stay listed under the same
// names until the new connection is up (Offered); calls wait for it (Await).
//
// The teardown runs in the background: the caller (a reconcile worker) does not wait for the
// old connections' requests to drain (up to conn.DrainTimeout) and their servers to end, which
// held one of the few workers per repoint, and so every other project's reconciles behind it,
// for as long as the calls in flight took. Shutdown waits for it. ok is false after Shutdown.
func (r *Registry) ConnectAll(key types.NamespacedName, hash string, opts conn.Options) (made []*conn.Conn, ok bool) {
	r.mu.Lock()
	if r.closed { // a reconcile still running while the manager stops must not start a server
		r.mu.Unlock()
		return nil, false
	}
	p := r.projectLocked(key)
	metrics.UseServer(key.Namespace, key.Name, opts.Server.Name) // until Retire or Forget
	name := opts.Server.Name
	srv := p.serverLocked(name)
	srv.configured, srv.hash, srv.opts = true, hash, opts
	var old []*conn.Conn
	var after <-chan struct{}
	if scope, _ := share.Effective(opts.Server); scope != srv.scope {
		old = r.rescopeLocked(p, name, srv, scope)
		after = allDone(old)
	}
	if srv.scope == v1alpha1.ShareProject {
		srv.entryLocked("")
	}
	for _, k := range slices.Sorted(maps.Keys(srv.conns)) {
		e := srv.conns[k]
		if k != "" && e.conn == nil && e.refs == 0 {
			continue
		}
		c, prev := r.swapLocked(key, p, srv, e, after)
		e.rebuilds = 0 // a connection the reconciler built (a create, a repoint, a rebuild asked for) owes mounts nothing
		made = append(made, c)
		if prev != nil {
			old = append(old, prev)
		}
	}
	r.teardownLocked(p, old)
	r.mu.Unlock()
	return made, true
}

// teardownLocked destroys replaced connections in the background. Under r.mu: Shutdown
// (which sets closed under it) and Forget (which removes the project under it) wait for them.
func (r *Registry) teardownLocked(p *project, old []*conn.Conn) {
	if len(old) == 0 {
		return
	}
	r.teardowns.Add(1)
	p.teardowns.Add(1)
	go func() {
		defer r.teardowns.Done()
		defer p.teardowns.Done()
		destroyAll(old)
	}()
}

// allDone is closed once every one of conns has ended.
func allDone(conns []*conn.Conn) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		for _, c := range conns {
			<-c.Done()
		}
		close(done)
	}()
	return done
}

// rescopeLocked puts a server under another scope: every connection it has ends (returned, for
// the caller to destroy) and each of its slots is bound anew, under the new scope's key, to
// entries whose connections are not built yet. They carry what the server offered, so its
// tools stay listed until the new connections are up. Callers hold r.mu.
func (r *Registry) rescopeLocked(p *project, name string, srv *server, scope v1alpha1.Share) (old []*conn.Conn) {
	var carried *conn.Snapshot
	if lead := srv.leadLocked(); lead != nil {
		carried = (ServerState{HasConn: true, Conn: lead.conn.Snapshot(), Carried: lead.carried}).offering()
	}
	old = srv.stopAll()
	srv.conns, srv.scope, srv.lead = map[string]*entry{}, scope, ""
	now := r.clock.Now()
	for _, s := range p.sessions {
		if _, bound := s.slots[name]; bound {
			r.bindLocked(p, s, name, now)
		}
	}
	for _, e := range srv.conns {
		e.carried = carried
	}
	return old
}

// swapLocked installs a new connection in e, built from the server's opts and started once the
// current one (returned as old, for the caller to Destroy outside the lock) has ended, or, for
// an entry without one, once after is closed (nil: at once). Callers hold r.mu.
func (r *Registry) swapLocked(key types.NamespacedName, p *project, srv *server, e *entry, after <-chan struct{}) (c, old *conn.Conn) {
	old = e.conn
	run := r.connOptions(key, e.key, inWorktree(srv.opts, srv.scope, e.key))
	run.LogLevel = p.levelOf(srv.opts.Server.Name)
	if old != nil {
		run.StartAfter = old.Done()
		run.Subscriptions, _ = old.Subscriptions() // subscribers stay subscribed across the swap
		// What sessions see now goes on being offered: the old connection's lists, or, when it
		// was itself still starting (a second edit before the first repoint was up), what it
		// carried; otherwise the server's tools would vanish until the newest one is up.
		e.carried = (ServerState{HasConn: true, Conn: old.Snapshot(), Carried: e.carried}).offering()
	} else if after == nil {
		e.carried = nil
	}
	if old == nil && after != nil {
		run.StartAfter = after
	}
	c = conn.New(run)
	e.conn, e.reclaimed, e.made = c, false, r.clock.Now()
	r.armIdleLocked(key, p, srv.opts.Server.Name, e)
	r.notifyLocked(key, p)
	return c, old
}

// Retire drops every slot bound to a server and destroys its connections now (no idle wait).
func (r *Registry) Retire(key types.NamespacedName, server string) {
	r.mu.Lock()
	p := r.projects[key]
	if p == nil || p.servers[server] == nil {
		r.mu.Unlock()
		return
	}
	srv := p.servers[server]
	delete(p.servers, server)
	conns := srv.stopAll()
	for _, s := range p.sessions {
		delete(s.slots, server)
	}
	r.notifyLocked(key, p)
	r.mu.Unlock()
	destroyAll(conns)
	metrics.ForgetServer(key.Namespace, key.Name, server)
}

// Forget retires every server of a project and drops its sessions (the object is deleted).
func (r *Registry) Forget(key types.NamespacedName) {
	r.mu.Lock()
	p := r.projects[key]
	delete(r.projects, key)
	var conns []*conn.Conn
	if p != nil {
		for _, srv := range p.servers {
			conns = append(conns, srv.stopAll()...)
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

// stopAll stops the idle timers of a server's connections and returns the live ones, for the
// caller to destroy. Callers hold r.mu.
func (srv *server) stopAll() []*conn.Conn {
	for _, e := range srv.conns {
		stopTimer(e)
	}
	return srv.live()
}

// live are a server's connections. Callers hold r.mu.
func (srv *server) live() []*conn.Conn {
	var conns []*conn.Conn
	for _, e := range srv.conns {
		if e.conn != nil {
			conns = append(conns, e.conn)
		}
	}
	return conns
}

// entryLocked returns the entry of a connection key, creating an empty one. Callers hold r.mu.
func (srv *server) entryLocked(k string) *entry {
	e := srv.conns[k]
	if e == nil {
		e = &entry{key: k}
		srv.conns[k] = e
	}
	return e
}

// leadLocked is the connection whose items the server offers: the one connection under share
// project; under a keyed scope the lead so far while it offers them, else the most recently
// built one that offers them, else the most recently built one (nil: none). The items of a
// keyed server are taken to be the same on each of its connections. Callers hold r.mu.
func (srv *server) leadLocked() *entry {
	if srv.scope == v1alpha1.ShareProject || srv.scope == "" {
		return srv.conns[""]
	}
	if e := srv.conns[srv.lead]; e != nil && e.conn != nil && e.offers() {
		return e
	}
	var best *entry
	for _, e := range srv.conns {
		if e.conn != nil && (best == nil || leads(e.offers(), best.offers(), e.made, best.made, e.key, best.key)) {
			best = e
		}
	}
	if best != nil {
		srv.lead = best.key
	}
	return best
}

// offers reports whether the entry's connection (or what it carries) has items to offer.
func (e *entry) offers() bool {
	return (ServerState{HasConn: true, Conn: e.conn.Snapshot(), Carried: e.carried}).offering() != nil
}

// leads decides whether connection a leads over b: one that offers items over one that does
// not, then the more recently built, then (for a stable choice) the smaller key.
func leads(aOffers, bOffers bool, aMade, bMade time.Time, aKey, bKey string) bool {
	switch {
	case aOffers != bOffers:
		return aOffers
	case !aMade.Equal(bMade):
		return aMade.After(bMade)
	}
	return aKey < bKey
}

// scopeOf is the scope a server's slots are keyed under: the one its connections were
// built under, or before the first Connect, the one the reconciler decided (Desired.Scopes).
func (p *project) scopeOf(name string) v1alpha1.Share {
	if s := p.desired.Scopes[name]; s != "" {
		return s
	}
	return v1alpha1.ShareProject
}

// bindLocked gives session s a slot on server name: a reference on the entry of its connection
// key (created when new, unless a bound refuses it: then the slot holds why and no entry), and
// returns the entry (nil when refused). Callers hold r.mu.
func (r *Registry) bindLocked(p *project, s *Session, name string, now time.Time) *entry {
	srv := p.serverLocked(name)
	k := share.Key(srv.scope, s.who)
	e := srv.conns[k]
	if e == nil && k != "" {
		err := worktreeRefusal(name, srv.scope, r.local)
		if err == nil {
			err = refusal(name, srv.scope, len(srv.conns), p.connectionsOf(s.who.Principal), r.maxPerServer, r.maxPerPrincipal)
		}
		if err != nil {
			s.slots[name] = slot{key: k, refused: err}
			return nil
		}
	}
	e = srv.entryLocked(k)
	if k != "" {
		e.principal = s.who.Principal
	}
	s.slots[name] = slot{key: k}
	e.refs++
	e.lastMount = now
	stopTimer(e)
	return e
}

// connectionsOf counts the keyed connections (made or bound) a principal's sessions hold on
// the project. Callers hold r.mu.
func (p *project) connectionsOf(principal string) int {
	n := 0
	for _, srv := range p.servers {
		for k, e := range srv.conns {
			if k != "" && e.principal == principal {
				n++
			}
		}
	}
	return n
}

// ErrTooManyConnections is the error of a slot a bound on connections refused: its session's
// calls to that server fail with it.
var ErrTooManyConnections = errors.New("too many connections")

// refusal decides whether a new keyed connection may be made for a server that has serverConns
// of them, for a principal whose sessions hold principalConns on the project, under the
// bounds (0: none); nil when it may, else the error naming the server, its scope and the bound.
func refusal(server string, scope v1alpha1.Share, serverConns, principalConns, maxServer, maxPrincipal int) error {
	switch {
	case maxServer > 0 && serverConns >= maxServer:
		return fmt.Errorf("%w: MCP server %q (share: %s) has %d connections, the most the controller allows one server (--max-connections-per-server)",
			ErrTooManyConnections, server, scope, maxServer)
	case maxPrincipal > 0 && principalConns >= maxPrincipal:
		return fmt.Errorf("%w: MCP server %q (share: %s) is not connected for this session: its principal's sessions hold %d connections on the project, the most the controller allows one principal (--max-connections-per-principal)",
			ErrTooManyConnections, server, scope, maxPrincipal)
	}
	return nil
}

// ErrWorktreeOutsideLocal is the error of a slot on a server of share worktree when the
// controller is not in local mode: its sessions' working trees are folders of their own
// machines, not of the controller's.
var ErrWorktreeOutsideLocal = errors.New("share worktree outside local mode")

// worktreeRefusal decides whether a server's scope may key connections here: share worktree
// only in local mode (nil when it may).
func worktreeRefusal(server string, scope v1alpha1.Share, local bool) error {
	if scope != v1alpha1.ShareWorktree || local {
		return nil
	}
	return fmt.Errorf("%w: MCP server %q has share: worktree, which only a controller in local mode (--gateway-auth local, projectmcp dev) serves; set its share to session or principal",
		ErrWorktreeOutsideLocal, server)
}

// ServeLocal says whether the controller is in local mode (--gateway-auth local): its sessions
// run on its machine, so share worktree may key connections by their folders.
func (r *Registry) ServeLocal(local bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.local = local
}

// LimitConnections bounds the keyed connections (share principal, session) of one server and
// those one principal's sessions hold on a project (0: no bound). A mount past one gets a slot
// with no connection, whose calls fail naming the server, the scope and the bound.
func (r *Registry) LimitConnections(perServer, perPrincipal int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.maxPerServer, r.maxPerPrincipal = perServer, perPrincipal
}

// Default bounds on keyed connections (LimitConnections), the flags' defaults.
const (
	DefaultMaxConnectionsPerServer    = 200
	DefaultMaxConnectionsPerPrincipal = 20
)

// armIdleLocked starts the idle timer of an unused connection, or stops it while the
// connection is in use or reclaiming is off. Callers hold r.mu.
func (r *Registry) armIdleLocked(key types.NamespacedName, p *project, name string, e *entry) {
	stopTimer(e)
	if e.conn == nil || e.refs > 0 || p.desired.IdleTimeout <= 0 {
		return
	}
	c, k := e.conn, e.key
	e.idle = r.clock.AfterFunc(p.desired.IdleTimeout, func() { r.reclaim(key, name, k, c) })
}

func stopTimer(e *entry) {
	if e.idle != nil {
		e.idle.Stop()
		e.idle = nil
	}
}

// reclaim destroys an idle connection if it is still its key's connection and still unused. A
// keyed entry goes with it (a later session of its key builds it again at mount); the entry of
// share project stays, so status says Idle.
func (r *Registry) reclaim(key types.NamespacedName, name, k string, c *conn.Conn) {
	r.mu.Lock()
	p := r.projects[key]
	var srv *server
	var e *entry
	if p != nil {
		srv = p.servers[name]
	}
	if srv != nil {
		e = srv.conns[k]
	}
	if e == nil || e.conn != c || e.refs > 0 {
		r.mu.Unlock()
		return
	}
	e.conn, e.reclaimed, e.idle = nil, true, nil
	if k != "" {
		delete(srv.conns, k)
	}
	r.notifyLocked(key, p)
	r.mu.Unlock()
	r.log.V(1).Info("Reclaimed idle MCP connection", "projectmcp", key.String(), "server", c.Server(), "share", share.Label(k))
	c.Destroy()
}

// inWorktree is what a connection of share worktree is built from: the server's options, with
// a stdio server started in the working tree its key names, and that folder as its root. Under
// any other scope, or without a folder, the options are the server's own.
func inWorktree(opts conn.Options, scope v1alpha1.Share, k string) conn.Options {
	dir, ok := strings.CutPrefix(k, share.Key(v1alpha1.ShareWorktree, share.Who{}))
	if scope != v1alpha1.ShareWorktree || !ok || !filepath.IsAbs(dir) {
		return opts
	}
	if opts.Server.Stdio != nil {
		stdio := *opts.Server.Stdio
		stdio.WorkingDir = dir
		opts.Server.Stdio = &stdio
	}
	opts.Roots = []*mcp.Root{{URI: (&url.URL{Scheme: "file", Path: filepath.ToSlash(dir)}).String(), Name: filepath.Base(dir)}}
	return opts
}
