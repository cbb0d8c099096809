package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/gateway/access"
	"github.com/dsh-dev/projectmcp/internal/gateway/paths"
	"github.com/dsh-dev/projectmcp/internal/httpserve"
	"github.com/dsh-dev/projectmcp/internal/recovery"
	"github.com/dsh-dev/projectmcp/internal/registry"
	"github.com/dsh-dev/projectmcp/internal/revision"
	"github.com/dsh-dev/projectmcp/internal/share"
)

// project is one project's endpoint: an MCP server whose tools are the projection of the
// project's connections.
type project struct {
	g           *Gateway
	key         types.NamespacedName
	incarnation uint64 // the registry's incarnation of the project this endpoint serves
	// only is the server a per-server endpoint serves, under its own names; "" for the
	// project endpoint, which serves every server under projected names.
	only string
	// views are the project endpoint's per-server endpoints, by server (under g.mu); parent is
	// a per-server endpoint's project endpoint (nil for that one).
	views  map[string]*project
	parent *project
	// rests are the project endpoint's except-endpoints, by their canonical except list
	// (under g.mu; rest.go); except is the set such an endpoint leaves out (nil for the others).
	rests  map[string]*project
	except map[string]bool
	server *mcp.Server
	// serverInfo is the endpoint's implementation, as a 2026-07-28 result's _meta names it.
	serverInfo json.RawMessage
	stateful   http.Handler
	stateless  http.Handler

	cat catalog // what the endpoint serves (catalog.go)

	sessions sessions // the endpoint's sessions (sessions.go)
	outboxes outboxes // what waits for each session's own writer (outbox.go)
	// paths is the endpoint's request path, with what its calls keep (inputs, replays, asks).
	paths *paths.Paths
	subs  subscriptions // the sessions' resource subscriptions (subscriptions.go)
	// listeners are the subscriptions/listen streams the gateway serves itself (listen.go).
	listeners listeners
	grants    granter // decides the sessions' grants on servers, on an RBAC project (grants.go)
	// closed is set once close has begun: a per-server endpoint dropped while a request
	// held it answers that request 404, and a mount that raced the close is undone (mount).
	closed atomic.Bool
	// updates sends one keyed connection's resource update at a time, and updateOnly names
	// the sessions it goes to while it is sent (notify.go's updated).
	updates    sync.Mutex
	updateOnly atomic.Pointer[func(ref string) bool]
}

func newProject(g *Gateway, key types.NamespacedName, incarnation uint64, only string) *project {
	p := &project{
		g: g, key: key, incarnation: incarnation, only: only, views: map[string]*project{}, rests: map[string]*project{},
		cat: catalog{tools: map[string]projected{}, prompts: map[string]projected{},
			resources: map[string]projected{}, templates: map[string]projected{}},
	}
	p.grants.p = p
	p.sessions.principals = &principals{}
	impl := &mcp.Implementation{Name: "projectmcp", Title: "projectmcp " + key.String(), Version: "v1alpha1"}
	p.serverInfo, _ = json.Marshal(impl) // strings only: cannot fail
	p.paths = paths.New(seam{p}, paths.Options{Key: key, ServerInfo: p.serverInfo, Log: g.opts.Log, Clock: g.opts.Clock,
		CallTimeout: g.opts.CallTimeout, InputTimeout: g.opts.InputTimeout, MaxAwaitingInput: g.opts.MaxAwaitingInput,
		MaxAwaitingInputPerSession: g.opts.MaxAwaitingInputPerSession, Audit: g.opts.Audit, AuditArguments: g.opts.AuditArguments,
		Replays: g.replays})
	p.subs = subscriptions{sessions: &p.sessions, paths: p.paths, routes: p.current, max: g.opts.MaxSubscriptionsPerSession,
		lookup: func(session, server string) *conn.Conn { return g.opts.Registry.Lookup(key, session, server) }}
	p.server = mcp.NewServer(impl,
		&mcp.ServerOptions{
			// The sets may start empty and grow as servers come up: the capabilities must be
			// declared up front.
			Capabilities: &mcp.ServerCapabilities{
				Tools:       &mcp.ToolCapabilities{ListChanged: true},
				Prompts:     &mcp.PromptCapabilities{ListChanged: true},
				Resources:   &mcp.ResourceCapabilities{ListChanged: true, Subscribe: true},
				Logging:     &mcp.LoggingCapabilities{},
				Completions: &mcp.CompletionCapabilities{},
			},
			// No RootsListChangedHandler: a session's roots stay its own (conn.roots).
			SubscribeHandler:   p.subs.subscribe,
			UnsubscribeHandler: p.subs.unsubscribe,
			CompletionHandler:  p.paths.Complete,
			SetCacheable:       p.cacheHints,
		})
	p.server.AddReceivingMiddleware(recovery.Middleware(g.opts.Log), p.mountMiddleware, p.levelMiddleware, p.instructionsMiddleware, p.listMiddleware, p.itemsMiddleware, p.paths.SealStates, p.subs.listenMiddleware)
	p.server.AddSendingMiddleware(p.queueNotices, p.countSent)
	getServer := func(*http.Request) *mcp.Server { return p.server }
	// No SessionTimeout here: the SDK counts only the requests it handles, and the forward path
	// answers calls without it, so the project times sessions out itself (expireStateful).
	p.stateful = mcp.NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{
		MaxRequestBodyBytes: g.opts.MaxBodyBytes,
	})
	// A 2026-07-28 request is its whole exchange: a client that goes away has cancelled it,
	// and the call to the server ends with it, on the typed path as on the forward path.
	p.stateless = mcp.NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{
		Stateless: true, MaxRequestBodyBytes: g.opts.MaxBodyBytes, PropagateRequestCancellation: true,
	})
	return p
}

