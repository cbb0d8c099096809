// Package gateway serves each project's MCP endpoint: /projects/<namespace>/<name>/mcp.
//
// Every MCP client that connects is a session of that project. The gateway mounts it through
// the registry (one slot per enabled server, waiting up to readyTimeout before the first
// tools/list is answered), projects the tools of the project's connections under stable names
// (<server>__<tool>), forwards calls to the slot's current connection, and tells live sessions
// about tool-set changes with notifications/tools/list_changed.
//
// One *mcp.Server per project carries the projected tool set, so a change is computed once and
// broadcast by the SDK to every session of the project. Both protocol revisions are served:
// 2025-11-25 clients by a stateful handler (Mcp-Session-Id; list_changed on their GET stream)
// and 2026-07-28 clients by a stateless one (list_changed through subscriptions/listen).
//
// This package is the endpoint: the front door (Gateway) and what lives as long as a session
// (project: the session table, outboxes, subscriptions and log levels, the catalog sync, the
// long-lived streams, the wait for a project and the moved answer). One request's life, from
// its facts to its answer, is paths'; who may do what is access's; HTTP/1 streams below MCP
// are httpserve's.
//
// Locks, each guarding only its own part, none held while another part's is taken unless
// said:
//   - Gateway.mu: the projects served, the keys pending a sync, closed. The registry calls
//     markDirty with its own lock held, so g.mu is never held while calling the registry.
//     rest (rest.go) counts an except-endpoint's sessions under it (sessions.mu inside g.mu).
//   - Gateway.confirmMu: makes a confirmation of a missing project a get-or-add (await.go).
//   - catalog.mu (a project's): one sync at a time, and the four projected sets; held through
//     a mount's whole projection. Requests read the published paths.Routes and raw items
//     without it (atomic pointers).
//   - sessions.mu (a project's session table): every session record, the project's log level.
//     Nothing is called while it is held but the cancel functions of a session's calls and
//     principals.mu (sessions.go), a leaf shared by the tables of a project's endpoints.
//   - outboxes.mu: each session's queue; the session's writer sends outside it.
//   - project.updates: one keyed connection's resource update sent at a time (notify.go's
//     updated); the SDK's send takes outboxes.mu and asks the registry inside it.
//   - listeners.mu: the listens the endpoint serves; listen.mu: one listen's queue;
//     detachedListen.mu and takenStream.mu: one stream's writer. Never nested.
//   - subscriptions.listens: a sync.Map, the origin of each listen the SDK serves.
//   - granter.running: one goroutine at a time decides an RBAC project's sessions' grants
//     again (the session table keeps them, under sessions.mu).
//
// The request path's per-call tables (calls waiting for input, resumable streams, servers'
// requests on calls' streams) are paths', each under a lock of its own.
package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dsh-dev/projectmcp/internal/audit"
	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/gateway/access"
	"github.com/dsh-dev/projectmcp/internal/gateway/paths"
	"github.com/dsh-dev/projectmcp/internal/httpserve"
	"github.com/dsh-dev/projectmcp/internal/metrics"
	"github.com/dsh-dev/projectmcp/internal/peer"
	"github.com/dsh-dev/projectmcp/internal/registry"
	"github.com/dsh-dev/projectmcp/internal/tracing"
)

// SessionHeader names a stateless (2026-07-28) client's session (paths.SessionHeader).
const SessionHeader = paths.SessionHeader

