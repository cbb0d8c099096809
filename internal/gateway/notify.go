package gateway

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/gateway/access"
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
// On an RBAC project, a server's lines outside requests, its level and its instructions are
// for the sessions whose identity holds a grant on it (grants.go): each server is set to the
// most verbose level of those sessions alone.
//
// Subscriptions are subscriptions.go's.

// notice delivers a server's notification to the project's sessions.
func (g *Gateway) notice(key types.NamespacedName, server string, n registry.Notice) {
	g.mu.Lock()
	p := g.projects[key]
	var views []*project
	if p != nil {
		if v := p.views[server]; v != nil {
			views = append(views, v)
		}
		for _, v := range p.rests {
			if !v.excepts(server) {
				views = append(views, v)
			}
		}
	}
	g.mu.Unlock()
	if p == nil {
		return
	}
	p.deliver(server, n)
	for _, v := range views {
		v.deliver(server, n)
	}
}

// deliver hands a server's notification to the endpoint's sessions: a keyed connection's
// (share principal, session) to the sessions bound to it alone.
func (p *project) deliver(server string, n registry.Notice) {
	ctx := context.Background()
	switch {
	case n.ResourceUpdated != nil:
		p.updated(ctx, server, n)
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
		for _, ss := range p.logReaders(server, n.Notice) {
			if n.Conn != "" && !p.bound(server, n.Conn, access.SessionRef(ss.ID())) {
				continue // another connection's session
			}
			_ = ss.Log(ctx, &msg) // filtered by the session's own level, then queued (outbox.go)
		}
	}
}

// logReaders are the sessions a server's log line goes to: the session whose request it came
// with, and no other; a line outside any request goes to every stateful session (each takes
// the levels it asked for), on an RBAC project to those that hold a grant on the server, as
// last decided (this goroutine serves every session: it asks for no review). A line that came
// with the request of a session the gateway cannot write to outside that request (a
// 2026-07-28 one) goes to nobody. A request's own line needs no grant of its own: the request
// was admitted on an item of that server (paths' admit).
func (p *project) logReaders(server string, n conn.Notice) []*mcp.ServerSession {
	if n.InRequest {
		if ss := paths.SessionOf(conn.SessionOf(n.Caller)); ss != nil { // a call's caller: its session's
			return []*mcp.ServerSession{ss}
		}
		return nil
	}
	if _, on := p.rbacOn(); on {
		holders, stale := p.sessions.holders(server, p.g.opts.Clock.Now(), grantsFresh)
		if stale {
			p.grants.regrant() // in the background
		}
		return holders
	}
	return slices.Collect(maps.Values(p.sessions.statefuls()))
}

// levelMiddleware records the level a session sets and sets the servers to the most verbose
// level any session wants (on an RBAC project, each server to the most verbose level of the
// sessions that hold a grant on it, so the session's grants are decided first).
func (p *project) levelMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		if method == "logging/setLevel" && err == nil {
			if params, ok := req.GetParams().(*mcp.SetLoggingLevelParams); ok && params != nil {
				id, _ := paths.SessionID(req)
				p.sessions.setLevel(id, params.Level)
				if ia, on := p.rbacOn(); on {
					p.grants.grantsOf(ctx, ia, id, access.FromSDK(req.GetExtra().Header))
				}
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
// set one is left at the servers' own). On an RBAC project each server gets its own level,
// from the sessions that hold a grant on it alone.
func (p *project) applyLevel(ctx context.Context) {
	if _, on := p.rbacOn(); on {
		for server, level := range p.sessions.levels(p.grants.serverNames()) {
			if level != "" {
				p.g.opts.Registry.SetServerLogLevel(ctx, p.key, server, level)
			}
		}
		return
	}
	if level := p.sessions.level(); level != "" {
		p.g.opts.Registry.SetLogLevel(ctx, p.key, level)
	}
}

// instructionsMiddleware gives a session, at initialize (or server/discover), the instructions of every server it
// can use, each under its server's name (the servers' own instructions are for their own
// clients; the endpoint is the server a session talks to). On an RBAC project, the servers it
// can use are those its identity holds a grant on.
func (p *project) instructionsMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		switch r := res.(type) {
		case *mcp.InitializeResult: // 2025-11-25
			if r != nil {
				r.Instructions = p.instructions(p.usable(ctx, req))
			}
		case *mcp.DiscoverResult: // 2026-07-28
			if r != nil {
				r.Instructions = p.instructions(p.usable(ctx, req))
			}
		}
		return res, err
	}
}

