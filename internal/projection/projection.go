// Package projection computes the tool set a project's sessions see from the tools its servers
// offer. It is pure (no I/O, no clocks, no registry): the gateway uses it to serve tools and the
// controller to report them in status, and both must agree.
package projection

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/internal/toolname"
)

// Tool is one tool as sessions see it.
type Tool struct {
	// Server and Raw are the server the tool comes from and its name there.
	Server, Raw string
	// Tool is a copy of the upstream tool under its projected name, its _meta included (an MCP
	// App's ui.resourceUri, the host's business).
	Tool *mcp.Tool
}

// Note is something about a server's tools that status should say: a skipped tool and why, or
// a text the client cuts.
type Note struct {
	Server, Message string
}

// ClientTextLimit is how many bytes of a tool's description, and of a server's instructions,
// Claude Code keeps: it cuts what goes past. Counting bytes rather than characters errs toward
// saying so: a text within the limit in bytes is within it in characters too.
const ClientTextLimit = 2048

// cutNote says that Claude Code cuts a text of size bytes (what names the text, e.g. `tool
// "x": a description`), and that the gateway still serves it whole.
func cutNote(what string, size int) string {
	return fmt.Sprintf("%s of %d bytes, over the %d (2 KB) Claude Code keeps: Claude Code cuts the rest (served whole here)", what, size, ClientTextLimit)
}

// InstructionsNote is the note on a server's instructions that Claude Code cuts, if they are
// over ClientTextLimit.
func InstructionsNote(server, instructions string) (Note, bool) {
	if len(instructions) <= ClientTextLimit {
		return Note{}, false
	}
	return Note{server, cutNote("instructions", len(instructions))}, true
}

// Project computes the projected tool set: offered maps each server name to the tools it offers
// now (see registry.ServerState.Offered), budget bounds a name's length (toolname.Project's
// budget, --max-tool-name) and hints are each server's (a server without an entry has none);
// the result maps projected names to tools.
//
// Names are toolname.Project(server, raw, budget), so a tool's name never depends on what else is
// offered. Consequently a true collision, two tools projecting to the same name, is not
// resolved by renaming one (a rename would depend on the set and could change under a session):
// the later of the two in (server, raw) order is skipped, and a note names both. Tools whose
// input schema is not a JSON object are skipped with a note too. The same input always gives
// the same output. A description over ClientTextLimit gets a note too; the tool is served
// whole.
func Project(offered map[string][]*mcp.Tool, budget int, hints map[string]Hints) (map[string]Tool, []Note) {
	named, notes := project(hinted(offered, hints), budget, "tool", func(t *mcp.Tool) string { return t.Name }, func(t *mcp.Tool) error {
		return checkSchema(t.InputSchema)
	}, longDescription)
	notes = append(notes, globNotes(hints)...)
	tools := make(map[string]Tool, len(named))
	for name, n := range named {
		out := *n.item
		out.Name = name
		tools[name] = Tool{Server: n.server, Raw: n.raw, Tool: &out}
	}
	return tools, notes
}

// Prompt is one prompt as sessions see it.
type Prompt struct {
	// Server and Raw are the server the prompt comes from and its name there.
	Server, Raw string
	// Prompt is a copy of the upstream prompt under its projected name, _meta included.
	Prompt *mcp.Prompt
}

// Prompts projects prompts exactly as Project projects tools: the same pure naming function
// (toolname.Project) within the same budget, and a true collision skipped with a note, never
// renamed.
func Prompts(offered map[string][]*mcp.Prompt, budget int) (map[string]Prompt, []Note) {
	named, notes := project(offered, budget, "prompt", func(p *mcp.Prompt) string { return p.Name }, nil, nil)
	prompts := make(map[string]Prompt, len(named))
	for name, n := range named {
		out := *n.item
		out.Name = name
		prompts[name] = Prompt{Server: n.server, Raw: n.raw, Prompt: &out}
	}
	return prompts, notes
}

type named[T any] struct {
	server, raw string
	item        T
}

// longDescription is the note on a tool whose description Claude Code cuts, or "".
func longDescription(t *mcp.Tool) string {
	if len(t.Description) <= ClientTextLimit {
		return ""
	}
	return cutNote(fmt.Sprintf("tool %q: a description", t.Name), len(t.Description))
}