// Options configure a Gateway.
type Options struct {
	Registry *registry.Registry
	// BaseURL is how clients reach the gateway, e.g. http://127.0.0.1:8484; status.endpoint is
	// BaseURL + /projects/<namespace>/<name>/mcp.
	BaseURL string
	// SessionTimeout releases a stateful session that sent no request for this long.
	SessionTimeout time.Duration
	// StatelessIdle releases a stateless session that sent no request for this long.
	StatelessIdle time.Duration
	// MaxBodyBytes bounds a request body.
	MaxBodyBytes int64
	// CallTimeout bounds one forwarded request (a call, a prompt, a read, a completion): a
	// server that never answers costs the session an error after this long, not a request
	// held forever. 0 means no bound.
	CallTimeout time.Duration
	// InputTimeout bounds how long a call of a stateless session waits for the session to call
	// again with its answers when the server (speaking 2025-11-25) asked it for input: past
	// it the call is cancelled upstream and the server's request gets an error (default
	// conn.ServerRequestTimeout).
	InputTimeout time.Duration
	// MaxAwaitingInput bounds the calls of one project waiting so (default 100): past it the
	// server's request gets an error at once.
	MaxAwaitingInput int
	// MaxAwaitingInputPerSession bounds one session's share of them (default 10), so that one
	// session cannot take every place.
	MaxAwaitingInputPerSession int
	// Auth decides who may use a project; nil means local mode, whose rule is Local (loopback
	// callers of the controller's own user only, when zero).
	Auth  access.Authorizer
	Local access.LocalRule
	// OAuthIssuers are the issuers the endpoints' protected-resource metadata names (RFC
	// 9728: resourcemeta.go), and OAuthScopes the scopes a token from them needs; with Auth
	// only. They are the API server's own trusted issuers, so a token from one passes Auth.
	OAuthIssuers, OAuthScopes []string
	// Front, when set, wraps the gateway's handler: the replicas' router (internal/buckets)
	// sends a project's requests here or to the replica serving the project.
	Front func(http.Handler) http.Handler
	// Serving, when set, says whether this replica serves a project now, and the epoch of its
	// claim: a request for a project it stopped serving meanwhile is answered moved (moved.go),
	// and the states of input rounds carry the epoch (paths: input.go). Without it every project is
	// served here.
	Serving func(types.NamespacedName) (epoch int64, ok bool)
	// Audit, when set, records every use of a tool, prompt or resource (paths: audit.go);
	// AuditArguments adds the arguments of tool calls and prompts.
	Audit          *audit.Log
	AuditArguments bool
	// Objects reads ProjectMCPs (the manager's cache) and Live confirms a cache miss against
	// the API server. With them, a request for a project that exists but that the reconciler
	// has not set up yet (just created, or after a controller restart) waits for its first
	// reconcile instead of getting 404. Without them, such a request gets 404.
	Objects, Live client.Reader
	// MaxSessionsPerPrincipal bounds the sessions one principal may hold in one project at
	// once (default 100): past it, a new session is refused at its mount, so one user cannot
	// fill the project's bound (--max-sessions-per-project) and lock the others out.
	MaxSessionsPerPrincipal int
	// MaxSubscriptionsPerSession bounds the resources one session may subscribe to (zero:
	// DefaultMaxSubscriptionsPerSession). Each subscription is held on the shared connection
	// and re-made at every reconnect.
	MaxSubscriptionsPerSession int
	// MaxToolName bounds the length of the project endpoint's tool and prompt names
	// (toolname.Project's budget; zero: toolname.DefaultBudget). The reconciler must get the
	// same value, so that status names the tools sessions see.
	MaxToolName int
	// TLS, when not nil, makes the gateway serve HTTPS with it (CertFiles.TLSConfig); BaseURL
	// is then an https:// URL.
	TLS *tls.Config
	// Clock times stateless sessions' inactivity (default: real).
	Clock clock.WithTicker
	Log   logr.Logger
}

// Gateway is an http.Handler for every project's endpoint and a manager Runnable that keeps
// the projections current.
type Gateway struct {
	opts    Options
	mux     *http.ServeMux
	dirty   chan struct{}
	serving chan struct{} // closed once Serve accepts requests
	// home is the listener taken streams give their connections back to (httpserve.Take); nil
	// where the gateway serves none itself (TLS: its connections are not taken).
	home atomic.Pointer[httpserve.HomeListener]
	// readiness starts taken streams' readers when their connections have something to read
	// (httpserve.Readiness); nil where the gateway serves none itself, or cannot watch them.
	readiness atomic.Pointer[httpserve.Readiness]

	mu       sync.Mutex
	projects map[types.NamespacedName]*project
	pending  map[types.NamespacedName]bool
	closed   bool

	// Confirmations of missing projects against the API server (await.go).
	misses     *cache.LRUExpireCache // project key → struct{}: confirmed missing
	confirmMu  sync.Mutex            // makes confirmations' get-or-add atomic
	confirmers *cache.LRUExpireCache // principal → *rate.Limiter
	confirmAll *rate.Limiter         // every principal's live reads together (lookup)

	// replays bounds what every project's resumable call streams keep after their calls ended
	// (paths: budget.go): one budget for the process, whose memory they share.
	replays *paths.ReplayBudget

	// rechecks reviews again the access of the identities holding long-lived streams, one
	// pass at a time, apart from the run loop (revoked.go).
	rechecks rechecker
}

