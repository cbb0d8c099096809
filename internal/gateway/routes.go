package gateway

import (
	"maps"
	"regexp"
	"slices"

	"github.com/dsh-dev/projectmcp/internal/gateway/access"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/yosida95/uritemplate/v3"
)

// routes is what sessions' requests are routed by: the projected items, with the resource
// templates compiled in template order. sync publishes a new one when it has changed the sets;
// requests read it without a lock, so they never wait for a sync (which holds cat.mu through
// a mount's whole projection), and a URI is matched against compiled templates, not templates
// parsed again for every read.
type routes struct {
	tools, prompts, resources, templates map[string]projected
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

// publishRoutes publishes the sets as they are now, for the servers named. Callers hold cat.mu.
func (p *project) publishRoutes(servers []string) {
	r := &routes{tools: maps.Clone(p.cat.tools), prompts: maps.Clone(p.cat.prompts),
		resources: maps.Clone(p.cat.resources), templates: maps.Clone(p.cat.templates), sole: p.only, only: p.only}
	if len(servers) == 1 {
		r.sole = servers[0]
	}
	for _, t := range slices.Sorted(maps.Keys(p.cat.templates)) {
		if tmpl, err := uritemplate.New(t); err == nil {
			r.matchers = append(r.matchers, templateMatcher{re: tmpl.Regexp(), server: p.cat.templates[t].server, template: t})
		}
	}
	p.cat.routes.Store(r)
}

// current is the routes last published (empty before the first sync).
func (p *project) current() *routes {
	if r := p.cat.routes.Load(); r != nil {
		return r
	}
	return &routes{only: p.only}
}

// tool finds a projected tool; on a per-server endpoint, any name (unlisted).
func (r *routes) tool(name string) (projected, bool) {
	t, ok := r.tools[name]
	if !ok {
		return r.unlisted(name)
	}
	return t, ok
}

// prompt finds a projected prompt; on a per-server endpoint, any name (unlisted).
func (r *routes) prompt(name string) (projected, bool) {
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
func (r *routes) unlisted(name string) (projected, bool) {
	if r.only == "" {
		return projected{}, false
	}
	return projected{server: r.only, raw: name, unlisted: true}, true
}

// owner is the server that serves a URI: the one that lists it, else the first (in template
// order) whose resource template matches it, else the endpoint's sole server, which answers
// for the URI as it would directly (a server may serve, or take subscriptions to, URIs it
// does not list).
func (r *routes) owner(uri string) (string, bool) {
	if res, ok := r.resources[uri]; ok {
		return res.server, true
	}
	if m, ok := r.match(uri); ok {
		return m.server, true
	}
	return r.sole, r.sole != ""
}

// match is the first template (in template order) that matches uri.
func (r *routes) match(uri string) (templateMatcher, bool) {
	for _, m := range r.matchers {
		if m.re.MatchString(uri) {
			return m, true
		}
	}
	return templateMatcher{}, false
}

// resourceItem is a URI of server as RBAC names it: a listed one by itself, another by the
// template it is read through, if any (rbac.go's Item.Unlisted).
func (r *routes) resourceItem(server, uri string) access.Item {
	it := access.Item{Resource: access.ResourceResources, Server: server, Name: uri}
	if _, ok := r.resources[uri]; ok {
		return it
	}
	it.Unlisted = true
	if m, ok := r.match(uri); ok && m.server == server { // the template owner() routed it by
		it.Template = m.template
	}
	return it
}

// completionItem is what a completion's reference uses, as RBAC names it: a prompt by the
// server's own name, a resource or template by its URI.
func (r *routes) completionItem(server, raw string, ref *mcp.CompleteReference) access.Item {
	if ref.Type == "ref/prompt" {
		_, listed := r.prompts[ref.Name]
		return access.Item{Resource: access.ResourcePrompts, Server: server, Name: raw, Unlisted: !listed}
	}
	if _, template := r.templates[ref.URI]; template {
		return access.Item{Resource: access.ResourceResources, Server: server, Name: ref.URI}
	}
	return r.resourceItem(server, ref.URI) // as resources/read names it
}

// completionTarget is the server a completion's reference routes to ("" for none) and, for a
// prompt, the prompt's own name there: a prompt by its projected name, a resource template or
// resource by its URI.
func (r *routes) completionTarget(ref *mcp.CompleteReference) (server, raw string) {
	switch ref.Type {
	case "ref/prompt":
		if pr, ok := r.prompts[ref.Name]; ok {
			return pr.server, pr.raw
		}
	case "ref/resource":
		if t, ok := r.templates[ref.URI]; ok {
			return t.server, ""
		} else if res, ok := r.resources[ref.URI]; ok {
			return res.server, ""
		}
	}
	if pr, ok := r.unlisted(ref.Name); ok { // a per-server endpoint's server answers for any
		return pr.server, pr.raw
	}
	return "", ""
}
