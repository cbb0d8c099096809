package gateway

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/gateway/paths"
	"github.com/dsh-dev/projectmcp/internal/registry"
)

// Logging, resource subscriptions and completion: what a session asks of the project that is
// not a call on one named item.
//
// Logging: each session sets its own level (the SDK keeps it and filters what a session
// receives); every server of the project is set to the most verbose level any session wants,
// and lowered again as the sessions that wanted it leave.
// A log message the server sends with one session's request goes to that session only; one
// sent outside any request (or on a connection that cannot tell, stdio and legacy SSE) goes
// to every stateful session whose level admits it. Each has the server's name as logger.
//
// Subscriptions: a session subscribes a URI; the connection of the server that owns it is
// subscribed once for all sessions (reference-counted in conn, carried across a repoint),
// and notifications/resources/updated reaches only the sessions that subscribed (the SDK
// keeps who; for a 2026-07-28 listen the gateway serves, its listeners do: listen.go). A
// session that ends drops its subscriptions.

// notice delivers a server's notification to the project's sessions.
func (g *Gateway) notice(key types.NamespacedName, server string, n conn.Notice) {
	g.mu.Lock()
	p := g.projects[key]
	var view *project
	if p != nil {
		view = p.views[server]
	}
	g.mu.Unlock()
	if p == nil {
		return
	}
	p.deliver(server, n)
	if view != nil {
		view.deliver(server, n)
	}
}

// deliver hands a server's notification to the endpoint's sessions.
func (p *project) deliver(server string, n conn.Notice) {
	ctx := context.Background()
	switch {
	case n.ResourceUpdated != nil:
		_ = p.server.ResourceUpdated(ctx, n.ResourceUpdated) // to its subscribers' outboxes
		p.listeners.updated(n.ResourceUpdated)               // and to the listens the gateway serves (listen.go)
	case n.Unchanged != 0:
		p.reannounce(n.Unchanged)
	case n.Log != nil:
		msg := *n.Log
		if p.only == "" { // on the project endpoint a line says which server sent it
			msg.Logger = server
			if n.Log.Logger != "" {
				msg.Logger = server + "/" + n.Log.Logger
			}
		}
		for _, ss := range p.logReaders(n) {
			_ = ss.Log(ctx, &msg) // filtered by the session's own level, then queued (outbox.go)
		}
	}
}

// logReaders are the sessions a server's log line goes to: the session whose request it came
// with, and no other; a line outside any request goes to every stateful session (each takes
// the levels it asked for). A line that came with the request of a session the gateway cannot
// write to outside that request (a 2026-07-28 one) goes to nobody.
func (p *project) logReaders(n conn.Notice) []*mcp.ServerSession {
	if n.InRequest {
		if ss := paths.SessionOf(conn.SessionOf(n.Caller)); ss != nil { // a call's caller: its session's
			return []*mcp.ServerSession{ss}
		}
		return nil
	}
	return slices.Collect(maps.Values(p.sessions.statefuls()))
}

// levelMiddleware records the level a session sets and sets the servers to the most verbose
// level any session wants.
func (p *project) levelMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		if method == "logging/setLevel" && err == nil {
			if params, ok := req.GetParams().(*mcp.SetLoggingLevelParams); ok && params != nil {
				id, _ := paths.SessionID(req)
				p.sessions.setLevel(id, params.Level)
				p.applyLevel(ctx)
			}
		}
		return res, err
	}
}

// quietest is what the servers are set to once no session asks for log lines any more: MCP
// has no level that turns a server's logging off.
const quietest = mcp.LoggingLevel("emergency")

// applyLevel sets every server to the most verbose level a session of the project wants, and
// to quietest once the last session that set one has gone (a project where no session ever
// set one is left at the servers' own).
func (p *project) applyLevel(ctx context.Context) {
	if level := p.sessions.level(); level != "" {
		p.g.opts.Registry.SetLogLevel(ctx, p.key, level)
	}
}

// instructionsMiddleware gives a session, at initialize (or server/discover), the instructions of every server it
// can use, each under its server's name (the servers' own instructions are for their own
// clients; the endpoint is the server a session talks to).
func (p *project) instructionsMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		switch r := res.(type) {
		case *mcp.InitializeResult: // 2025-11-25
			if r != nil {
				r.Instructions = p.instructions()
			}
		case *mcp.DiscoverResult: // 2026-07-28
			if r != nil {
				r.Instructions = p.instructions()
			}
		}
		return res, err
	}
}

// instructions are the endpoint's: its one server's own, or every server's under its name.
func (p *project) instructions() string {
	obs := p.observe()
	if st, ok := obs.Servers[p.only]; ok && p.only != "" {
		if !st.HasConn || st.Conn.Phase == v1alpha1.PhaseFailed {
			return ""
		}
		return st.Conn.Instructions
	}
	return instructions(obs)
}