// New makes a gateway and subscribes it to the registry's changes.
func New(opts Options) *Gateway {
	if opts.SessionTimeout <= 0 {
		opts.SessionTimeout = 30 * time.Minute
	}
	if opts.StatelessIdle <= 0 {
		opts.StatelessIdle = 10 * time.Minute
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 4 << 20
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.InputTimeout <= 0 {
		opts.InputTimeout = conn.ServerRequestTimeout
	}
	if opts.MaxSubscriptionsPerSession <= 0 {
		opts.MaxSubscriptionsPerSession = DefaultMaxSubscriptionsPerSession
	}
	if opts.MaxSessionsPerPrincipal <= 0 {
		opts.MaxSessionsPerPrincipal = DefaultMaxSessionsPerPrincipal
	}
	if opts.MaxAwaitingInputPerSession <= 0 {
		opts.MaxAwaitingInputPerSession = paths.DefaultMaxAwaitingInputPerSession
	}
	if opts.MaxAwaitingInput <= 0 {
		opts.MaxAwaitingInput = paths.DefaultMaxAwaitingInput
	}
	g := &Gateway{
		opts:     opts,
		mux:      http.NewServeMux(),
		dirty:    make(chan struct{}, 1),
		serving:  make(chan struct{}),
		projects: map[types.NamespacedName]*project{},
		pending:  map[types.NamespacedName]bool{},

		misses:     cache.NewLRUExpireCacheWithClock(maxConfirmEntries, opts.Clock),
		confirmers: cache.NewLRUExpireCacheWithClock(maxConfirmEntries, opts.Clock),
		confirmAll: rate.NewLimiter(confirmAllRate, confirmAllBurst),
		replays:    paths.NewReplayBudget(paths.ReplayLimits{}),
	}
	g.mux.HandleFunc("/projects/{namespace}/{name}/mcp", g.serveProject)
	g.mux.HandleFunc("/projects/{namespace}/{name}/servers/{server}/mcp", g.serveProject)
	g.routeResourceMetadata()
	opts.Registry.Watch(g.markDirty)
	opts.Registry.OnNotice(g.notice)
	return g
}

// SetBaseURL sets the URL clients reach the gateway at, once its listener is bound.
func (g *Gateway) SetBaseURL(u string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.opts.BaseURL = u
}

// Endpoint is the URL sessions of a project use.
func (g *Gateway) Endpoint(key types.NamespacedName) string {
	return g.baseURL() + Path(key)
}

// Path is a project's endpoint path.
func Path(key types.NamespacedName) string {
	return fmt.Sprintf("/projects/%s/%s/mcp", key.Namespace, key.Name)
}

// ServerPath is the path of a project's per-server endpoint, which serves one server's tools,
// prompts and resources under the names the server gives them.
func ServerPath(key types.NamespacedName, server string) string {
	return fmt.Sprintf("/projects/%s/%s/servers/%s/mcp", key.Namespace, key.Name, server)
}

// markDirty is the registry watcher: it only records the key (the registry's lock is held).
func (g *Gateway) markDirty(key types.NamespacedName) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.projects[key] == nil {
		return // nobody has connected to this project yet: nothing to keep current
	}
	g.pending[key] = true
	select {
	case g.dirty <- struct{}{}:
	default:
	}
}

// Serve serves the gateway on ln until ctx ends, keeping projections current and expiring idle
// stateless sessions; on the way out it closes every session and the listener.
func (g *Gateway) Serve(ctx context.Context, ln net.Listener) error {
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.run(ctx)
	}()
	err := g.listen(ctx, ln)
	<-done
	return err
}

// Serving is closed once Serve is answering requests.
func (g *Gateway) Serving() <-chan struct{} { return g.serving }

