package conn

import (
	"context"
	"encoding/json"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/internal/revision"
)

// What a connection asks of its server by itself, unasked by any session: a health probe every
// HealthInterval and a backstop re-list every RelistInterval. With thousands of connections
// this is most of what the controller does while nobody calls (the scale benchmark: about
// 40% of a core for 3,000 connections when every request goes through the SDK, which decodes
// each answer into Go types, each tool's schema into maps, and validates them). On a session
// whose upstream takes forwarded requests (stdio, streamable HTTP), both are forwarded: a
// probe reads nothing of the answer, and a re-list asks for the lists as the server sends
// them and only decodes them when their bytes changed since the last listing (listitems.go).

// probe checks that the server answers: ping on sessions that have it; on the 2026-07-28
// protocol, which has none, the first list the server declared (probeMethod).
func (l *lister) probe(ctx context.Context) error {
	init := l.session.InitializeResult()
	newest := revision.Of(init.ProtocolVersion) >= revision.Stateless
	method := probeMethod(init.Capabilities, newest)
	if method == "" {
		return nil
	}
	l.counts.probes.Add(1)
	ctx, cancel := context.WithTimeout(ctx, min(l.opts.ConnectTimeout, 10*time.Second))
	defer cancel()
	if _, forwarded, err := l.call(ctx, method, nil); forwarded {
		return err
	}
	switch method {
	case "tools/list":
		_, err := l.session.ListTools(ctx, nil)
		return err
	case "prompts/list":
		_, err := l.session.ListPrompts(ctx, nil)
		return err
	case "resources/list":
		_, err := l.session.ListResources(ctx, nil)
		return err
	}
	return l.session.Ping(ctx, nil)
}

// probeMethod is the request a probe sends: ping, or on the 2026-07-28 protocol (newest), which
// has no ping, the first list the server declared (tools, prompts, resources), a request it
// must answer; a list it did not declare it may answer with method not found. A 2026-07-28
// server that declares no list gets no probe (""): nothing both sides know is left to ask, and
// the end of its process or of its session still tells.
func probeMethod(caps *mcp.ServerCapabilities, newest bool) string {
	if !newest {
		return "ping"
	}
	if kinds := declared(caps); len(kinds) > 0 {
		return listMethods[kinds[0]]
	}
	return ""
}

// call forwards one of the connection's own requests. forwarded is false when the session
// takes no forwarded requests (legacy SSE).
func (l *lister) call(ctx context.Context, method string, members []byte) (res json.RawMessage, forwarded bool, err error) {
	if l.up == nil || !l.up.takes() {
		return nil, false, nil
	}
	res, err = l.up.call(ctx, method, members, nil)
	return res, true, err
}

// probedByRelist reports a session with no probe of its own: a 2026-07-28 HTTP connection has
// no ping and no session to lose, so a probe would be a whole tools/list every HealthInterval
// (on the typed path a fifth of the controller's CPU at 1,000 projects with half their
// servers so, in the scale benchmark) for what the backstop re-list, which fails the same way
// when the server is gone, already finds every RelistInterval.
func (l *lister) probedByRelist() bool {
	if revision.Of(l.session.InitializeResult().ProtocolVersion) < revision.Stateless {
		return false
	}
	return l.up == nil || l.up.probedByRelist()
}
