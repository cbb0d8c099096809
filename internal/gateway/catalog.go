package gateway

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/gateway/paths"
	"github.com/dsh-dev/projectmcp/internal/projection"
	"github.com/dsh-dev/projectmcp/internal/registry"
)

// catalog is what an endpoint serves, as its last sync projected it.
type catalog struct {
	mu        sync.Mutex // one sync at a time; guards the four sets and synced
	tools     map[string]projected
	prompts   map[string]projected
	resources map[string]projected                  // by URI
	templates map[string]projected                  // by URI template
	synced    string                                // signature of the connection states last projected
	routes    atomic.Pointer[paths.Routes]          // what requests are routed by (paths.Routes), replaced on change
	rawItems  atomic.Pointer[map[any]*conn.RawItem] // the items as their servers listed them (lists.go)
}

// projected is one item (tool, prompt, resource or template) as sessions see it; fingerprint
// covers everything they see, so an unchanged item is never re-added (every add is a
// list_changed).
type projected struct {
	server, raw string
	fingerprint string
	// paramHeaders: the tool's schema asks for Mcp-Param headers (2026-07-28), which only the
	// typed path checks and sets, so its calls are not forwarded.
	paramHeaders bool
	// unlisted: a name no list holds, sent to a per-server endpoint's server (paths.Route).
	unlisted bool
	// item is what the SDK server was given (*mcp.Tool, ...), and members the item as its
	// server listed it (nil when unknown): lists.go serves the one in place of the other.
	item    any
	members *conn.RawItem
}

// same reports whether sessions see a and b alike (and calls go to the same place).
func (a projected) same(b projected) bool {
	return a.server == b.server && a.raw == b.raw && a.fingerprint == b.fingerprint
}

// sync brings the endpoint's tools, prompts, resources and templates in line with the
// project's connections (registry.ServerState.Offered: a Ready or Disconnected server's, the
// previous connection's during a swap, none from a Failed one). Only differences are applied,
// so sessions get one list_changed per real change.
// observe is what the endpoint serves of the project: every server, every one but those an
// except-endpoint leaves out, or its one.
func (p *project) observe() registry.Observation {
	obs := p.g.opts.Registry.ObserveServers(p.key)
	if p.except != nil {
		kept := make(map[string]registry.ServerState, len(obs.Servers))
		for name, st := range obs.Servers {
			if !p.except[name] {
				kept[name] = st
			}
		}
		obs.Servers = kept
		return obs
	}
	if p.only == "" {
		return obs
	}
	st, ok := obs.Servers[p.only]
	obs.Servers = map[string]registry.ServerState{}
	if ok {
		obs.Servers[p.only] = st
	}
	return obs
}

// ownNames gives a per-server endpoint's items (tools, prompts) the names their server gives
// them (one server's names are distinct): rename makes one's copy under its own name.
func ownNames[T any](set map[string]T, rename func(T) (string, T)) map[string]T {
	own := make(map[string]T, len(set))
	for _, it := range set {
		name, renamed := rename(it)
		own[name] = renamed
	}
	return own
}

// reannounce tells a per-server endpoint's sessions of a list_changed their server sent that
// changed nothing the gateway sees (conn.Notice.Unchanged), as the server would have told them
// directly. The SDK server announces a list when an item is added to it, so the first item of
// each such list is added again as it is; an empty list has nothing to announce.
func (p *project) reannounce(l conn.Lists) {
	if p.only == "" {
		return
	}
	p.cat.mu.Lock()
	defer p.cat.mu.Unlock()
	var announced conn.Lists // what the listens the gateway serves are told too (listen.go)
	if t, ok := firstOf(p.cat.tools); ok && l&conn.ToolList != 0 {
		_ = addTool(p.server, t.item.(*mcp.Tool), p.paths.ToolHandler(t.server, t.raw))
		announced |= conn.ToolList
	}
	if pr, ok := firstOf(p.cat.prompts); ok && l&conn.PromptList != 0 {
		_ = guard("prompt", func() { p.server.AddPrompt(pr.item.(*mcp.Prompt), p.paths.PromptHandler(pr.server, pr.raw)) })
		announced |= conn.PromptList
	}
	if r, ok := firstOf(p.cat.resources); ok && l&conn.ResourceList != 0 {
		_ = guard("resource", func() { p.server.AddResource(r.item.(*mcp.Resource), p.paths.ResourceHandler(r.server)) })
		announced |= conn.ResourceList
	}
	p.listeners.changed(announced)
}

