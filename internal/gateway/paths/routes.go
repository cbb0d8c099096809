package paths

import (
	"maps"
	"regexp"
	"slices"

	"github.com/dsh-dev/projectmcp/internal/gateway/access"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/yosida95/uritemplate/v3"
)

// Route is where requests for a projected item (tool, prompt, resource or template) go: its
// server, and the item's name there.
type Route struct {
	Server, Raw string
	// ParamHeaders: the tool's schema asks for Mcp-Param headers (2026-07-28), which only the
	// typed path checks and sets, so its calls are not forwarded.
	ParamHeaders bool
	// Unlisted: a name no list holds, sent to a per-server endpoint's server.
	Unlisted bool
}

// Routes is what sessions' requests are routed by: the projected items, with the resource
// templates compiled in template order. The endpoint's catalog publishes a new one when it has
// changed the sets; requests read it without a lock, so they never wait for a sync (which holds
// the catalog's lock through a mount's whole projection), and a URI is matched against compiled
// templates, not templates parsed again for every read.
type Routes struct {
	tools, prompts, resources, templates map[string]Route
	matchers                             []templateMatcher // in template order
	// sole is the server a URI nothing lists or matches goes to: a per-server endpoint's, or
	// the project's only one ("" when it has several).
	sole string
	// only is a per-server endpoint's server, which any name goes to (unlisted); "" for the
	// project endpoint.
	only string
}

type templateMatcher struct {
	re               *regexp.Regexp
	server, template string
}

// NewRoutes are the routes of the sets given (by projected name; resources and templates by
// URI and URI template) for the servers named, on the project endpoint (only "") or a
// per-server endpoint of server only.
func NewRoutes(tools, prompts, resources, templates map[string]Route, servers []string, only string) *Routes {
	r := &Routes{tools: tools, prompts: prompts, resources: resources, templates: templates, sole: only, only: only}
	if len(servers) == 1 {
		r.sole = servers[0]
	}
	for _, t := range slices.Sorted(maps.Keys(templates)) {
		if tmpl, err := uritemplate.New(t); err == nil {
			r.matchers = append(r.matchers, templateMatcher{re: tmpl.Regexp(), server: templates[t].Server, template: t})
		}
	}
	return r
}

// tool finds a projected tool; on a per-server endpoint, any name (unlisted).
func (r *Routes) tool(name string) (Route, bool) {
	t, ok := r.tools[name]
	if !ok {
		return r.unlisted(name)
	}
	return t, ok
}

// prompt finds a projected prompt; on a per-server endpoint, any name (unlisted).
func (r *Routes) prompt(name string) (Route, bool) {
	pr, ok := r.prompts[name]
	if !ok {
		return r.unlisted(name)
	}
	return pr, ok
}

// unlisted routes a name no list holds. A per-server endpoint sends it to its server under
// that name, which answers as it would a direct session: it may serve names it does not list,
// or have listed a new one a moment ago, and its own "not found" is what the session would
// get. The project endpoint has no server to send it to.
func (r *Routes) unlisted(name string) (Route, bool) {
	if r.only == "" {
		return Route{}, false
	}
	return Route{Server: r.only, Raw: name, Unlisted: true}, true
}

// Owner is the server that serves a URI: the one that lists it, else the first (in template
// order) whose resource template matches it, else the endpoint's sole server, which answers
// for the URI as it would directly (a server may serve, or take subscriptions to, URIs it
// does not list).
func (r *Routes) Owner(uri string) (string, bool) {
	if res, ok := r.resources[uri]; ok {
		return res.Server, true
	}
	if m, ok := r.match(uri); ok {
		return m.server, true
	}
	return r.sole, r.sole != ""
}

// match is the first template (in template order) that matches uri.
func (r *Routes) match(uri string) (templateMatcher, bool) {
	for _, m := range r.matchers {
		if m.re.MatchString(uri) {
			return m, true
		}
	}
	return templateMatcher{}, false
}

// ResourceItem is a URI of server as RBAC names it: a listed one by itself, another by the
// template it is read through, if any (access.Item.Unlisted).
func (r *Routes) ResourceItem(server, uri string) access.Item {
	it := access.Item{Resource: access.ResourceResources, Server: server, Name: uri}
	if _, ok := r.resources[uri]; ok {
		return it
	}
	it.Unlisted = true
	if m, ok := r.match(uri); ok && m.server == server { // the template Owner routed it by
		it.Template = m.template
	}
	return it
}

// CompletionItem is what a completion's reference uses, as RBAC names it: a prompt by the
// server's own name, a resource or template by its URI.
func (r *Routes) CompletionItem(server, raw string, ref *mcp.CompleteReference) access.Item {
	if ref.Type == "ref/prompt" {
		_, listed := r.prompts[ref.Name]
		return access.Item{Resource: access.ResourcePrompts, Server: server, Name: raw, Unlisted: !listed}
	}
	if _, template := r.templates[ref.URI]; template {
		return access.Item{Resource: access.ResourceResources, Server: server, Name: ref.URI}
	}
	return r.ResourceItem(server, ref.URI) // as resources/read names it
}

// CompletionTarget is the server a completion's reference routes to ("" for none) and, for a
// prompt, the prompt's own name there: a prompt by its projected name, a resource template or
// resource by its URI.
func (r *Routes) CompletionTarget(ref *mcp.CompleteReference) (server, raw string) {
	switch ref.Type {
	case "ref/prompt":
		if pr, ok := r.prompts[ref.Name]; ok {
			return pr.Server, pr.Raw
		}
	case "ref/resource":
		if t, ok := r.templates[ref.URI]; ok {
			return t.Server, ""
		} else if res, ok := r.resources[ref.URI]; ok {
			return res.Server, ""
		}
	}
	if pr, ok := r.unlisted(ref.Name); ok { // a per-server endpoint's server answers for any
		return pr.Server, pr.Raw
	}
	return "", ""
}

// ToolItem is a listed tool as RBAC names it: its server and the server's own name (an item of
// no server when the routes changed since the tool was listed).
func (r *Routes) ToolItem(name string) access.Item {
	t := r.tools[name]
	return access.Item{Resource: access.ResourceTools, Server: t.Server, Name: t.Raw}
}

// PromptItem is a listed prompt as RBAC names it.
func (r *Routes) PromptItem(name string) access.Item {
	pr := r.prompts[name]
	return access.Item{Resource: access.ResourcePrompts, Server: pr.Server, Name: pr.Raw}
}

// ListedResourceItem is a listed resource (by URI) or template (by URI template) as RBAC names
// it.
func (r *Routes) ListedResourceItem(uri string, template bool) access.Item {
	set := r.resources
	if template {
		set = r.templates
	}
	return access.Item{Resource: access.ResourceResources, Server: set[uri].Server, Name: uri}
}

// Listed are the items the routes hold (every listed tool, prompt, resource and template), by
// server, as RBAC names them.
func (r *Routes) Listed() map[string][]access.Item {
	out := map[string][]access.Item{}
	add := func(resource string, set map[string]Route, name func(key string, rt Route) string) {
		for key, rt := range set {
			out[rt.Server] = append(out[rt.Server], access.Item{Resource: resource, Server: rt.Server, Name: name(key, rt)})
		}
	}
	raw := func(_ string, rt Route) string { return rt.Raw }
	uri := func(key string, _ Route) string { return key }
	add(access.ResourceTools, r.tools, raw)
	add(access.ResourcePrompts, r.prompts, raw)
	add(access.ResourceResources, r.resources, uri)
	add(access.ResourceResources, r.templates, uri)
	return out
}
