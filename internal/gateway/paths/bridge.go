package paths

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/internal/conn"
)

// A stateless (2026-07-28) session's request to a server speaking 2025-11-25 (tools/call,
// prompts/get, resources/read, completion/complete) is forwarded at the message level as a
// request between two sessions of that server's revision would be; the gateway translates the
// envelope, not the objects. The request goes as the server takes it (the session's _meta of
// its revision stays with the gateway), and the server's result comes back as a 2026-07-28
// server gives one: with resultType and the endpoint's serverInfo in _meta (and a read's
// caching hints), the members as the server sent them. What the server asks the session
// during the request (sampling, elicitation) holds it, and the session gets an input-required
// result (statelessRound, input.go), exactly as on the SDK's path; the resumption with the
// answers takes the SDK's path.

// bridge runs a stateless session's request on a server speaking 2025-11-25 and gives its
// result in the session's revision. declared are the client capabilities the session declares
// in its _meta.
func (p *Paths) bridge(ctx context.Context, o Origin, server string, declared mcp.ClientCapabilities,
	send func(context.Context, *conn.Conn) (conn.RawResult, error)) (conn.RawResult, error) {
	res, round, err := statelessRound(ctx, p, o, &declared, "", nil, server, func(ctx context.Context, c *conn.Conn) (conn.RawResult, error) {
		res, err := send(ctx, c)
		if err == nil && !isObject(res) { // a failure of the server's, counted as one
			return nil, fmt.Errorf("MCP server %q answered %s with a result that is not a JSON object", server, o.method)
		}
		return res, err
	})
	switch {
	case err != nil:
		return nil, err
	case round != nil:
		noteIssued(ctx, round.state)
		return inputRequired(round, p.opts.ServerInfo)
	}
	return statelessShape(res, p.opts.ServerInfo, p.readScope(o.method))
}

// isObject reports whether a result is a JSON object (as every result of a request is).
func isObject(res json.RawMessage) bool {
	res = bytes.TrimSpace(res)
	return len(res) >= 2 && res[0] == '{' && res[len(res)-1] == '}' && json.Valid(res)
}

// readScope is the cacheScope of a resources/read result as the SDK's server gives it (with a
// ttlMs of 0): a project whose reads RBAC decides per identity keeps them private; "" for
// other methods' results, which carry no caching hints.
func (p *Paths) readScope(method string) string {
	if method != "resources/read" {
		return ""
	}
	if _, perIdentity := p.ep.RBAC(); perIdentity {
		return "private"
	}
	return "public"
}

var (
	metaKey       = []byte(`"_meta"`)
	resultTypeKey = []byte(`"resultType"`)
	escapeMark    = []byte(`\u`) // a name may be written with escapes
)

const serverInfoKey = mcp.MetaKeyServerInfo

// statelessShape makes a 2025-11-25 server's result a 2026-07-28 one: serverInfo (the
// endpoint's) in _meta first, then a read's caching hints (scope, when not ""), then the
// server's members as it sent them, then resultType. A result with a _meta of its own has
// serverInfo added to it.
func statelessShape(res json.RawMessage, serverInfo json.RawMessage, scope string) (json.RawMessage, error) {
	res = bytes.TrimSpace(res)
	if len(res) < 2 || res[0] != '{' || res[len(res)-1] != '}' {
		return nil, errors.New("the server's result is not a JSON object")
	}
	if bytes.Contains(res, metaKey) || bytes.Contains(res, resultTypeKey) || bytes.Contains(res, escapeMark) {
		return statelessShapeDecoded(res, serverInfo, scope) // members of the names added: decoded, and set once
	}
	members := bytes.TrimSpace(res[1 : len(res)-1])
	out := make([]byte, 0, len(res)+len(serverInfo)+128)
	out = append(out, `{"_meta":{"`+serverInfoKey+`":`...)
	out = append(out, serverInfo...)
	out = append(out, "},"...)
	if scope != "" {
		out = append(append(append(out, `"ttlMs":0,"cacheScope":"`...), scope...), `",`...)
	}
	if len(members) > 0 {
		out = append(append(out, members...), ',')
	}
	return append(out, `"resultType":"complete"}`...), nil
}

// statelessShapeDecoded is statelessShape for a result that may have a _meta of its own: its members
// are decoded (once), serverInfo set in that _meta.
func statelessShapeDecoded(res json.RawMessage, serverInfo json.RawMessage, scope string) (json.RawMessage, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(res, &top); err != nil {
		return nil, errors.New("the server's result is not a JSON object: " + err.Error())
	}
	meta := map[string]json.RawMessage{}
	if m, ok := top["_meta"]; ok && string(m) != "null" {
		if err := json.Unmarshal(m, &meta); err != nil {
			return nil, errors.New("the server's result has a _meta that is not an object")
		}
	}
	meta[serverInfoKey] = serverInfo
	top["_meta"], _ = json.Marshal(meta) // members as received: cannot fail
	if scope != "" {
		top["ttlMs"], top["cacheScope"] = json.RawMessage("0"), json.RawMessage(`"`+scope+`"`)
	}
	top["resultType"] = json.RawMessage(`"complete"`)
	return append(append([]byte{'{'}, joinMembers(top)...), '}'), nil
}

// inputRequired is the result a stateless session gets when the server asks it for input
// during its call: the server's requests and the state the session resumes the call with.
func inputRequired(round *inputRound, serverInfo json.RawMessage) (json.RawMessage, error) {
	requests, err := json.Marshal(round.requests)
	if err != nil {
		return nil, err
	}
	state, _ := json.Marshal(round.state) // a string: cannot fail
	out := make([]byte, 0, len(requests)+len(state)+len(serverInfo)+128)
	out = append(out, `{"_meta":{"`+serverInfoKey+`":`...)
	out = append(out, serverInfo...)
	out = append(out, `},"requestState":`...)
	out = append(out, state...)
	out = append(out, `,"resultType":"input_required","inputRequests":`...)
	out = append(out, requests...)
	return append(out, '}'), nil
}