// newView makes a per-server endpoint of the project endpoint p, for server. Its sessions count
// toward their principals' bound together with every other endpoint's of the project.
func (p *project) newView(server string) *project {
	v := newProject(p.g, p.key, p.incarnation, server)
	v.sessions.principals = p.sessions.principals
	v.parent = p
	return v
}

// serveHTTP routes 2026-07-28 requests to the stateless handler and everything else
// (2025-11-25 and older, which send no such version or an older one) to the stateful one. A
// request naming a session another principal owns gets 404, whatever its method.
func (p *project) serveHTTP(rw http.ResponseWriter, r *http.Request, who access.Identity) {
	if p.g.moved(p.key) { // handed off while the body was read: the next replica answers
		movedAway(rw, p.key)
		return
	}
	if p.only != "" && p.closed.Load() { // its server left the spec while the body was read
		http.Error(rw, fmt.Sprintf("ProjectMCP %s has no server %q", p.key, p.only), http.StatusNotFound)
		return
	}
	dw := httpserve.NewDeadlineWriter(rw) // no write to a session that stops reading blocks for long
	defer dw.Disarm()
	var w http.ResponseWriter = dw
	sid := r.Header.Get("Mcp-Session-Id")
	if revision.Of(r.Header.Get("Mcp-Protocol-Version")) >= revision.Stateless && sid == "" {
		if r.Method == http.MethodPost && r.Header.Get("Mcp-Method") == paths.MethodListen && p.serveListen(w, r, who) {
			return
		}
		if r.Method == http.MethodPost && p.paths.ServeForward(w, r, "", who) {
			return
		}
		p.stateless.ServeHTTP(w, r)
		return
	}
	ref := ""
	if sid != "" {
		ref = access.SessionRef(sid)
		if p.sessions.foreign(ref, who.Principal) {
			paths.NotFound(w)
			return
		}
	}
	if sid != "" && r.Method == http.MethodDelete {
		// The SDK closes the session and answers 204; then it is released here (ended).
		ss := p.sessions.stateful(ref)
		dw := &statusWriter{ResponseWriter: w}
		p.stateful.ServeHTTP(dw, r)
		if ss != nil && dw.code == http.StatusNoContent {
			p.ended(ref, ss)
		}
		return
	}
	if sid != "" && r.Method == http.MethodGet && paths.IsReplay(r.Header.Get("Last-Event-ID")) {
		if !p.sessions.enter(ref, who) {
			paths.NotFound(w)
			return
		}
		defer p.leave(ref)
		p.paths.Resume(w, r, ref)
		return
	}
	if sid != "" && r.Method == http.MethodPost {
		if !p.sessions.enter(ref, who) {
			p.stateful.ServeHTTP(w, r) // not a session of ours: the SDK answers (404)
			return
		}
		defer p.leave(ref)
		if p.paths.ServeForward(w, r, ref, who) {
			return
		}
	}
	if sid != "" && r.Method == http.MethodGet {
		p.serveGET(w, r)
		return
	}
	if sid == "" && r.Method == http.MethodPost { // an initialize: a session that declares Tasks is told they are carried
		aw, finish := paths.AnnounceTasks(w, r)
		defer finish()
		w = aw
	}
	p.stateful.ServeHTTP(w, r)
}

