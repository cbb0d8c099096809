package gateway

import (
	"context"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/gateway/access"
	"github.com/dsh-dev/projectmcp/internal/gateway/paths"
)

// seam is a project's endpoint as its request path sees it (paths.Endpoint): the session
// table, the published routes, the registry's slots for the project and this replica's claim
// on it. The request path reaches the endpoint through these methods alone.
type seam struct{ p *project }

var _ paths.Endpoint = seam{}

func (s seam) Routes() *paths.Routes               { return s.p.current() }
func (s seam) RBAC() (access.ItemAuthorizer, bool) { return s.p.rbacOn() }

func (s seam) Await(ctx context.Context, session, server string) (*conn.Conn, error) {
	return s.p.g.opts.Registry.AwaitSlot(ctx, s.p.key, session, server)
}

func (s seam) Lookup(session, server string) *conn.Conn {
	return s.p.g.opts.Registry.Lookup(s.p.key, session, server)
}

// Mounted: a session another endpoint of the project mounted is not this one's until it admits
// it (grants.go), which the SDK's path does (mountMiddleware).
func (s seam) Mounted(session string) bool {
	return s.p.g.opts.Registry.Mounted(s.p.key, session) && s.p.grants.admitted(session)
}

func (s seam) Claim() (int64, bool)            { return s.p.g.claim(s.p.key) }
func (s seam) Moved() bool                     { return s.p.g.moved(s.p.key) }
func (s seam) MovedAway(w http.ResponseWriter) { movedAway(w, s.p.key) }

func (s seam) Stateful(ref string) *mcp.ServerSession { return s.p.sessions.stateful(ref) }
func (s seam) Touch(ref string)                       { s.p.sessions.touch(ref, s.p.g.opts.Clock.Now()) }

func (s seam) AddCall(ref, id string, cancel context.CancelFunc) {
	s.p.sessions.addCall(ref, id, cancel)
}
func (s seam) DropCall(ref, id string)                { s.p.sessions.dropCall(ref, id) }
func (s seam) Call(ref, id string) context.CancelFunc { return s.p.sessions.call(ref, id) }
