package paths

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sort"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/gateway/access"
	"github.com/dsh-dev/projectmcp/internal/jsonrpcwire"
)

// prompts/get, resources/read and completion/complete on the forward path.
//
// Through the SDK these are decoded into the SDK's Go types on both sides and encoded again,
// so whatever those types do not model is lost: the server's _meta, fields of newer revisions,
// unknown content fields (and false or zero values are left out). Forwarded, the params stay as
// the session sent them but for the name (a prompt's, or a completion's prompt reference)
// spliced in for the server's own and the session's _meta (the connection's own is sent, with
// the trace context); the server's result comes back as it came, from a server of the
// session's revision (acceptsOf).

// The routes of the routing table's rows (planner.go): each reads its method's params as the
// SDK's types take them, as a check (what they refuse, the typed path answers), and finds the
// server that serves what they name.

// routeTool routes a tools/call by its projected name.
func routeTool(p *Paths, in *incoming) bool {
	in.name = in.call.Name
	t, ok := p.ep.Routes().tool(in.name)
	in.routed, in.paramHeaders = ok, t.ParamHeaders // whichever the session's revision: the server's is what matters
	in.target = target{server: t.Server, raw: t.Raw, item: access.Item{Resource: access.ResourceTools, Server: t.Server, Name: t.Raw, Unlisted: t.Unlisted}}
	return true
}

// routePrompt routes a prompts/get by its projected name, sent as the server's own.
func routePrompt(p *Paths, in *incoming) bool {
	var params mcp.GetPromptParams
	if jsonrpcwire.DecodeExact(in.env.Params, &params) != nil || params.Name == "" {
		return false
	}
	in.name = params.Name
	pr, ok := p.ep.Routes().prompt(params.Name)
	if in.routed = ok; ok {
		in.target = target{server: pr.Server, raw: pr.Raw, item: access.Item{Resource: access.ResourcePrompts, Server: pr.Server, Name: pr.Raw, Unlisted: pr.Unlisted}}
		in.members["name"], _ = json.Marshal(pr.Raw)
	}
	return true
}

// routeResource routes a resources/read by its URI, unchanged (owner).
func routeResource(p *Paths, in *incoming) bool {
	var params mcp.ReadResourceParams
	if jsonrpcwire.DecodeExact(in.env.Params, &params) != nil || params.URI == "" {
		return false
	}
	in.name = params.URI
	server, ok := p.ep.Routes().Owner(params.URI)
	if in.routed = ok; ok {
		in.target = target{server: server, item: p.ep.Routes().ResourceItem(server, params.URI)}
	}
	return true
}

// routeCompletion routes a completion/complete by its reference (completionTarget): a
// prompt's is sent under the server's own name.
func routeCompletion(p *Paths, in *incoming) bool {
	var params mcp.CompleteParams
	if jsonrpcwire.DecodeExact(in.env.Params, &params) != nil || params.Ref == nil {
		return false
	}
	server, raw := p.ep.Routes().CompletionTarget(params.Ref)
	if server == "" {
		return true
	}
	if params.Ref.Type == "ref/prompt" {
		var ref map[string]json.RawMessage
		if jsonrpcwire.DecodeExact(in.members["ref"], &ref) != nil {
			return false
		}
		ref["name"], _ = json.Marshal(raw)
		in.members["ref"], _ = json.Marshal(ref)
	}
	in.routed = true
	in.target = target{server: server, item: p.ep.Routes().CompletionItem(server, raw, params.Ref)}
	return true
}

// forwardRequest forwards one request of a method other than tools/call and answers
// pathForward, or the typed path that is to carry it when Forward answered so (retry).
func (p *Paths) forwardRequest(w http.ResponseWriter, r *http.Request, in *incoming) path {
	fc, t := in.caller, in.target
	if len(in.state) > 0 {
		in.members["requestState"] = in.state
	}
	ctx, cancel := p.track(r, fc, in.env.ID)
	defer cancel()
	ctx, note := withStateNote(ctx) // a bridged round's state, which is not sealed
	o := Origin{method: in.method, session: fc.id, caller: fc.caller, meta: in.meta.trace(), caps: fc.caps, who: in.who, header: r.Header, traced: true,
		item: t.item, args: in.members["arguments"]}
	if t.raw != "" { // an item the server names (a prompt): its two names, for the span and the audit log
		o.name, o.raw = in.name, t.raw
	}
	if in.bridged && in.method == "resources/read" {
		o.name = in.name // the URI, which an input round's state is bound to, as on the SDK's path
	}
	body := joinMembers(in.members)
	send := func(ctx context.Context, c *conn.Conn) (conn.RawResult, error) {
		if in.taskRoute != nil {
			return onTaskConn(in.taskRoute, c, func() (conn.RawResult, error) { return c.Forward(ctx, in.method, body, nil, fc.rev) })
		}
		return c.Forward(ctx, in.method, body, nil, fc.rev)
	}
	var res conn.RawResult
	var err error
	if in.bridged {
		res, err = p.bridge(ctx, o, t.server, in.declared, send)
	} else {
		res, err = dispatch(ctx, p, o, t.server, send)
	}
	if again, ok := retry(err); ok {
		return again // nothing was written
	}
	if errors.Is(err, ErrMoved) {
		p.ep.MovedAway(w)
		return pathForward
	}
	if err != nil {
		rpcErr, _ := failureOf(err, false, ctx.Err() != nil)
		writeError(w, nil, in.env.ID, rpcErr, fc.stateless)
		return pathForward
	}
	writeResponse(w, nil, in.env.ID, sealResultJSON(in.binding, res, note.issued), nil)
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
		out = jsonrpcwire.AppendMember(out, k, members[k])
	}
	return out
}