func (p *project) leave(ref string) { p.sessions.leave(ref, p.g.opts.Clock.Now()) }

// expireStateful closes stateful sessions that have had no request for SessionTimeout (a
// request in flight keeps a session alive, as the SDK's own timeout does), and releases them.
func (p *project) expireStateful(now time.Time) {
	for ref, ss := range p.sessions.idle(now, p.g.opts.SessionTimeout) {
		_ = ss.Close()
		p.ended(ref, ss)
	}
}

// mountMiddleware mounts a session before its first request is answered: for a stateful
// client at initialize, for a stateless one at its first request. The mount waits up to
// readyTimeout, then the projection is brought up to date, so the first tools/list already
// has every ready server's tools. A mount fails the request only when it is refused (mount).
func (p *project) mountMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		id, stateless := paths.SessionID(req)
		switch {
		case stateless:
			if err := p.mountStateless(ctx, id, access.FromSDK(req.GetExtra().Header), func() string { return clientName(req) }); err != nil {
				return nil, err
			}
		case method == "initialize":
			ss := req.GetSession().(*mcp.ServerSession)
			if err := p.mount(ctx, id, access.FromSDK(req.GetExtra().Header), clientName(req)); err != nil {
				return nil, err // the SDK closes a session whose initialize failed
			}
			p.sessions.initialized(id, ss, p.g.opts.Clock.Now())
			res, err := next(ctx, method, req)
			if ss.InitializeParams() == nil {
				p.ended(id, ss) // the SDK closes a session whose initialize failed, once this POST ends
			}
			return res, err
		}
		return next(ctx, method, req)
	}
}

// mountStateless mounts a stateless session at its request (client names it, when it is not
// mounted yet), and marks it busy. Mount is idempotent; asking the registry (not the session
// table) also heals a session released by expiry while a request was arriving.
func (p *project) mountStateless(ctx context.Context, id string, who access.Identity, client func() string) error {
	switch {
	case !p.g.opts.Registry.Mounted(p.key, id):
		if err := p.mount(ctx, id, who, client()); err != nil {
			return err
		}
	case !p.grants.admitted(id):
		// Mounted through another endpoint of the project: this one admits it first.
		if err := p.admitShared(ctx, id, who); err != nil {
			return err
		}
	case p.g.opts.Registry.AwaitStarted(ctx, p.key, id):
		// Within its mount window: the servers its first request may be waiting for, and the
		// projection of what they offer now (the gateway's own sync of a server just started
		// may not have run yet; p.sync does nothing when nothing changed).
		p.sync()
	}
	p.sessions.identify(id, who)
	p.sessions.touch(id, p.g.opts.Clock.Now())
	return nil
}

// mount binds a session (by its ref) to its principal and to the project's slots. The
// sessions bounds (the principal's and the project's) refuse it, and so does a per-server
// endpoint of an RBAC project when the identity holds no grant on its server (admit); a mount
// that fails otherwise never fails the request (the session's servers come later).
func (p *project) mount(ctx context.Context, id string, who access.Identity, client string) error {
	ctx, end := paths.Span(ctx, p.key, "projectmcp.mount", id, nil)
	if err := p.sessions.own(id, who.Principal, p.g.opts.MaxSessionsPerPrincipal, p.key.String()); err != nil {
		end(err)
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: err.Error()}
	}
	p.sessions.identify(id, who)
	_, err := p.g.opts.Registry.Mount(ctx, p.key, share.Who{Principal: who.Principal, Session: id}, client)
	switch {
	case errors.Is(err, registry.ErrTooManySessions):
		end(err)
		p.sessions.disown(id)
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: err.Error()}
	case err != nil:
		end(err)
		p.g.opts.Log.V(1).Info("Mount failed", "projectmcp", p.key.String(), "session", id, "error", err.Error())
		return nil
	}
	if p.closed.Load() {
		// Closed while mounting: close may have gone through the session table before this
		// mount reached the registry, so the mount is undone here.
		end(errEndpointClosed)
		p.release(id)
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: errEndpointClosed.Error()}
	}
	p.sync()
	// Decided once the server's items are listed: a grant of one of them is a grant on it.
	if err := p.grants.admit(ctx, id, who); err != nil {
		end(err)
		p.release(id)
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: err.Error()}
	}
	end(nil)
	return nil
}

