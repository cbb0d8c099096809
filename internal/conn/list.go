package conn

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/sync/errgroup"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
)

// lister reads what the server of one session offers, within the bounds, and probes that it
// answers: the connection's own requests, which no session asked for. It is made for each
// session and holds nothing of its own between listings (the supervisor keeps the digest of
// the last one).
type lister struct {
	opts    *Options
	counts  *counters
	session *mcp.ClientSession
	up      upstream // nil: legacy SSE, listed on the typed path
}

// list lists every page of what the server offers: the lists it declared at initialize and no
// other (declared), tools filtered by the server's allow/deny rules. A server need not answer a
// list it did not declare (many answer method not found), so an undeclared list is empty, not
// a failure. Each list is walked within the bounds (walk). The lists are asked for at once,
// not one after another: a connection is Ready, and a repoint's new tools reach the sessions,
// one round trip after initialize instead of four (at 1,000 projects on a loaded machine a
// round trip took 0.3 s). The first list to fail ends the others, and its error is the one
// reported. On a session whose upstream takes forwarded requests the lists are forwarded
// (listitems.go), and digest is of their pages; cat is nil when those are the pages the digest
// unless was taken of (nothing changed). Otherwise (legacy SSE) they are listed on the typed
// path (typed), and the digest is unless.
func (l *lister) list(ctx context.Context, unless [sha256.Size]byte) (cat *catalog, digest [sha256.Size]byte, err error) {
	ctx, cancel := context.WithTimeout(ctx, l.opts.ConnectTimeout)
	defer cancel()
	if l.up != nil && l.up.takes() {
		return l.forwarded(ctx, unless)
	}
	l.counts.lists.Add(1)
	cat, err = l.typed(ctx)
	return cat, unless, err
}

// declared are the lists a server declared at initialize, of the four: tools/list for the tools
// capability, prompts/list for prompts, and resources/list and resources/templates/list for
// resources.
func declared(caps *mcp.ServerCapabilities) []Kind {
	var kinds []Kind
	if caps == nil {
		return nil
	}
	if caps.Tools != nil {
		kinds = append(kinds, KindTool)
	}
	if caps.Prompts != nil {
		kinds = append(kinds, KindPrompt)
	}
	if caps.Resources != nil {
		kinds = append(kinds, KindResource, KindTemplate)
	}
	return kinds
}