// run keeps projections current and expires idle stateless sessions until ctx ends.
func (g *Gateway) run(ctx context.Context) {
	sweep := g.opts.Clock.NewTicker(min(g.opts.StatelessIdle/4, g.opts.SessionTimeout/4, time.Minute))
	defer sweep.Stop()
	defer g.rechecks.wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-g.dirty:
			g.syncPending()
		case now := <-sweep.C():
			projects := g.all()
			for _, p := range projects {
				p.expireStateless(now)
				p.expireStateful(now)
				p.reapClosed()
				p.endRevoked()     // revoked.go
				p.grants.regrant() // grants older than grantsFresh, in the background
			}
			g.recheckHolders(ctx, projects) // for the next sweep's endRevoked
		}
	}
}

// syncPending re-projects the projects the registry reported changed, and closes the
// endpoints of projects that were deleted (or deleted and created again) since.
//
// Lock order: the registry calls markDirty with its lock held, so g.mu is never held while
// calling into the registry.
func (g *Gateway) syncPending() {
	g.mu.Lock()
	keys := slices.Collect(maps.Keys(g.pending))
	clear(g.pending)
	g.mu.Unlock()
	for _, key := range keys {
		incarnation := g.opts.Registry.Incarnation(key)
		g.mu.Lock()
		p := g.projects[key]
		stale := p != nil && p.incarnation != incarnation // deleted (0), or deleted and created again
		if stale {
			delete(g.projects, key)
		}
		g.mu.Unlock()
		switch {
		case stale:
			p.close()
		case p != nil:
			p.sync()
			p.grants.regrant() // decided for the routes just published, in the background
			g.dropViews(p)
			for _, v := range g.viewsOf(p) {
				v.sync()
				v.grants.regrant()
			}
		}
	}
}

// all returns every endpoint: the projects', their per-server ones and their except-endpoints.
func (g *Gateway) all() []*project {
	g.mu.Lock()
	defer g.mu.Unlock()
	projects := make([]*project, 0, len(g.projects))
	for _, p := range g.projects {
		projects = append(projects, p)
		for _, v := range p.views {
			projects = append(projects, v)
		}
		for _, v := range p.rests {
			projects = append(projects, v)
		}
	}
	return projects
}

// viewsOf returns a project endpoint's per-server endpoints and its except-endpoints.
func (g *Gateway) viewsOf(p *project) []*project {
	g.mu.Lock()
	defer g.mu.Unlock()
	views := make([]*project, 0, len(p.views)+len(p.rests))
	for _, v := range p.views {
		views = append(views, v)
	}
	for _, v := range p.rests {
		views = append(views, v)
	}
	return views
}

// dropViews closes the per-server endpoints of the servers a project no longer has (their
// server left the spec, and the registry retired it): such an endpoint answers 404 from then
// on, as a name the project never had does, and its sessions end as a removed project's do.
// Without it, a project whose servers are renamed over and over would keep an endpoint (an
// SDK server, its sessions and catalogs) for every name it ever had.
func (g *Gateway) dropViews(p *project) {
	g.mu.Lock()
	none := len(p.views) == 0
	g.mu.Unlock()
	if none {
		return // the common case: no look at the registry
	}
	servers := g.opts.Registry.ObserveServers(p.key).Servers
	g.mu.Lock()
	gone := departed(slices.Collect(maps.Keys(p.views)), servers)
	closing := make([]*project, 0, len(gone))
	for _, name := range gone {
		closing = append(closing, p.views[name])
		delete(p.views, name)
	}
	g.mu.Unlock()
	for _, v := range closing {
		v.close()
	}
}

// departed are the views' servers that the project's servers no longer include.
func departed[S any](views []string, servers map[string]S) []string {
	var gone []string
	for _, name := range views {
		if _, ok := servers[name]; !ok {
			gone = append(gone, name)
		}
	}
	return gone
}

func (g *Gateway) shutdown() {
	g.mu.Lock()
	g.closed = true
	projects := g.projects
	g.projects = map[types.NamespacedName]*project{}
	g.mu.Unlock()
	for _, p := range projects {
		p.close()
	}
}

// ServeHTTP checks access, bounds the body and routes to the project's endpoint; every request
// is counted by response code and auth decision.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sw := &statusWriter{ResponseWriter: w, auth: metrics.AuthNone}
	defer func() { metrics.GatewayRequest(sw.status(), sw.auth) }()
	g.mux.ServeHTTP(sw, r)
}

