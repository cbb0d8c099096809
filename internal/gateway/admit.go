package gateway

import (
	"context"
	"fmt"
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
	return access.Local(r)
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

// admit refuses a request whose item the caller may not use.
func (p *project) admit(ctx context.Context, o origin) error {
	if o.item.Resource == "" && !access.UsesItem(o.method) {
		return nil
	}
	ia, on := p.rbacOn()
	if !on {
		return nil
	}
	if o.item.Resource == "" {
		return fmt.Errorf("projectmcp: %s names no tool, prompt or resource the project's RBAC policy can check", o.method)
	}
	if !ia.Permit(ctx, o.who, p.key, []access.Item{o.item})[0] {
		return &access.DeniedItem{Project: p.key.Name, Item: o.item}
	}
	return nil
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
			l.Tools = access.Keep(ctx, ia, p.key, who, l.Tools, func(t *mcp.Tool) access.Item { return r.itemOf(access.ResourceTools, r.tools, t.Name) })
		case *mcp.ListPromptsResult:
			l.Prompts = access.Keep(ctx, ia, p.key, who, l.Prompts, func(pr *mcp.Prompt) access.Item { return r.itemOf(access.ResourcePrompts, r.prompts, pr.Name) })
		case *mcp.ListResourcesResult:
			l.Resources = access.Keep(ctx, ia, p.key, who, l.Resources, func(res *mcp.Resource) access.Item {
				return access.Item{Resource: access.ResourceResources, Server: r.resources[res.URI].server, Name: res.URI}
			})
		case *mcp.ListResourceTemplatesResult:
			l.ResourceTemplates = access.Keep(ctx, ia, p.key, who, l.ResourceTemplates, func(t *mcp.ResourceTemplate) access.Item {
				return access.Item{Resource: access.ResourceResources, Server: r.templates[t.URITemplate].server, Name: t.URITemplate}
			})
		}
		return res, nil
	}
}

// itemOf is a listed tool or prompt as RBAC names it: its server and the server's own name.
func (r *routes) itemOf(resource string, set map[string]projected, name string) access.Item {
	it := set[name]
	return access.Item{Resource: resource, Server: it.server, Name: it.raw}
}