// typed is list on the SDK's typed path, for a session that takes no forwarded requests
// (legacy SSE).
func (l *lister) typed(ctx context.Context) (*catalog, error) {
	session := l.session
	var cat catalog
	g, ctx := atOnce(ctx)
	for _, kind := range declared(session.InitializeResult().Capabilities) {
		method := listMethods[kind]
		switch kind {
		case KindTool:
			g.run(method, func() error { return l.tools(ctx, &cat) })
		case KindPrompt:
			g.run(method, func() (err error) {
				cat.prompts, err = collect(ctx, l.opts, method, listWhats[kind], func(ctx context.Context, cursor string) ([]*mcp.Prompt, string, error) {
					res, err := session.ListPrompts(ctx, &mcp.ListPromptsParams{Cursor: cursor})
					if err != nil {
						return nil, "", err
					}
					return res.Prompts, res.NextCursor, nil
				})
				slices.SortFunc(cat.prompts, func(a, b *mcp.Prompt) int { return strings.Compare(a.Name, b.Name) })
				return err
			})
		case KindResource:
			g.run(method, func() (err error) {
				cat.resources, err = collect(ctx, l.opts, method, listWhats[kind], func(ctx context.Context, cursor string) ([]*mcp.Resource, string, error) {
					res, err := session.ListResources(ctx, &mcp.ListResourcesParams{Cursor: cursor})
					if err != nil {
						return nil, "", err
					}
					return res.Resources, res.NextCursor, nil
				})
				return err
			})
		case KindTemplate:
			g.run(method, func() (err error) {
				cat.templates, err = collect(ctx, l.opts, method, listWhats[kind], func(ctx context.Context, cursor string) ([]*mcp.ResourceTemplate, string, error) {
					res, err := session.ListResourceTemplates(ctx, &mcp.ListResourceTemplatesParams{Cursor: cursor})
					if err != nil {
						return nil, "", err
					}
					return res.ResourceTemplates, res.NextCursor, nil
				})
				return err
			})
		}
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return intern(cat), nil
}

// listGroup runs a server's lists at once: the first to fail ends the others (the catalog is
// lost anyway), and its error, naming its method, is the one reported.
type listGroup struct{ *errgroup.Group }

// atOnce starts a group; its lists run in the context returned.
func atOnce(ctx context.Context) (listGroup, context.Context) {
	g, ctx := errgroup.WithContext(ctx)
	return listGroup{g}, ctx
}

func (g listGroup) run(method string, fn func() error) {
	g.Go(func() error {
		if err := fn(); err != nil {
			return fmt.Errorf("%s failed: %w", method, err)
		}
		return nil
	})
}

// tools lists every page of tools and applies the server's allow/deny filter and the
// schema bound: a tool whose schemas are over --max-schema-bytes is left out, with a note.
func (l *lister) tools(ctx context.Context, cat *catalog) error {
	sieve := l.sieve()
	err := walk(ctx, l.opts, "tools/list", "tools", func(ctx context.Context, cursor string) ([]*mcp.Tool, string, error) {
		res, err := l.session.ListTools(ctx, &mcp.ListToolsParams{Cursor: cursor})
		if err != nil {
			return nil, "", err
		}
		return res.Tools, res.NextCursor, nil
	}, func(tool *mcp.Tool) int64 {
		if !sieve.offered(tool.Name) {
			return 0
		}
		size := jsonSize(tool)
		if sieve.tooLarge(tool.Name, size, func() int64 { return jsonSize(tool.InputSchema) + jsonSize(tool.OutputSchema) }) {
			return 0
		}
		cat.tools = append(cat.tools, tool)
		return size
	})
	if err != nil {
		return err
	}
	slices.SortFunc(cat.tools, func(a, b *mcp.Tool) int { return strings.Compare(a.Name, b.Name) })
	sieve.note(cat)
	return nil
}

// toolSieve applies a server's allow/deny filter and the schema bound to its tools as they are
// listed (forwarded or on the typed path), and says what it left out.
type toolSieve struct {
	filter    *v1alpha1.ToolFilter
	maxSchema int64
	listed    int      // every tool listed, before the filter and the bound
	omitted   []string // tools over the schema bound
	sizes     []int64  // their schemas' sizes
}

func (l *lister) sieve() *toolSieve {
	return &toolSieve{filter: l.opts.Server.Tools, maxSchema: l.opts.MaxSchemaBytes}
}

// offered counts a listed tool and reports whether the filter offers it.
func (s *toolSieve) offered(name string) bool {
	s.listed++
	return Offered(s.filter, name)
}

// tooLarge reports whether a tool of size bytes is left out for its schemas' size (schemas
// gives it, asked only when the whole tool is over the bound, the schemas being part of it).
func (s *toolSieve) tooLarge(name string, size int64, schemas func() int64) bool {
	if size <= s.maxSchema {
		return false
	}
	n := schemas()
	if n <= s.maxSchema {
		return false
	}
	s.omitted, s.sizes = append(s.omitted, name), append(s.sizes, n)
	return true
}

// note records in cat the tools listed and those left out for the bound, with a note.
func (s *toolSieve) note(cat *catalog) {
	cat.rawTools, cat.omitted = s.listed, len(s.omitted)
	if len(s.omitted) > 0 {
		cat.notes = append(cat.notes, schemaNote(s.omitted, s.sizes, s.maxSchema))
	}
}

// page lists one page of a list from cursor: its items and the next cursor ("" at the end).
type page[T any] func(ctx context.Context, cursor string) ([]*T, string, error)

// walk goes through every page of one list within the bounds: at most MaxListPages pages and
// MaxListItems items, and the sizes keep returns (what each item kept costs; 0 for an item
// dropped) at most MaxListBytes together. method names the list in errors, what its items.
func walk[T any](ctx context.Context, o *Options, method, what string, list page[T], keep func(*T) int64) error {
	cursor, items, kept := "", 0, int64(0)
	for pages := 1; ; pages++ {
		got, next, err := list(ctx, cursor)
		if err != nil {
			return err
		}
		for _, v := range got {
			if v == nil {
				continue
			}
			if items == o.MaxListItems {
				return tooMany(what, o.MaxListItems)
			}
			items++
			if kept += keep(v); kept > o.MaxListBytes {
				return tooManyBytes(what, o.MaxListBytes)
			}
		}
		if next == "" {
			return nil
		}
		if pages == o.MaxListPages {
			return tooManyPages(method, o.MaxListPages)
		}
		cursor = next
	}
}

// collect walks a list and keeps every item.
func collect[T any](ctx context.Context, o *Options, method, what string, list page[T]) ([]*T, error) {
	var out []*T
	err := walk(ctx, o, method, what, list, func(v *T) int64 {
		out = append(out, v)
		return jsonSize(v)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// jsonSize is the size of v as JSON (0 when it has none).
func jsonSize(v any) int64 {
	if v == nil {
		return 0
	}
	data, err := json.Marshal(v)
	if err != nil {
		return 0
	}
	return int64(len(data))
}
