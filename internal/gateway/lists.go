package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/jsonrpcwire"
)

// The four aggregated lists (tools/list, prompts/list, resources/list,
// resources/templates/list) are the SDK server's: it pages them, checks cursors, adds what
// each revision's results carry (ttlMs, cacheScope; resultType and serverInfo on 2026-07-28).
// Only the items are written here, each as its server listed it (conn.RawItem) under its
// projected name, instead of as the SDK's types encode it: those types model only the fields
// the SDK knows, and an item would lose every other (server-everything's tools lose
// `execution`). An item goes raw to a session that speaks its server's revision, as the
// results of forwarded requests do (paths: forwardrequest.go), and typed otherwise or when its server was listed
// through the SDK (legacy SSE).
//
// The SDK server's page holds the very pointers sync gave it (AddTool keeps the tool it is
// given), so the raw item is found by the pointer, not by the name: a page and the index are
// never of two different projections of one name.

// indexRaw publishes, by the pointer the SDK server holds, each item's raw form, and those of
// pending, items about to be added. Callers hold cat.mu.
func (p *project) indexRaw(pending map[any]*conn.RawItem) {
	idx := map[any]*conn.RawItem{}
	for item, raw := range pending {
		if raw != nil {
			idx[item] = raw
		}
	}
	for _, set := range []map[string]projected{p.cat.tools, p.cat.prompts, p.cat.resources, p.cat.templates} {
		for _, it := range set {
			if it.members != nil {
				idx[it.item] = it.members
			}
		}
	}
	p.cat.rawItems.Store(&idx)
}

// listMiddleware serves the list results' items raw where it can (see above).
func (p *project) listMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		if err != nil || res == nil {
			return res, err
		}
		idx := p.cat.rawItems.Load()
		if idx == nil || len(*idx) == 0 {
			return res, nil
		}
		ss, _ := req.GetSession().(*mcp.ServerSession)
		newest := ss == nil || ss.ID() == "" // 2026-07-28 sessions are the stateless ones
		switch r := res.(type) {
		case *mcp.ListToolsResult:
			if items, ok := encodeItems(*idx, newest, r.Tools, func(t *mcp.Tool) string { return t.Name }); ok {
				return &rawTools{r, items}, nil
			}
		case *mcp.ListPromptsResult:
			if items, ok := encodeItems(*idx, newest, r.Prompts, func(p *mcp.Prompt) string { return p.Name }); ok {
				return &rawPrompts{r, items}, nil
			}
		case *mcp.ListResourcesResult:
			if items, ok := encodeItems(*idx, newest, r.Resources, nil); ok {
				return &rawResources{r, items}, nil
			}
		case *mcp.ListResourceTemplatesResult:
			if items, ok := encodeItems(*idx, newest, r.ResourceTemplates, nil); ok {
				return &rawTemplates{r, items}, nil
			}
		}
		return res, nil
	}
}

// encodeItems encodes a page's items: raw where the index has the item from a server of the
// session's revision, typed otherwise. name gives a tool's or prompt's projected name, which
// the raw members leave out; nil for resources and templates, whose URIs are unchanged. ok is
// false when no item of the page is raw (the SDK's result is then served as it is).
func encodeItems[T any](idx map[any]*conn.RawItem, newest bool, page []*T, name func(*T) string) (items []json.RawMessage, ok bool) {
	items = make([]json.RawMessage, len(page))
	for i, it := range page {
		raw := idx[it]
		if raw == nil || raw.Newest != newest {
			continue
		}
		b := make([]byte, 0, len(raw.Members)+64)
		b = append(b, '{')
		if name != nil {
			b = append(b, `"name":`...)
			b = jsonrpcwire.AppendQuoted(b, name(it))
			if len(raw.Members) > 0 {
				b = append(b, ',')
			}
		}
		b = append(b, raw.Members...)
		items[i], ok = append(b, '}'), true
	}
	if !ok {
		return nil, false
	}
	for i, it := range page {
		if items[i] == nil {
			b, err := marshal(it)
			if err != nil {
				return nil, false
			}
			items[i] = b
		}
	}
	return items, true
}