// instructions combines the servers' instructions, in server-name order.
func instructions(obs registry.Observation) string {
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(obs.Servers)) {
		st := obs.Servers[name]
		if !st.HasConn || st.Conn.Phase == v1alpha1.PhaseFailed {
			continue
		}
		if text := strings.TrimSpace(st.Conn.Instructions); text != "" {
			fmt.Fprintf(&b, "## %s\n\n%s\n\n", name, text)
		}
	}
	return strings.TrimSpace(b.String())
}

// DefaultMaxSubscriptionsPerSession is the default of Options.MaxSubscriptionsPerSession.
const DefaultMaxSubscriptionsPerSession = 100

// subscribe subscribes a session to a URI. The session's entry is claimed before the upstream
// subscribe, so two concurrent subscribes of one session to one URI subscribe the connection
// once (a second reference would never be dropped); a failed subscribe takes the entry out,
// and one the session dropped meanwhile gives its reference back.
func (p *project) subscribe(ctx context.Context, req *mcp.SubscribeRequest) error {
	return p.subscribeAs(ctx, p.subscriber(req), req.Params.URI)
}

// subscribeAs subscribes the session o names to a URI: subscribe's, and a listen's the
// gateway serves (listen.go).
func (p *project) subscribeAs(ctx context.Context, o paths.Origin, uri string) error {
	server, ok := p.current().Owner(uri)
	if !ok {
		// The SDK's own code for a missing resource, which its compatibility setting can make
		// -32002 rather than jsonrpc.CodeInvalidParams.
		return &jsonrpc.Error{Code: mcp.CodeResourceNotFound, Message: fmt.Sprintf("no server of this project lists the resource %q", uri)} //nolint:staticcheck // see above
	}
	id := o.Session()
	if claimed, err := p.claimSubscription(id, uri); !claimed {
		return err
	}
	subscribed, err := p.paths.Subscribe(ctx, o, server, uri)
	still := p.sessions.settle(id, uri, server, err == nil)
	if err != nil {
		return paths.RequestError(ctx, err)
	}
	if !still {
		subscribed.Unsubscribe(uri)
	}
	return nil
}

// pendingSubscription marks a session's subscription whose upstream subscribe is under way:
// dropping it unsubscribes nothing (subscribe gives the reference back).
const pendingSubscription = ""

// claimSubscription makes the session's entry for uri; false when it has one already (nil
// error) or is at its bound (the error names it).
func (p *project) claimSubscription(id, uri string) (bool, error) {
	claimed, err := p.sessions.claim(id, uri, p.g.opts.MaxSubscriptionsPerSession)
	if err != nil {
		return false, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: err.Error()}
	}
	return claimed, nil
}

func (p *project) unsubscribe(_ context.Context, req *mcp.UnsubscribeRequest) error {
	p.dropSubscription(p.subscriber(req).Session(), req.Params.URI)
	return nil
}

// subscriber describes who a subscribe or unsubscribe is for. A 2026-07-28 session subscribes
// with the resourceSubscriptions of its subscriptions/listen, which the SDK's server turns into
// subscribe requests of its own that carry none of the listen's HTTP request: they are the
// listen's (listenMiddleware noted it by the request's session), so its session's.
func (p *project) subscriber(req mcp.Request) paths.Origin {
	if ss, ok := req.GetSession().(*mcp.ServerSession); ok && req.GetExtra() == nil {
		if o, ok := p.listens.Load(ss); ok {
			return o.(paths.Origin)
		}
	}
	return paths.OriginOf(req)
}

// listenMiddleware notes the origin of each subscriptions/listen by its request's session for
// as long as it runs (subscriber).
func (p *project) listenMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		ss, ok := req.GetSession().(*mcp.ServerSession)
		if method != "subscriptions/listen" || !ok {
			return next(ctx, method, req)
		}
		p.listens.Store(ss, paths.OriginOf(req))
		defer p.listens.Delete(ss)
		return next(ctx, method, req)
	}
}

// dropSubscription ends one session's subscription to a URI.
func (p *project) dropSubscription(id, uri string) {
	server, ok := p.sessions.unsubscribe(id, uri)
	if !ok || server == pendingSubscription {
		return
	}
	if c := p.g.opts.Registry.Lookup(p.key, id, server); c != nil {
		c.Unsubscribe(uri)
	}
}

// release ends a session: its subscriptions and log level go, then its slots. It makes no
// upstream request itself (the sweep runs it for every project): the unsubscribes (conn's
// chores) and the project's new log level (relevel) go out in the background, each with a
// deadline.
func (p *project) release(id string) {
	uris, leveled := p.sessions.forget(id)
	for _, uri := range uris {
		p.dropSubscription(id, uri)
	}
	p.sessions.dropSubscriptions(id)
	if leveled {
		p.relevel()
	}
	p.sessions.disown(id)
	p.g.opts.Registry.Release(p.key, id)
}

// relevel applies the project's log level in the background, within the connect timeout of
// each server: one goroutine at a time per project, which goes round again when the levels
// changed while it ran.
func (p *project) relevel() {
	if !p.sessions.relevel() {
		return
	}
	go func() {
		for p.sessions.releveled() {
			p.applyLevel(context.Background()) // each server's request is bounded (conn.applyLevel)
		}
	}()
}
