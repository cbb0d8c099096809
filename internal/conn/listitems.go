package conn

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/internal/jsonrpcwire"
	"github.com/dsh-dev/projectmcp/internal/revision"
)

// Lists are read with forwarded requests on every session whose upstream takes them (stdio,
// streamable HTTP: see upstream.go), kept as the server sent them, and decoded into the SDK's
// types here, once, only when their bytes changed.
//
// Why: the SDK's types model only the fields its version knows. Decoded through them, an item
// a server lists loses every other field (server-everything's tools lose `execution`, a newer
// server's tools whatever the spec adds next), and a session behind the endpoint would see
// less than it sees talking to the server directly. So each item is kept as the server sent
// it too (RawItem), for the gateway to serve sessions that speak the server's revision. The
// typed items remain what the projection, status and the SDK server work with.
//
// The walk keeps the bounds of the typed path (walk: pages, items, bytes, the schema bound)
// and applies them as the pages come, before anything is decoded into the SDK's types; the
// sizes are the items' sizes as the server sent them.

// Kind is one of the four lists a server offers.
type Kind int

const (
	KindTool Kind = iota
	KindPrompt
	KindResource
	KindTemplate
	kinds
)

var (
	listMethods = [kinds]string{"tools/list", "prompts/list", "resources/list", "resources/templates/list"}
	listWhats   = [kinds]string{"tools", "prompts", "resources", "resource templates"}
)

// RawItem is one listed item as its server sent it.
type RawItem struct {
	// Members are the item's JSON object members in the server's order, without the braces;
	// a tool's and a prompt's without "name" (the gateway writes the projected one). _meta is
	// kept: it is how a server tells the host about a tool (an MCP App's ui.resourceUri).
	Members []byte
	// Newest: the server speaks 2026-07-28 (a session of the other revision gets the typed
	// item, as it does for the results of requests).
	Newest bool
	// TaskSupport is a tool's execution.taskSupport as a 2025-11-25 server listed it
	// (tasks.go): TaskRequired or TaskOptional, "" otherwise.
	TaskSupport string
}

// RawItem is the item of a kind listed under key (a tool's or prompt's name, a resource's
// URI, a template's URI template) as the server sent it, or nil: the server was listed
// through the SDK (legacy SSE), or listed two items under key.
func (s Snapshot) RawItem(kind Kind, key string) *RawItem {
	if s.catalog == nil {
		return nil
	}
	return s.catalog.raw[kind][key]
}

// listedItem is what the walk reads of each item: its key and a tool's schemas (for the
// schema bound), all as received. Every member is read as received, so a member of another
// kind's (a tool's own "uri", say) never fails the item, as the SDK's types ignore it.
type listedItem struct {
	Name         json.RawMessage `json:"name"`
	URI          json.RawMessage `json:"uri"`
	URITemplate  json.RawMessage `json:"uriTemplate"`
	InputSchema  json.RawMessage `json:"inputSchema"`
	OutputSchema json.RawMessage `json:"outputSchema"`
	raw          json.RawMessage
	name         string // the key of its kind (keyOf)
}

// keyOf reads the item's key for its kind: a tool's or prompt's name, a resource's URI, a
// template's URI template (a string, or the item cannot be read, as through the SDK).
func (it *listedItem) keyOf(kind Kind) error {
	member := [kinds]json.RawMessage{it.Name, it.Name, it.URI, it.URITemplate}[kind]
	if len(member) == 0 || string(member) == "null" {
		return nil // "", as the SDK reads a missing one
	}
	return jsonrpcwire.ParseExact(member, &it.name)
}

// listedPage is one page of any of the four lists, its lists as received (only the kind listed
// is read further).
type listedPage struct {
	Tools             json.RawMessage `json:"tools"`
	Prompts           json.RawMessage `json:"prompts"`
	Resources         json.RawMessage `json:"resources"`
	ResourceTemplates json.RawMessage `json:"resourceTemplates"`
	NextCursor        string          `json:"nextCursor"`
	// A 2026-07-28 server's caching hints for the page.
	TTLMs      *int   `json:"ttlMs"`
	CacheScope string `json:"cacheScope"`
}