func (g *Gateway) serveProject(w http.ResponseWriter, r *http.Request) {
	key := types.NamespacedName{Namespace: r.PathValue("namespace"), Name: r.PathValue("name")}
	// A name no object can have is answered before any access review: it cannot exist, and
	// it must not reach the auth caches or messages.
	if !g.validKey(key) {
		http.Error(w, "no such ProjectMCP: the path must be /projects/<namespace>/<name>/mcp with valid object names", http.StatusNotFound)
		return
	}
	if g.moved(key) { // the bucket was handed off since the Router looked
		movedAway(w, key)
		return
	}
	principal, status, msg := g.authorize(r, key)
	noteAuth(w, g.opts.Auth == nil, status)
	if status == http.StatusUnauthorized {
		g.challenge(w, r)
	}
	if status != 0 {
		paths.Refuse(w, msg, status)
		return
	}
	who := access.NewIdentity(principal, r)
	access.ToSDK(r.Header, who) // whatever the client sent in its headers is overwritten
	if v := r.Header.Get(SessionHeader); v != "" && !paths.ValidSessionName(v) {
		http.Error(w, fmt.Sprintf("%s must be 1 to %d characters of A-Z a-z 0-9 . _ - : @", SessionHeader, paths.MaxSessionName), http.StatusBadRequest)
		return
	}
	p := g.project(key)
	if p == nil {
		var status int
		var msg string
		if p, status, msg = g.awaitProject(r, principal, key); p == nil && status == statusMoved {
			movedAway(w, key)
			return
		} else if p == nil {
			paths.Refuse(w, msg, status)
			return
		}
	}
	if server := r.PathValue("server"); server != "" {
		if p = g.view(p, server); p == nil {
			http.Error(w, fmt.Sprintf("ProjectMCP %s has no server %q", key, server), http.StatusNotFound)
			return
		}
	} else if p = g.restOf(w, r, p); p == nil {
		return
	}
	if r.Body != nil {
		r.Body = http.MaxBytesReader(unwrapped(w), r.Body, g.opts.MaxBodyBytes)
	}
	if r.Method == http.MethodPost && !readBody(w, r) {
		return
	}
	if ctx := tracing.FromHeaders(r.Context(), r.Header); ctx != r.Context() { // a session's traceparent
		r = r.WithContext(ctx)
	}
	p.serveHTTP(w, r, who)
}

// validKey reports whether key can name an object. A key the gateway serves already is one,
// and its check then costs a map lookup, not the two regular expressions a request's path
// would otherwise be matched against on every call.
func (g *Gateway) validKey(key types.NamespacedName) bool {
	g.mu.Lock()
	_, served := g.projects[key]
	g.mu.Unlock()
	return served || (len(validation.IsDNS1123Label(key.Namespace)) == 0 && len(validation.IsDNS1123Subdomain(key.Name)) == 0)
}

// BodyReadTimeout bounds reading one request's body. A client that sends its body slowly, or
// never, then costs a goroutine and a connection for that long, and holds no place of its
// session's share of a connection (the body is read before the request is admitted).
var BodyReadTimeout = 30 * time.Second

// readBody reads a POST's body within BodyReadTimeout and gives the request a copy; false
// when it has answered instead (408 for a body that did not come in time, 413 for one over
// MaxBodyBytes).
func readBody(w http.ResponseWriter, r *http.Request) bool {
	rc := http.NewResponseController(unwrapped(w))
	_ = rc.SetReadDeadline(time.Now().Add(BodyReadTimeout))
	body, err := readAll(r)
	_ = rc.SetReadDeadline(time.Time{}) // also the server's own read past the body, which watches for the client's going
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
		return false
	case errors.Is(err, os.ErrDeadlineExceeded):
		w.Header().Set("Connection", "close")
		http.Error(w, fmt.Sprintf("the request body did not arrive within %s", BodyReadTimeout), http.StatusRequestTimeout)
		return false
	case err != nil:
		http.Error(w, "reading the request body: "+err.Error(), http.StatusBadRequest)
		return false
	}
	httpserve.KeepBody(r, body)
	return true
}

// readAll reads a request's body: in one allocation of its size when it declares one (the
// body's reader, a MaxBytesReader, fails one over the bound as it reads).
func readAll(r *http.Request) ([]byte, error) {
	if n := r.ContentLength; n > 0 && n <= maxDeclaredBody {
		body := make([]byte, n)
		if _, err := io.ReadFull(r.Body, body); err != nil {
			return nil, err
		}
		return body, nil
	}
	return io.ReadAll(r.Body)
}