// The SDK server's list results with their items written raw. Each embeds the SDK's result,
// whose methods the SDK still calls after the middleware (2026-07-28: resultType, serverInfo
// in _meta); only the encoding is this package's.
type (
	rawTools struct {
		*mcp.ListToolsResult
		items []json.RawMessage
	}
	rawPrompts struct {
		*mcp.ListPromptsResult
		items []json.RawMessage
	}
	rawResources struct {
		*mcp.ListResourcesResult
		items []json.RawMessage
	}
	rawTemplates struct {
		*mcp.ListResourceTemplatesResult
		items []json.RawMessage
	}
)

func (r *rawTools) MarshalJSON() ([]byte, error) {
	return spliceItems(r.ListToolsResult, func(e *mcp.ListToolsResult) { e.Tools = []*mcp.Tool{} }, "tools", r.items)
}

func (r *rawPrompts) MarshalJSON() ([]byte, error) {
	return spliceItems(r.ListPromptsResult, func(e *mcp.ListPromptsResult) { e.Prompts = []*mcp.Prompt{} }, "prompts", r.items)
}

func (r *rawResources) MarshalJSON() ([]byte, error) {
	return spliceItems(r.ListResourcesResult, func(e *mcp.ListResourcesResult) { e.Resources = []*mcp.Resource{} }, "resources", r.items)
}

func (r *rawTemplates) MarshalJSON() ([]byte, error) {
	return spliceItems(r.ListResourceTemplatesResult, func(e *mcp.ListResourceTemplatesResult) { e.ResourceTemplates = []*mcp.ResourceTemplate{} },
		"resourceTemplates", r.items)
}

// spliceItems encodes a copy of a list result whose list (field, its last member) empty
// empties, with items in the list.
func spliceItems[R any](res *R, empty func(*R), field string, items []json.RawMessage) ([]byte, error) {
	env := *res
	empty(&env)
	b, err := marshal(&env)
	if err != nil {
		return nil, err
	}
	suffix := []byte(`"` + field + `":[]}`)
	if !bytes.HasSuffix(b, suffix) {
		return nil, fmt.Errorf("a %s list result does not end with its list", field)
	}
	out := make([]byte, 0, len(b)+64*len(items))
	out = append(out, b[:len(b)-2]...) // up to and with the list's '['
	for i, it := range items {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, it...)
	}
	return append(out, "]}"...), nil
}

// marshal encodes as the SDK's server does (no HTML escaping), without the newline.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// listKinds are the lists whose results carry caching hints, by the type of their requests.
func listKind(req mcp.Request) (conn.Kind, bool) {
	switch req.(type) {
	case *mcp.ListToolsRequest:
		return conn.KindTool, true
	case *mcp.ListPromptsRequest:
		return conn.KindPrompt, true
	case *mcp.ListResourcesRequest:
		return conn.KindResource, true
	case *mcp.ListResourceTemplatesRequest:
		return conn.KindTemplate, true
	}
	return 0, false
}

// cacheHints gives a list's result the most cautious of its servers' caching hints (the
// lowest ttlMs, private if any says so; conn.CacheHints.Merge): a per-server endpoint's are its
// server's own. Servers that give none (2025-11-25) leave the SDK's default.
func (p *project) cacheHints(_ context.Context, req mcp.Request, c *mcp.Cacheable) {
	kind, ok := listKind(req)
	if !ok {
		return
	}
	var merged conn.CacheHints
	for _, st := range p.observe().Servers {
		if st.HasConn {
			merged = merged.Merge(st.Conn.CacheHints(kind))
		}
	}
	_, perIdentity := p.rbacOn() // an RBAC project's lists differ by identity: never shared
	if merged.Known {
		c.TTLMs, c.CacheScope = merged.TTLMs, "public"
	}
	if merged.Private || perIdentity {
		c.CacheScope = "private"
	}
}