// hints are the page's caching hints (Known false when it gives none).
func (p *listedPage) hints() CacheHints {
	if p.TTLMs == nil && p.CacheScope == "" {
		return CacheHints{}
	}
	h := CacheHints{Known: true, Private: p.CacheScope == "private"}
	if p.TTLMs != nil {
		h.TTLMs = max(*p.TTLMs, 0)
	}
	return h
}

func (p *listedPage) items(kind Kind) ([]json.RawMessage, error) {
	list := [kinds]json.RawMessage{p.Tools, p.Prompts, p.Resources, p.ResourceTemplates}[kind]
	if len(list) == 0 || string(list) == "null" {
		return nil, nil
	}
	var items []json.RawMessage
	return items, jsonrpcwire.ParseExact(list, &items)
}

// listedItems is one forwarded listing of a server: the items kept, in the order listed, and a
// digest of every page's bytes.
type listedItems struct {
	items  [kinds][]*listedItem
	hints  [kinds]CacheHints // each list's: the most cautious of its pages'
	tools  *toolSieve        // what the tools list left out
	newest bool
	digest [sha256.Size]byte
}

// fetch walks every page of each list the server declares (declared), and of no other,
// forwarded, at once (as list does). The first to fail ends the others, and its error is the
// one returned.
func (l *lister) fetch(ctx context.Context) (*listedItems, error) {
	g, ctx := atOnce(ctx)
	items := &listedItems{newest: revision.Of(l.session.InitializeResult().ProtocolVersion) >= revision.Stateless, tools: l.sieve()}
	var digests [kinds]hash.Hash
	for _, kind := range declared(l.session.InitializeResult().Capabilities) {
		digests[kind] = sha256.New()
		g.run(listMethods[kind], func() error { return l.walkForwarded(ctx, kind, items, digests[kind]) })
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	h := sha256.New()
	for kind, d := range digests {
		if d != nil {
			fmt.Fprintf(h, "%d:", kind)
			h.Write(d.Sum(nil))
		}
	}
	h.Sum(items.digest[:0])
	return items, nil
}

// walkForwarded walks one list within the bounds (walk), keeping its items in
// out.items[kind] and the pages' bytes in digest. Only out.items[kind] (and, for tools, the
// counts) are written.
func (l *lister) walkForwarded(ctx context.Context, kind Kind, out *listedItems, digest hash.Hash) error {
	method := listMethods[kind]
	page := func(ctx context.Context, cursor string) ([]*listedItem, string, error) {
		var members []byte
		if cursor != "" {
			members = jsonrpcwire.AppendQuoted([]byte(`"cursor":`), cursor)
		}
		res, err := l.up.call(ctx, method, members, nil)
		if err != nil {
			return nil, "", err
		}
		digest.Write(res)
		var pg listedPage
		if err := jsonrpcwire.DecodeExact(res, &pg); err != nil {
			return nil, "", fmt.Errorf("the server's answer is not a list of %s: %v", listWhats[kind], err)
		}
		raws, err := pg.items(kind)
		if err != nil {
			return nil, "", fmt.Errorf("the server's answer is not a list of %s: %v", listWhats[kind], err)
		}
		out.hints[kind] = out.hints[kind].Merge(pg.hints())
		got := make([]*listedItem, 0, len(raws))
		for i, raw := range raws {
			if string(raw) == "null" {
				continue // as the SDK's client does with a null tool
			}
			it := &listedItem{raw: raw}
			err := jsonrpcwire.ParseExact(raw, it)
			if err == nil {
				err = it.keyOf(kind)
			}
			if err != nil {
				return nil, "", fmt.Errorf("item %d of the server's %s cannot be read: %v", i, listWhats[kind], err)
			}
			got = append(got, it)
		}
		return got, pg.NextCursor, nil
	}
	keep := func(it *listedItem) int64 {
		out.items[kind] = append(out.items[kind], it)
		return int64(len(it.raw))
	}
	if kind == KindTool {
		keep = func(it *listedItem) int64 {
			size := int64(len(it.raw))
			if !out.tools.offered(it.name) || out.tools.tooLarge(it.name, size, func() int64 { return int64(len(it.InputSchema) + len(it.OutputSchema)) }) {
				return 0
			}
			out.items[kind] = append(out.items[kind], it)
			return size
		}
	}
	return walk(ctx, l.opts, method, listWhats[kind], page, keep)
}

// catalog decodes the items kept into the SDK's types, each beside its RawItem, and interns
// the catalog.
func (l *listedItems) catalog() (*catalog, error) {
	cat := catalog{hints: l.hints}
	l.tools.note(&cat)
	var err error
	if cat.tools, err = decodeItems[mcp.Tool](l, KindTool, &cat); err != nil {
		return nil, err
	}
	l.dropInvalidHeaders(&cat)
	if cat.prompts, err = decodeItems[mcp.Prompt](l, KindPrompt, &cat); err != nil {
		return nil, err
	}
	if cat.resources, err = decodeItems[mcp.Resource](l, KindResource, &cat); err != nil {
		return nil, err
	}
	if cat.templates, err = decodeItems[mcp.ResourceTemplate](l, KindTemplate, &cat); err != nil {
		return nil, err
	}
	slices.SortFunc(cat.tools, func(a, b *mcp.Tool) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(cat.prompts, func(a, b *mcp.Prompt) int { return strings.Compare(a.Name, b.Name) })
	return intern(cat), nil
}

// decodeItems decodes the items of a kind, and notes each one's RawItem under its key; a key
// listed twice has none (which item would it be?).
func decodeItems[T any](l *listedItems, kind Kind, cat *catalog) ([]*T, error) {
	items := l.items[kind]
	if len(items) == 0 {
		return nil, nil
	}
	out := make([]*T, 0, len(items))
	raws := make(map[string]*RawItem, len(items))
	twice := map[string]bool{}
	for _, it := range items {
		v := new(T)
		if err := jsonrpcwire.ParseExact(it.raw, v); err != nil {
			return nil, fmt.Errorf("%s failed: the server's %s %q: %v", listMethods[kind], strings.TrimSuffix(listWhats[kind], "s"), it.name, err)
		}
		out = append(out, v)
		key := it.name
		if _, dup := raws[key]; dup {
			twice[key] = true
			continue
		}
		members, err := itemMembers(it.raw, kind)
		if err != nil {
			return nil, fmt.Errorf("%s failed: %v", listMethods[kind], err)
		}
		raws[key] = &RawItem{Members: members, Newest: l.newest, TaskSupport: taskSupportOf(kind, it.raw, l.newest)}
	}
	for key := range twice {
		delete(raws, key)
	}
	cat.raw[kind] = raws
	return out, nil
}

// dropInvalidHeaders leaves out the tools whose x-mcp-header annotations the SDK refuses (the
// SDK's client left them out of tools/list, whatever the revision, and the gateway's SDK
// server will not take them), with a note. The SDK's own check decides: a tool is added to a
// scratch server, which refuses such a tool by panicking.
func (l *listedItems) dropInvalidHeaders(cat *catalog) {
	var scratch *mcp.Server
	kept := cat.tools[:0]
	for i, t := range cat.tools { // in the order listed, as l.items
		if !bytes.Contains(l.items[KindTool][i].InputSchema, []byte("x-mcp-header")) {
			kept = append(kept, t)
			continue
		}
		if scratch == nil {
			scratch = mcp.NewServer(&mcp.Implementation{Name: "check", Version: "1"}, nil)
		}
		if why := invalidHeaders(scratch, t); why != "" {
			cat.notes = append(cat.notes, fmt.Sprintf("left out tool %s: its x-mcp-header annotations are invalid (%s)", shortName(t.Name), why))
			delete(cat.raw[KindTool], t.Name)
			continue
		}
		kept = append(kept, t)
	}
	cat.tools = kept
}

// invalidHeaders says why the SDK refuses a tool's x-mcp-header annotations, or "".
func invalidHeaders(scratch *mcp.Server, t *mcp.Tool) (why string) {
	const refused = "invalid parameter header annotations: "
	defer func() {
		if r := recover(); r != nil {
			if _, after, ok := strings.Cut(fmt.Sprint(r), refused); ok {
				why = after
			}
		}
	}()
	scratch.AddTool(t, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) { return nil, nil })
	scratch.RemoveTools(t.Name)
	return ""
}

// itemMembers are a listed item's members as sessions get them: without the name of a tool or
// prompt (the gateway writes the one sessions see), and with a tool's execution.taskSupport
// only when it is "forbidden" (the default when absent; execution is left out when nothing
// else is in it): the gateway does not carry Tasks, so no session is to start one.
func itemMembers(raw json.RawMessage, kind Kind) ([]byte, error) {
	members, err := objectMembers(raw, kind == KindTool || kind == KindPrompt)
	if err != nil || kind != KindTool || !bytes.Contains(members, []byte(`"taskSupport"`)) {
		return members, err
	}
	return editMember(members, "execution", func(v json.RawMessage) json.RawMessage {
		if len(v) < 2 || v[0] != '{' {
			return v
		}
		inner, err := editMember(v[1:len(v)-1], "taskSupport", func(v json.RawMessage) json.RawMessage {
			if string(v) == `"forbidden"` {
				return v
			}
			return nil
		})
		if err != nil || len(inner) == 0 {
			return nil
		}
		return append(append([]byte{'{'}, inner...), '}')
	})
}

// editMember replaces the value of key among an object's members (without braces) by what
// edit makes of it, or leaves the member out when edit returns nil.
func editMember(members []byte, key string, edit func(json.RawMessage) json.RawMessage) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(append(append([]byte{'{'}, members...), '}')))
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(members))
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		k, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		if k == key {
			if v = edit(bytes.TrimSpace(v)); v == nil {
				continue
			}
		}
		out = jsonrpcwire.AppendMember(out, k, v)
	}
	return out, nil
}