// project names the items of every server (kind is "tool" or "prompt", for notes): servers in
// name order, each server's items in raw-name order, items that fail check skipped, and the
// later of two items that project to the same name skipped. warn (when not nil) says what
// there is to say of an item that is kept ("" for nothing).
func project[T any](offered map[string][]T, budget int, kind string, rawName func(T) string, check func(T) error, warn func(T) string) (map[string]named[T], []Note) {
	out := map[string]named[T]{}
	var notes []Note
	for _, server := range slices.Sorted(maps.Keys(offered)) {
		list := slices.Clone(offered[server])
		list = slices.DeleteFunc(list, func(v T) bool { return any(v) == nil || reflect.ValueOf(v).IsNil() })
		// Stable: a raw name listed twice keeps its first listing.
		slices.SortStableFunc(list, func(a, b T) int { return strings.Compare(rawName(a), rawName(b)) })
		for _, v := range list {
			raw := rawName(v)
			if check != nil {
				if err := check(v); err != nil {
					notes = append(notes, Note{server, fmt.Sprintf("%s %q skipped: %v", kind, raw, err)})
					continue
				}
			}
			name := toolname.Project(server, raw, budget)
			if first, taken := out[name]; taken {
				notes = append(notes, Note{server, collision(kind, server, raw, name, first.server, first.raw)})
				continue
			}
			out[name] = named[T]{server: server, raw: raw, item: v}
			if warn != nil {
				if msg := warn(v); msg != "" {
					notes = append(notes, Note{server, msg})
				}
			}
		}
	}
	return out, notes
}

// collision explains why an item was skipped.
func collision(kind, server, raw, name, firstServer, firstRaw string) string {
	if firstServer == server && firstRaw == raw {
		return fmt.Sprintf("%s %q skipped: the server lists it more than once", kind, raw)
	}
	return fmt.Sprintf("%s %q skipped: its name %q is already taken by %s %q of server %q (names are never changed to avoid a clash)",
		kind, raw, name, kind, firstRaw, firstServer)
}

// checkSchema accepts what the server library accepts: a JSON object schema.
func checkSchema(schema any) error {
	var m map[string]any
	switch s := schema.(type) {
	case nil:
		return errors.New("no input schema")
	case map[string]any:
		m = s
	case json.RawMessage:
		if err := json.Unmarshal(s, &m); err != nil {
			return errors.New("input schema is not a JSON object")
		}
	default:
		data, err := json.Marshal(s)
		if err != nil || json.Unmarshal(data, &m) != nil {
			return errors.New("input schema is not a JSON object")
		}
	}
	switch t, ok := m["type"]; {
	case m == nil:
		return errors.New("input schema is not a JSON object")
	case !ok:
		return errors.New(`input schema has no type; it must be "object"`)
	case t != "object":
		data, _ := json.Marshal(t)
		return fmt.Errorf(`input schema type is %s, not "object"`, data)
	}
	return nil
}

// Resource is one resource as sessions see it: its URI passes unchanged (links inside tool
// results must stay valid), so only the server it is routed to is added.
type Resource struct {
	Server   string
	Resource *mcp.Resource
}

// Template is one resource template as sessions see it, with the server it is routed to.
type Template struct {
	Server   string
	Template *mcp.ResourceTemplate
}

// Resources merges the servers' resources (keyed by URI) and resource templates (keyed by
// URI template). A URI or template that two servers list goes to the first in server-name
// order; the later one is skipped and a note names both.
func Resources(resources map[string][]*mcp.Resource, templates map[string][]*mcp.ResourceTemplate) (map[string]Resource, map[string]Template, []Note) {
	var notes []Note
	byURI := map[string]Resource{}
	for _, server := range slices.Sorted(maps.Keys(resources)) {
		for _, r := range resources[server] {
			if r == nil {
				continue
			}
			if first, taken := byURI[r.URI]; taken {
				if first.Server != server {
					notes = append(notes, Note{server, fmt.Sprintf("resource %q skipped: server %q lists the same URI and comes first", r.URI, first.Server)})
				}
				continue
			}
			byURI[r.URI] = Resource{Server: server, Resource: r}
		}
	}
	byTemplate := map[string]Template{}
	for _, server := range slices.Sorted(maps.Keys(templates)) {
		for _, t := range templates[server] {
			if t == nil {
				continue
			}
			if first, taken := byTemplate[t.URITemplate]; taken {
				if first.Server != server {
					notes = append(notes, Note{server, fmt.Sprintf("resource template %q skipped: server %q lists the same template and comes first", t.URITemplate, first.Server)})
				}
				continue
			}
			byTemplate[t.URITemplate] = Template{Server: server, Template: t}
		}
	}
	return byURI, byTemplate, notes
}
