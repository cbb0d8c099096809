package gateway

import (
	"context"
	"net/http"

	"github.com/dsh-dev/projectmcp/internal/gateway/access"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/apimachinery/pkg/types"
)

// authorize applies the configured access rule: the Authorizer in cluster mode, loopback
// callers and Host headers (against DNS rebinding) in local mode.
func (g *Gateway) authorize(r *http.Request, key types.NamespacedName) (string, int, string) {
	if g.opts.Auth != nil {
		return g.opts.Auth.Authorize(r.Context(), r, key)
	}
	return g.opts.Local.Authorize(r)
}

// rbacOn reports whether the project's items are authorized per identity: the project asks
// for it and the gateway authenticates identities (local mode has one user, the machine's, who
// may use everything).
func (p *project) rbacOn() (access.ItemAuthorizer, bool) {
	ia, ok := p.g.opts.Auth.(access.ItemAuthorizer)
	if !ok || !p.g.opts.Registry.RBAC(p.key) {
		return nil, false
	}
	return ia, true
}

// itemsMiddleware withholds from the four lists what the caller may not use, on an RBAC
// project. It runs inside listMiddleware, on the SDK's typed page, so what remains is served
// as any page is; a page may come out shorter than the SDK's page size (or empty, with its
// cursor), as a paginated list may.
func (p *project) itemsMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		if err != nil || res == nil {
			return res, err
		}
		ia, on := p.rbacOn()
		if !on {
			return res, nil
		}
		var who access.Identity
		if extra := req.GetExtra(); extra != nil {
			who = access.FromSDK(extra.Header)
		}
		r := p.current()
		switch l := res.(type) {
		case *mcp.ListToolsResult:
			l.Tools = access.Keep(ctx, ia, p.key, who, l.Tools, func(t *mcp.Tool) access.Item { return r.ToolItem(t.Name) })
		case *mcp.ListPromptsResult:
			l.Prompts = access.Keep(ctx, ia, p.key, who, l.Prompts, func(pr *mcp.Prompt) access.Item { return r.PromptItem(pr.Name) })
		case *mcp.ListResourcesResult:
			l.Resources = access.Keep(ctx, ia, p.key, who, l.Resources, func(res *mcp.Resource) access.Item {
				return r.ListedResourceItem(res.URI, false)
			})
		case *mcp.ListResourceTemplatesResult:
			l.ResourceTemplates = access.Keep(ctx, ia, p.key, who, l.ResourceTemplates, func(t *mcp.ResourceTemplate) access.Item {
				return r.ListedResourceItem(t.URITemplate, true)
			})
		}
		return res, nil
	}
}