// firstOf is the item of set with the least name.
func firstOf(set map[string]projected) (projected, bool) {
	if len(set) == 0 {
		return projected{}, false
	}
	return set[slices.Min(slices.Collect(maps.Keys(set)))], true
}

func (p *project) sync() {
	p.cat.mu.Lock()
	defer p.cat.mu.Unlock()
	obs := p.observe()
	sig := signature(obs.Servers)
	if sig == p.cat.synced {
		return // no connection changed since the last projection (the common case at mount)
	}
	p.cat.synced = sig

	rawOf := func(kind conn.Kind, server, key string) *conn.RawItem {
		return obs.Servers[server].RawItem(kind, key)
	}
	hints := map[string]projection.Hints{}
	for name, st := range obs.Servers {
		hints[name] = hintsOf(st)
	}
	tools, _ := projection.Project(obs.Tools(), p.g.opts.MaxToolName, hints)
	prompts, _ := projection.Prompts(obs.Prompts(), p.g.opts.MaxToolName)
	resources, templates, _ := projection.Resources(obs.Resources())
	if p.only != "" {
		tools = ownNames(tools, func(t projection.Tool) (string, projection.Tool) {
			own := *t.Tool
			own.Name, t.Tool = t.Raw, &own
			return t.Raw, t
		})
		prompts = ownNames(prompts, func(pr projection.Prompt) (string, projection.Prompt) {
			own := *pr.Prompt
			own.Name, pr.Prompt = pr.Raw, &own
			return pr.Raw, pr
		})
	}
	// The raw forms of the items about to be added are published before they are: the SDK
	// server announces an add (list_changed, 10 ms later), and a list between the add and
	// the final index (below) would give the new items typed, to a session that then keeps
	// them. Stale entries do no harm: the index is by the SDK server's pointers.
	pending := map[any]*conn.RawItem{}
	note := func(item any, kind conn.Kind, server, key string) { pending[item] = rawOf(kind, server, key) }
	for _, t := range tools {
		note(t.Tool, conn.KindTool, t.Server, t.Raw)
		pending[t.Tool] = withEdit(pending[t.Tool], hints[t.Server].EditOf(t.Raw))
	}
	for _, pr := range prompts {
		note(pr.Prompt, conn.KindPrompt, pr.Server, pr.Raw)
	}
	for _, r := range resources {
		note(r.Resource, conn.KindResource, r.Server, r.Resource.URI)
	}
	for _, t := range templates {
		note(t.Template, conn.KindTemplate, t.Server, t.Template.URITemplate)
	}
	p.indexRaw(pending)
	var changed conn.Lists // what the listens the gateway serves are told (listen.go)
	noteChange := func(l conn.Lists, did bool) {
		if did {
			changed |= l
		}
	}
	noteChange(conn.ToolList, applySet(p, "tool", p.cat.tools, tools, func(t projection.Tool) (projected, any) {
		schema, _ := json.Marshal(t.Tool.InputSchema)
		return projected{server: t.Server, raw: t.Raw, paramHeaders: bytes.Contains(schema, []byte("x-mcp-header")),
			item: t.Tool, members: pending[t.Tool]}, t.Tool
	}, p.server.RemoveTools, func(name string, t projection.Tool) error {
		return addTool(p.server, t.Tool, p.paths.ToolHandler(t.Server, t.Raw))
	}))

	noteChange(conn.PromptList, applySet(p, "prompt", p.cat.prompts, prompts, func(pr projection.Prompt) (projected, any) {
		return projected{server: pr.Server, raw: pr.Raw, item: pr.Prompt, members: pending[pr.Prompt]}, pr.Prompt
	}, p.server.RemovePrompts, func(name string, pr projection.Prompt) error {
		return guard("prompt", func() { p.server.AddPrompt(pr.Prompt, p.paths.PromptHandler(pr.Server, pr.Raw)) })
	}))

	noteChange(conn.ResourceList, applySet(p, "resource", p.cat.resources, resources, func(r projection.Resource) (projected, any) {
		return projected{server: r.Server, raw: r.Resource.URI, item: r.Resource, members: pending[r.Resource]}, r.Resource
	}, p.server.RemoveResources, func(uri string, r projection.Resource) error {
		return guard("resource", func() { p.server.AddResource(r.Resource, p.paths.ResourceHandler(r.Server)) })
	}))
	// A template's change is a resources/list_changed, as the SDK's server announces it.
	noteChange(conn.ResourceList, applySet(p, "resource template", p.cat.templates, templates, func(t projection.Template) (projected, any) {
		return projected{server: t.Server, raw: t.Template.URITemplate, item: t.Template, members: pending[t.Template]}, t.Template
	}, p.server.RemoveResourceTemplates, func(uri string, t projection.Template) error {
		return guard("resource template", func() { p.server.AddResourceTemplate(t.Template, p.paths.ResourceHandler(t.Server)) })
	}))
	p.indexRaw(nil)
	p.publishRoutes(slices.Collect(maps.Keys(obs.Servers)))
	p.listeners.changed(changed)
}