// maxDeclaredBody bounds what readAll allocates before reading on a body's word.
const maxDeclaredBody = 1 << 20

// view returns a project's per-server endpoint for one of its servers, creating it; nil for a
// name the project's spec does not have.
func (g *Gateway) view(p *project, server string) *project {
	g.mu.Lock()
	v := p.views[server]
	g.mu.Unlock()
	if v != nil {
		return v // the common case: no look at the registry on the request's path
	}
	if _, ok := g.opts.Registry.ObserveServers(p.key).Servers[server]; !ok {
		return nil
	}
	g.mu.Lock()
	v = p.views[server]
	created := v == nil && !g.closed
	if created {
		v = p.newView(server)
		p.views[server] = v
	}
	g.mu.Unlock()
	if created {
		// The server may have left the spec between the look above and the endpoint's
		// making, and the sync that dropped the project's views then did not see this one.
		g.dropViews(p)
		if !v.closed.Load() {
			v.sync()
		}
	}
	if v == nil || v.closed.Load() {
		return nil
	}
	return v
}

// project returns the project's endpoint, creating it for a project the registry knows.
func (g *Gateway) project(key types.NamespacedName) *project {
	incarnation := g.opts.Registry.Incarnation(key)
	if incarnation == 0 {
		return nil
	}
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	p := g.projects[key]
	created := false
	if p == nil || p.incarnation != incarnation {
		if p != nil { // a recreated project: the old one's sessions are gone from the registry
			go p.close()
		}
		p = newProject(g, key, incarnation, "")
		g.projects[key] = p
		created = true
	}
	g.mu.Unlock()
	if created {
		p.sync()
	}
	return p
}

func (g *Gateway) listen(ctx context.Context, ln net.Listener) error {
	// No ReadTimeout: its deadline stays on the connection while the handler runs and would
	// cancel long calls and the GET streams that carry list_changed.
	var handler http.Handler = g
	if g.opts.Front != nil {
		handler = g.opts.Front(g)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
	// Whose process is calling, when it is on this machine: local mode's principal, and
	// whether a replica's proxied request is believed (internal/peer).
	srv.ConnContext = peer.Context
	var serve func() error
	var home *httpserve.HomeListener
	if g.opts.TLS != nil {
		srv.TLSConfig = g.opts.TLS
		serve = func() error { return srv.ServeTLS(ln, "", "") } // the certificate comes from TLS
	} else {
		home = httpserve.NewHomeListener(ln) // taken streams' connections come back here (httpserve.Take)
		g.home.Store(home)
		srv.ConnState = home.Begun
		if rd, err := httpserve.NewReadiness(); err != nil {
			g.opts.Log.Error(err, "Watching taken streams' connections; each has a reader of its own")
		} else if rd != nil {
			g.readiness.Store(rd)
			defer rd.Close() // once the server has stopped: the streams still open get their readers
		}
		serve = func() error { return srv.Serve(home) }
	}
	errc := make(chan error, 1)
	go func() { errc <- serve() }()
	close(g.serving)
	select {
	case err := <-errc:
		g.shutdown()
		g.closeAudit()
		return err
	case <-ctx.Done():
	}
	g.shutdown() // close MCP sessions first: their GET streams would hold Shutdown open
	if home != nil {
		// No connection is given back from now on, and those given back that wait for a
		// request close now, as Shutdown closes idle ones (httpserve.Take).
		_ = home.Close()
		home.CloseWaiting()
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	g.closeAudit()
	return nil
}

// giveBack gives a taken stream's connection back to the gateway's HTTP server for its next
// request; false where there is none to give it to (the caller closes it).
func (g *Gateway) giveBack(c net.Conn) bool {
	home := g.home.Load()
	return home != nil && home.Give(c)
}

// closeAudit writes out the audit log, whose only writer the gateway is, once it serves no
// more requests.
func (g *Gateway) closeAudit() {
	if g.opts.Audit != nil {
		if err := g.opts.Audit.Close(); err != nil {
			g.opts.Log.Error(err, "Closing the audit log")
		}
	}
}