// admitShared admits to a per-server endpoint of an RBAC project a stateless session that
// another endpoint of the project mounted (its slots stay that mount's).
func (p *project) admitShared(ctx context.Context, id string, who access.Identity) error {
	if err := p.sessions.own(id, who.Principal, p.g.opts.MaxSessionsPerPrincipal, p.key.String()); err != nil {
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: err.Error()}
	}
	p.sessions.identify(id, who)
	if err := p.grants.admit(ctx, id, who); err != nil {
		p.sessions.disown(id)
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: err.Error()}
	}
	return nil
}

// ended releases a stateful session that has closed, once: the paths that close one call it
// (DELETE in serveHTTP, expireStateful, close, a failed initialize in mountMiddleware), and
// reapClosed finds any other.
//
// No goroutine waits on the session for this: with one per stateful session (ss.Wait), 10,000
// sessions held 5,000 goroutines that only waited (about 10 MiB of stacks and descriptors),
// and the SDK offers no hook on a session's end. Only the SDK's handler and this package close
// a session (the gateway sets neither the SDK's SessionTimeout nor KeepAlive), so every close
// is one the gateway sees.
func (p *project) ended(id string, ss *mcp.ServerSession) {
	if !p.sessions.end(id, ss) {
		return // released already, or a different session under the same id
	}
	p.paths.Ended(id)
	p.release(id)
}

// reapClosed releases stateful sessions the SDK has let go of (a close no path of ours
// saw); the sweep runs it. A session leaves the server's list only once it has closed.
func (p *project) reapClosed() {
	live := map[*mcp.ServerSession]bool{}
	for ss := range p.server.Sessions() {
		live[ss] = true
	}
	for id, ss := range p.sessions.statefuls() {
		if !live[ss] {
			p.ended(id, ss)
		}
	}
}

// clientName is "name/version" from initialize, or the request's clientInfo on 2026-07-28,
// cut to maxSessionName bytes (it goes into status).
func clientName(req mcp.Request) string {
	return paths.Bounded(announcedName(req))
}

func announcedName(req mcp.Request) string {
	if ip, ok := req.GetParams().(*mcp.InitializeParams); ok && ip != nil && ip.ClientInfo != nil {
		return ip.ClientInfo.Name + "/" + ip.ClientInfo.Version
	}
	if m := paths.MetaOf(req); m != nil {
		if info, ok := m[mcp.MetaKeyClientInfo].(map[string]any); ok {
			name, _ := info["name"].(string)
			version, _ := info["version"].(string)
			return name + "/" + version
		}
	}
	return ""
}

// expireStateless releases stateless sessions idle for longer than StatelessIdle.
func (p *project) expireStateless(now time.Time) {
	for _, id := range p.sessions.stale(now, p.g.opts.StatelessIdle, false) {
		p.release(id)
	}
}

// errEndpointClosed refuses a mount on an endpoint closed meanwhile.
var errEndpointClosed = errors.New("projectmcp: this endpoint was closed (its project or server is gone)")

// close ends every session of the endpoint: the gateway is stopping, the project was deleted
// or made anew, or (a per-server endpoint) its server left the spec.
func (p *project) close() {
	p.closed.Store(true)
	for _, v := range p.g.viewsOf(p) {
		v.close()
	}
	p.listeners.close() // each listen writes its result and ends
	sessions := p.sessions.statefuls()
	stateless := p.sessions.stale(time.Time{}, 0, true)
	p.paths.Close()
	for id, ss := range sessions {
		_ = ss.Close()
		p.ended(id, ss)
	}
	for _, id := range stateless {
		p.release(id)
	}
}

// signature identifies the connection states a projection depends on: every change of a
// connection's phase or tools bumps its generation.
func signature(servers map[string]registry.ServerState) string {
	parts := make([]string, 0, len(servers))
	for name, st := range servers {
		parts = append(parts, fmt.Sprintf("%s/%s/%d", name, st.Conn.ID, st.Conn.Generation))
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}
