package gateway

import (
	"context"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/dsh-dev/projectmcp/internal/gateway/access"
	"github.com/dsh-dev/projectmcp/internal/gateway/paths"
)

// Grants on servers, on an RBAC project: what a server says to the whole project rather than
// to one request (a log line outside a call, its instructions), and the level it logs at, are
// for the sessions whose identity holds a grant on that server (access.GrantedServers); a
// per-server endpoint takes only those sessions.
//
// A session's grants are decided when it is mounted, again on its own requests that need them
// (setLevel, initialize, discover) once they are not current, and otherwise in the
// background: after every sync that changes the routes, on the sweep, and when a line finds
// them older than grantsFresh. The goroutine that delivers a server's lines serves every
// session, so it never asks for a review: it reads the grants last decided, and a line for a
// session with none goes to no one.

// grantsFresh is how long a session's grants stand before they are decided again, with the
// review cache's verdicts: a grant that goes stops reaching the session within this, the
// sweep and the review TTL.
const grantsFresh = 30 * time.Second

// grantsTimeout bounds one background decision of one session's grants.
const grantsTimeout = 30 * time.Second

// granter is the part of an endpoint that decides its sessions' grants (the session table
// keeps them); running is set while its background goroutine decides them again (regrant).
type granter struct {
	p       *project
	running atomic.Bool
}

// admit decides the grants of a session being mounted, served as who. A per-server endpoint
// of an RBAC project refuses an identity that holds no grant on its server.
func (g *granter) admit(ctx context.Context, id string, who access.Identity) error {
	p := g.p
	ia, on := p.rbacOn()
	if !on {
		return nil
	}
	if grants := g.grantsOf(ctx, ia, id, who); p.only != "" && !grants[p.only] {
		return &access.DeniedServer{Project: p.key.Name, Server: p.only}
	}
	return nil
}

// admitted reports whether a session mounted in the registry may use this endpoint: on a
// per-server endpoint of an RBAC project, only one this endpoint admitted (a stateless
// session's ref, which names its principal, is the same on every endpoint of its project, and
// the project endpoint checks no server's grant).
func (g *granter) admitted(id string) bool {
	p := g.p
	if p.only == "" {
		return true
	}
	if _, on := p.rbacOn(); !on {
		return true
	}
	return p.sessions.owned(id)
}

// grantsOf are the servers the session id, served as who, holds a grant on: as decided for
// the current routes within grantsFresh, else decided now, on the session's own request, and
// kept.
func (g *granter) grantsOf(ctx context.Context, ia access.ItemAuthorizer, id string, who access.Identity) map[string]bool {
	p := g.p
	routes, now := p.cat.routes.Load(), p.g.opts.Clock.Now()
	if grants, ok := p.sessions.decided(id, routes, now, grantsFresh); ok {
		return grants
	}
	grants := g.decide(ctx, ia, who, routes)
	if p.sessions.grant(id, who, routes, now, grants) {
		p.relevel()
	}
	return grants
}

// decide asks which of the endpoint's servers who holds a grant on, each with the items
// routes list of it.
func (g *granter) decide(ctx context.Context, ia access.ItemAuthorizer, who access.Identity, routes *paths.Routes) map[string]bool {
	p := g.p
	listed := map[string][]access.Item{}
	for _, server := range g.serverNames() {
		listed[server] = nil
	}
	if routes != nil {
		for server, items := range routes.Listed() {
			if _, ok := listed[server]; ok {
				listed[server] = items
			}
		}
	}
	return access.GrantedServers(ctx, ia, p.key, who, listed)
}

// serverNames are the servers the endpoint serves: the project's, or a per-server endpoint's
// one.
func (g *granter) serverNames() []string {
	p := g.p
	return slices.Collect(maps.Keys(p.observe().Servers))
}

// regrant decides again, in the background, the grants of the sessions whose grants are not
// current: one goroutine at a time per endpoint, which goes round again while any are left.
// A decision that changes what a leveled session holds sets the servers' levels again.
func (g *granter) regrant() {
	p := g.p
	ia, on := p.rbacOn()
	if !on || !g.running.CompareAndSwap(false, true) {
		return
	}
	go func() {
		for {
			routes, now := p.cat.routes.Load(), p.g.opts.Clock.Now()
			undecided := p.sessions.undecided(routes, now, grantsFresh)
			if len(undecided) == 0 {
				g.running.Store(false)
				// A regrant that came meanwhile saw this one running and left it the work.
				if len(p.sessions.undecided(p.cat.routes.Load(), p.g.opts.Clock.Now(), grantsFresh)) == 0 || !g.running.CompareAndSwap(false, true) {
					return
				}
				continue
			}
			releveled := false
			for ref, who := range undecided {
				ctx, cancel := context.WithTimeout(context.Background(), grantsTimeout)
				grants := g.decide(ctx, ia, who, routes)
				cancel()
				releveled = p.sessions.grant(ref, who, routes, now, grants) || releveled
			}
			if releveled {
				p.relevel()
			}
		}
	}()
}