// objectMembers returns a JSON object's members without its braces, in order, without "name"
// when drop is set (the gateway writes the name sessions see).
func objectMembers(raw json.RawMessage, drop bool) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, errors.New("an item is not a JSON object")
	}
	out := make([]byte, 0, len(raw))
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		if drop && key == "name" {
			continue
		}
		out = jsonrpcwire.AppendMember(out, key, v)
	}
	return out, nil
}

// primeToolCache lists the tools through the SDK too on a 2026-07-28 streamable HTTP session
// whose tools ask for Mcp-Param headers: the SDK's client sets those headers on a call only
// for tools it has listed itself.
func (l *lister) primeToolCache(ctx context.Context, cat *catalog) error {
	if !l.up.toolHeaders() {
		return nil
	}
	if !slices.ContainsFunc(cat.tools, func(t *mcp.Tool) bool {
		raw := cat.raw[KindTool][t.Name]
		return raw != nil && bytes.Contains(raw.Members, []byte("x-mcp-header"))
	}) {
		return nil
	}
	cursor := ""
	for range l.opts.MaxListPages {
		res, err := l.session.ListTools(ctx, &mcp.ListToolsParams{Cursor: cursor})
		if err != nil {
			return fmt.Errorf("tools/list failed: %w", err)
		}
		if cursor = res.NextCursor; cursor == "" {
			return nil
		}
	}
	return tooManyPages("tools/list", l.opts.MaxListPages)
}

// forwarded lists with forwarded requests and returns the catalog, or nil when the pages'
// bytes are those the digest unless was taken of (nothing changed).
func (l *lister) forwarded(ctx context.Context, unless [sha256.Size]byte) (*catalog, [sha256.Size]byte, error) {
	items, err := l.fetch(ctx)
	if err != nil {
		return nil, unless, err
	}
	if items.digest == unless {
		return nil, unless, nil
	}
	l.counts.lists.Add(1)
	cat, err := items.catalog()
	if err == nil {
		err = l.primeToolCache(ctx, cat)
	}
	if err != nil {
		return nil, unless, err
	}
	return cat, items.digest, nil
}
