package conn

import (
	"context"
	"crypto/sha256"
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// What a connection asks of its server by itself, unasked by any session: a health probe every
// HealthInterval and a backstop re-list every RelistInterval. With thousands of connections
// this is most of what the controller does while nobody calls (the scale benchmark: about
// 40% of a core for 3,000 connections when every request went through the SDK, which decodes
// each answer into Go types, each tool's schema into maps, and validates them). On a session
// that takes raw requests (stdio, streamable HTTP: the wire), both go raw instead:
// a probe reads nothing of the answer, and a re-list first asks for the lists raw and only
// decodes them through the SDK when their bytes changed since the last re-list.

// rawCall sends one of the connection's own requests on the wire of session s. ok is false
// when s takes no raw requests (legacy SSE) or is no longer the
// connection's session.
func (c *Conn) rawCall(ctx context.Context, s *mcp.ClientSession, method string, members []byte) (res json.RawMessage, ok bool, err error) {
	w := c.wireOf(s)
	if w == nil || !w.raw() {
		return nil, false, nil
	}
	var meta []byte
	if sm := w.meta.Load(); sm != nil {
		meta = *sm // a 2026-07-28 session's _meta members, as Forward sends them
	}
	res, err = w.call(ctx, method, members, meta)
	return res, true, err
}

// listDigest lists raw, through every page, what list lists (tools, and prompts, resources and
// templates as the server declares them), and returns a digest of the answers. ok is false
// when the session takes no raw requests or a raw list failed: the caller then lists through
// the SDK as before.
func (c *Conn) listDigest(ctx context.Context, s *mcp.ClientSession) (digest [sha256.Size]byte, ok bool) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.ConnectTimeout)
	defer cancel()
	methods := []string{"tools/list"}
	if caps := s.InitializeResult().Capabilities; caps != nil {
		if caps.Prompts != nil {
			methods = append(methods, "prompts/list")
		}
		if caps.Resources != nil {
			methods = append(methods, "resources/list", "resources/templates/list")
		}
	}
	h := sha256.New()
	for _, method := range methods {
		var members []byte
		for pages := 0; ; pages++ {
			if pages > c.opts.MaxListItems { // a server paging forever; list refuses it
				return digest, false
			}
			res, raw, err := c.rawCall(ctx, s, method, members)
			if !raw || err != nil {
				return digest, false
			}
			h.Write([]byte(method))
			h.Write(res)
			var page struct {
				NextCursor string `json:"nextCursor"`
			}
			if json.Unmarshal(res, &page) != nil {
				return digest, false
			}
			if page.NextCursor == "" {
				break
			}
			members = appendQuoted([]byte(`"cursor":`), page.NextCursor)
		}
	}
	h.Sum(digest[:0])
	return digest, true
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
	w := c.wireOf(s)
	return w == nil || w.stdin == nil
}
