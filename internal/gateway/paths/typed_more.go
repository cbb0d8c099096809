package paths

import (
	"context"
	"fmt"
	"strings"

	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/gateway/access"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Complete routes completion/complete by its reference: a prompt by projected name (sent
// upstream under the server's own name), a resource template by its URI template.
func (p *Paths) Complete(ctx context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
	ref := req.Params.Ref
	if ref == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "completion/complete needs a ref"}
	}
	up := *ref
	server, raw := p.ep.Routes().CompletionTarget(ref)
	if ref.Type == "ref/prompt" {
		up.Name = raw
	}
	if server == "" {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("no server of this project offers %s %q", ref.Type, ref.Name+ref.URI)}
	}
	params := *req.Params
	params.Ref = &up
	o := OriginOf(req)
	o.item = p.ep.Routes().CompletionItem(server, raw, ref)
	res, err := dispatch(ctx, p, o, server, func(ctx context.Context, c *conn.Conn) (*mcp.CompleteResult, error) { return c.Complete(ctx, &params) })
	if err != nil {
		return nil, RequestError(ctx, err)
	}
	return &mcp.CompleteResult{Completion: res.Completion}, nil
}

// Subscribe subscribes the session o names to uri on server, as dispatch sends any of its
// requests (admitted, traced, counted), and gives the connection that took it.
func (p *Paths) Subscribe(ctx context.Context, o Origin, server, uri string) (*conn.Conn, error) {
	o.method, o.item = "resources/subscribe", p.ep.Routes().ResourceItem(server, uri) // for a listen's subscription too
	var subscribed *conn.Conn
	_, err := dispatch(ctx, p, o, server, func(ctx context.Context, c *conn.Conn) (struct{}, error) {
		err := c.Subscribe(ctx, uri)
		if err == nil {
			subscribed = c
		}
		return struct{}{}, err
	})
	return subscribed, err
}

// Session is the session o names (its ref).
func (o Origin) Session() string { return o.session }

// SessionOf is the stateful session a call's caller (conn.SessionOf) is, when the request path
// made it for the session's own requests (not for a call's stream); nil for any other.
func SessionOf(c conn.Caller) *mcp.ServerSession {
	if sc, ok := c.(sessionCaller); ok {
		return sc.ss
	}
	return nil
}

// IsReplay says whether a Last-Event-ID names an event of one of the gateway's own resumable
// streams (Resume serves it).
func IsReplay(lastEventID string) bool { return strings.HasPrefix(lastEventID, replayPrefix) }

// Who is the identity o's request is served as.
func (o Origin) Who() access.Identity { return o.who }
