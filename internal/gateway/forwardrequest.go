package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sort"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/internal/conn"
)

// prompts/get, resources/read and completion/complete at the JSON-RPC message level.
//
// Through the SDK these are decoded into the SDK's Go types on both sides and encoded again,
// so whatever those types do not model is lost: the server's _meta, fields of newer revisions,
// unknown content fields (and false or zero values are left out). When the session and the
// server speak the same revision and the connection takes raw requests, the gateway forwards
// them as it forwards tools/call: the params stay as the session sent them except the name (a
// prompt's, or a completion's prompt reference) spliced in for the server's own and the
// session's _meta (the connection's own is sent, with the trace context); the server's result
// comes back as it came. Anything else goes to the SDK as before, so its validation, routing
// errors and revision translation apply: a name or URI no server offers, params the SDK's types
// would refuse, a progress token, the other revision, a connection that takes typed requests
// only.

// forwardedMethods are the requests besides tools/call forwarded at the message level.
var forwardedMethods = map[string]bool{"prompts/get": true, "resources/read": true, "completion/complete": true}

// forwardRequest forwards one prompts/get, resources/read or completion/complete and answers
// pathForward, or answers why the SDK server must handle it instead (nothing has been written to
// w then). The caller is what identify makes of the request's _meta and the name or URI it
// names (false: the SDK must handle it).
func (p *project) forwardRequest(w http.ResponseWriter, r *http.Request, env envelope,
	identify func(*requestMeta, string) (forwardCaller, bool)) string {
	var members map[string]json.RawMessage
	if conn.DecodeExact(env.Params, &members) != nil || members == nil {
		return pathTyped
	}
	var meta requestMeta
	if m, ok := members["_meta"]; ok && conn.DecodeExact(m, &meta) != nil {
		return pathTyped
	}
	if len(meta.ProgressToken) > 0 {
		return pathTyped
	}
	if isInputStateJSON(members["requestState"]) {
		return pathTyped // answers for a request the gateway holds (input.go), never for a server
	}
	delete(members, "_meta")

	// Routing, and the SDK's own decoding of the params as a check: what its types refuse,
	// it answers.
	var server, name, raw string
	var item Item
	switch env.Method {
	case "prompts/get":
		var params mcp.GetPromptParams
		if conn.DecodeExact(env.Params, &params) != nil || params.Name == "" {
			return pathTyped
		}
		pr, ok := p.prompt(params.Name)
		if !ok {
			return pathTyped
		}
		server, name, raw = pr.server, params.Name, pr.raw
		item = Item{Resource: ResourcePrompts, Server: server, Name: raw, Unlisted: pr.unlisted}
		members["name"], _ = json.Marshal(pr.raw)
	case "resources/read":
		var params mcp.ReadResourceParams
		if conn.DecodeExact(env.Params, &params) != nil || params.URI == "" {
			return pathTyped
		}
		var ok bool
		if server, ok = p.owner(params.URI); !ok {
			return pathTyped
		}
		name = params.URI
		item = p.resourceItem(server, params.URI)
	case "completion/complete":
		var params mcp.CompleteParams
		if conn.DecodeExact(env.Params, &params) != nil || params.Ref == nil {
			return pathTyped
		}
		if server, raw = p.completionTarget(params.Ref); server == "" {
			return pathTyped
		}
		item = p.completionItem(server, raw, params.Ref)
		if params.Ref.Type == "ref/prompt" {
			var ref map[string]json.RawMessage
			if conn.DecodeExact(members["ref"], &ref) != nil {
				return pathTyped
			}
			ref["name"], _ = json.Marshal(raw)
			members["ref"], _ = json.Marshal(ref)
		}
	default:
		return pathTyped
	}
	fc, ok := identify(&meta, name)
	if !ok {
		return pathTyped
	}
	b := p.binding(origin{method: env.Method, name: name}, fc.id, server)
	if state, ok := members["requestState"]; ok {
		if members["requestState"], ok = openStateJSON(b, state); !ok {
			return pathTyped // a state the SDK path refuses (sealStates)
		}
	}

	ctx, cancel := p.track(r, fc, env.ID)
	defer cancel()
	o := origin{method: env.Method, session: fc.id, caller: fc.caller, meta: meta.trace(), caps: fc.caps, header: r.Header, traced: true, item: item,
		args: members["arguments"]}
	if env.Method == "prompts/get" {
		o.name, o.raw = name, raw
	}
	body := joinMembers(members)
	res, err := dispatch(ctx, p, o, server, func(ctx context.Context, c *conn.Conn) (conn.RawResult, error) {
		return c.Forward(ctx, env.Method, body, nil, fc.rev)
	})
	switch {
	case errors.Is(err, conn.ErrOtherRevision):
		return pathRevision // nothing was sent: the SDK translates between the revisions
	case errors.Is(err, conn.ErrNotRaw):
		return pathTyped // nothing was sent: the connection takes typed requests only
	case err == nil:
		writeResponse(w, nil, env.ID, sealResultJSON(b, res), nil)
	case ctx.Err() != nil && !errors.Is(err, conn.ErrUnavailable):
		writeResponse(w, nil, env.ID, nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "request cancelled: " + err.Error()})
	default: // as through the SDK: the server's own error as it gave it, else one naming the server
		var rpcErr *jsonrpc.Error
		errors.As(protocolError(err), &rpcErr)
		writeError(w, nil, env.ID, rpcErr, fc.stateless)
	}
	return pathForward
}

// joinMembers encodes the members of a params object without its braces, in name order.
func joinMembers(members map[string]json.RawMessage) []byte {
	names := make([]string, 0, len(members))
	size := 0
	for k, v := range members {
		names = append(names, k)
		size += len(k) + len(v) + 4
	}
	sort.Strings(names)
	out := make([]byte, 0, size)
	for _, k := range names {
		out = conn.AppendMember(out, k, members[k])
	}
	return out
}