// usable reports which servers the session of req can use: every one, or on an RBAC project
// those its identity holds a grant on.
func (p *project) usable(ctx context.Context, req mcp.Request) func(server string) bool {
	ia, on := p.rbacOn()
	if !on {
		return func(string) bool { return true }
	}
	id, _ := paths.SessionID(req)
	grants := p.grants.grantsOf(ctx, ia, id, access.FromSDK(req.GetExtra().Header))
	return func(server string) bool { return grants[server] }
}

// instructions are the endpoint's: its one server's own, or every server's under its name; of
// the servers usable alone.
func (p *project) instructions(usable func(server string) bool) string {
	obs := p.observe()
	if st, ok := obs.Servers[p.only]; ok && p.only != "" {
		if !st.HasConn || st.Conn.Phase == v1alpha1.PhaseFailed || !usable(p.only) {
			return ""
		}
		return st.Conn.Instructions
	}
	return instructions(obs, usable)
}

// instructions combines the usable servers' instructions, in server-name order.
func instructions(obs registry.Observation, usable func(server string) bool) string {
	var b strings.Builder
	for _, name := range slices.Sorted(maps.Keys(obs.Servers)) {
		st := obs.Servers[name]
		if !st.HasConn || st.Conn.Phase == v1alpha1.PhaseFailed || !usable(name) {
			continue
		}
		if text := strings.TrimSpace(st.Conn.Instructions); text != "" {
			fmt.Fprintf(&b, "## %s\n\n%s\n\n", name, text)
		}
	}
	return strings.TrimSpace(b.String())
}

// release ends a session: its subscriptions and log level go, then its slots. It makes no
// upstream request itself (the sweep runs it for every project): the unsubscribes (conn's
// chores) and the project's new log level (relevel) go out in the background, each with a
// deadline.
func (p *project) release(id string) {
	uris, leveled := p.sessions.forget(id)
	for _, uri := range uris {
		p.subs.drop(id, uri)
	}
	p.sessions.dropSubscriptions(id)
	if leveled {
		p.relevel()
	}
	p.sessions.disown(id)
	if p.parent != nil && p.parent.sessions.owned(id) {
		// A stateless session the project endpoint mounted and goes on serving: a per-server
		// endpoint that lets it go (idle there, or dropped with its server) keeps its slots.
		return
	}
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

// bound reports whether a session (by its ref) is bound to the connection of key connKey of a
// server: only those sessions hear what that connection sends.
func (p *project) bound(server, connKey, ref string) bool {
	return p.g.opts.Registry.Bound(p.key, ref, server, connKey)
}

// updated hands a resource update to the sessions subscribed to its URI and to the listens the
// gateway serves (listen.go). The SDK sends one update to every session subscribed to the URI,
// through the sending middleware (queueNotices) and before it returns: a keyed connection's
// update is sent under p.only, which that middleware checks, so that it reaches the sessions
// bound to that connection alone.
func (p *project) updated(ctx context.Context, server string, n registry.Notice) {
	if n.Conn == "" {
		_ = p.server.ResourceUpdated(ctx, n.ResourceUpdated) // to its subscribers' outboxes
		p.listeners.updated(n.ResourceUpdated, nil)
		return
	}
	only := func(ref string) bool { return p.bound(server, n.Conn, ref) }
	p.updates.Lock()
	p.updateOnly.Store(&only)
	_ = p.server.ResourceUpdated(ctx, n.ResourceUpdated)
	p.updateOnly.Store(nil)
	p.updates.Unlock()
	p.listeners.updated(n.ResourceUpdated, only)
}

// updateTo reports whether the resource update being sent goes to the session ss: every
// subscriber, unless a keyed connection's update is being sent (updated).
func (p *project) updateTo(ss *mcp.ServerSession) bool {
	only := p.updateOnly.Load()
	return only == nil || (*only)(access.SessionRef(ss.ID()))
}
