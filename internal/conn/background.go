package conn

import (
	"context"
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// What a connection asks of its server by itself, unasked by any session: a health probe every
// HealthInterval and a backstop re-list every RelistInterval. With thousands of connections
// this is most of what the controller does while nobody calls (the scale benchmark: about
// 40% of a core for 3,000 connections when every request went through the SDK, which decodes
// each answer into Go types, each tool's schema into maps, and validates them). On a session
// that takes raw requests (stdio, streamable HTTP: the wire), both go raw instead:
// a probe reads nothing of the answer, and a re-list asks for the lists raw and only decodes
// them when their bytes changed since the last listing (rawlist.go).

// rawCall sends one of the connection's own requests on the wire of session s. ok is false
// when s takes no raw requests (legacy SSE) or is no longer the
// connection's session.
func (c *Conn) rawCall(ctx context.Context, s *mcp.ClientSession, method string, members []byte) (res json.RawMessage, ok bool, err error) {
	up, _ := c.upstreamOf(s)
	if up == nil || !up.takes() {
		return nil, false, nil
	}
	res, err = up.call(ctx, method, members, nil)
	return res, true, err
}

// probedByRelist reports a session with no probe of its own: a 2026-07-28 HTTP connection has
// no ping and no session to lose, so a probe would be a whole tools/list every HealthInterval
// (through the SDK, before such sessions took raw requests, a fifth of the controller's CPU at
// 1,000 projects with half their servers so, in the scale benchmark) for what the backstop
// re-list, which fails the same way when the server is gone, already finds every
// RelistInterval.
func (c *Conn) probedByRelist(s *mcp.ClientSession) bool {
	if s.InitializeResult().ProtocolVersion < "2026-07-28" {
		return false
	}
	up, _ := c.upstreamOf(s)
	return up == nil || up.probedByRelist()
}