// applySet makes have (what the SDK server holds) match want: items gone or changed are
// removed, new ones added in name order. describe gives an item's identity and what sessions
// see of it: the typed item, and the item as its server listed it (both fingerprinted: a
// change of a field only the raw item shows is a change too). An item the SDK refuses is
// logged and left out. changed: the SDK server's set changed (it announces a list_changed).
func applySet[T any](p *project, kind string, have map[string]projected, want map[string]T,
	describe func(T) (projected, any), remove func(...string), add func(string, T) error) (changed bool) {
	seen := make(map[string]projected, len(want))
	for name, w := range want {
		id, visible := describe(w)
		h := sha256.New() // a digest, not the JSON: every project keeps one per item
		_ = json.NewEncoder(h).Encode(visible)
		if id.members != nil {
			fmt.Fprintf(h, "%t:", id.members.Newest)
			h.Write(id.members.Members)
		}
		id.fingerprint = string(h.Sum(nil))
		seen[name] = id
	}
	var gone []string
	for name, h := range have {
		if now, ok := seen[name]; !ok || !now.same(h) {
			gone = append(gone, name)
		}
	}
	if len(gone) > 0 {
		changed = true
		remove(gone...)
		for _, name := range gone {
			delete(have, name)
		}
	}
	var names []string
	for name := range want {
		if _, ok := have[name]; !ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		if err := add(name, want[name]); err != nil {
			p.g.opts.Log.Info("Skipped", "projectmcp", p.key.String(), kind, name, "error", err.Error())
			continue
		}
		have[name] = seen[name]
		changed = true
	}
	return changed
}

// addTool adds a tool, turning the SDK's panic on a schema it cannot use into an error.
func addTool(s *mcp.Server, t *mcp.Tool, h mcp.ToolHandler) error {
	return guard("tool", func() { s.AddTool(t, h) })
}

// guard turns a panic of the server library (it panics on input it cannot use) into an error.
func guard(kind string, add func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the server library refused the %s: %v", kind, r)
		}
	}()
	add()
	return nil
}

// publishRoutes publishes the sets as they are now, for the servers named, as the request path
// routes by them (paths.Routes). Callers hold cat.mu.
func (p *project) publishRoutes(servers []string) {
	p.cat.routes.Store(paths.NewRoutes(routesOf(p.cat.tools), routesOf(p.cat.prompts), routesOf(p.cat.resources),
		routesOf(p.cat.templates), servers, p.only))
}

// routesOf is where a set's items go.
func routesOf(set map[string]projected) map[string]paths.Route {
	out := make(map[string]paths.Route, len(set))
	for name, it := range set {
		out[name] = paths.Route{Server: it.server, Raw: it.raw, ParamHeaders: it.paramHeaders, Unlisted: it.unlisted}
	}
	return out
}

// current is the routes last published (empty before the first sync).
func (p *project) current() *paths.Routes {
	if r := p.cat.routes.Load(); r != nil {
		return r
	}
	return paths.NewRoutes(nil, nil, nil, nil, nil, p.only)
}
