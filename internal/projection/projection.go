// Package projection computes the tool set a project's sessions see from the tools its servers
// offer. It is pure (no I/O, no clocks, no registry): the gateway uses it to serve tools and the
// controller to report them in status, and both must agree.
package projection

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/internal/toolname"
)

// Tool is one tool as sessions see it.
type Tool struct {
	// Server and Raw are the server the tool comes from and its name there.
	Server, Raw string
	// Tool is a copy of the upstream tool under its projected name, without the upstream's
	// _meta (which is its own business).
	Tool *mcp.Tool
}

// Note is something about a server's tools that status should say: a skipped tool and why.
type Note struct {
	Server, Message string
}

// Project computes the projected tool set: offered maps each server name to the tools it offers
// now (see registry.ServerState.Offered); the result maps projected names to tools.
//
// Names are toolname.Project(server, raw), so a tool's name never depends on what else is
// offered. Consequently a true collision, two tools projecting to the same name, is not
// resolved by renaming one (a rename would depend on the set and could change under a session):
// the later of the two in (server, raw) order is skipped, and a note names both. Tools whose
// input schema is not a JSON object are skipped with a note too. The same input always gives
// the same output.
func Project(offered map[string][]*mcp.Tool) (map[string]Tool, []Note) {
	tools := map[string]Tool{}
	var notes []Note
	servers := make([]string, 0, len(offered))
	for name := range offered {
		servers = append(servers, name)
	}
	sort.Strings(servers)
	for _, server := range servers {
		list := make([]*mcp.Tool, 0, len(offered[server]))
		for _, t := range offered[server] {
			if t != nil {
				list = append(list, t)
			}
		}
		// Stable: a raw name listed twice keeps its first listing.
		sort.SliceStable(list, func(i, j int) bool { return list[i].Name < list[j].Name })
		for _, t := range list {
			if err := checkSchema(t.InputSchema); err != nil {
				notes = append(notes, Note{server, fmt.Sprintf("tool %q skipped: %v", t.Name, err)})
				continue
			}
			name := toolname.Project(server, t.Name)
			if first, taken := tools[name]; taken {
				notes = append(notes, Note{server, collision(server, t.Name, name, first)})
				continue
			}
			out := *t
			out.Name = name
			out.Meta = nil
			tools[name] = Tool{Server: server, Raw: t.Name, Tool: &out}
		}
	}
	return tools, notes
}

// collision explains why tool raw of server was skipped.
func collision(server, raw, name string, first Tool) string {
	if first.Server == server && first.Raw == raw {
		return fmt.Sprintf("tool %q skipped: the server lists it more than once", raw)
	}
	return fmt.Sprintf("tool %q skipped: its name %q is already taken by tool %q of server %q (tools are never renamed)",
		raw, name, first.Raw, first.Server)
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
