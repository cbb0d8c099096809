package projection

import (
	"encoding/json"
	"fmt"
	"maps"
	"path"
	"slices"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
)

// Hints are what a server's spec says of its tools to the clients that list them.
type Hints struct {
	// AlwaysLoad marks each tool with MetaAlwaysLoad (the spec's alwaysLoad).
	AlwaysLoad bool
	// Tools are the spec's toolHints, in order.
	Tools []ToolHint
}

// ToolHint is one of a server's toolHints: what clients are told of the tools whose own
// names match Tools (a path.Match glob; a malformed glob matches nothing).
type ToolHint struct {
	Tools       string
	Meta        map[string]json.RawMessage
	Description *string
	// Annotations are keyed as in mcp.ToolAnnotations' JSON form.
	Annotations map[string]json.RawMessage
}

// SpecHints are the hints of a server whose spec says alwaysLoad and toolHints; the
// annotations become their JSON members, so that a tool's typed and raw forms get the same keys.
func SpecHints(alwaysLoad bool, spec []v1alpha1.ToolHint) Hints {
	h := Hints{AlwaysLoad: alwaysLoad}
	for _, sh := range spec {
		th := ToolHint{Tools: sh.Tools, Description: sh.Description}
		for k, v := range sh.Meta {
			if th.Meta == nil {
				th.Meta = map[string]json.RawMessage{}
			}
			th.Meta[k] = json.RawMessage(v.Raw)
		}
		if sh.Annotations != nil {
			b, _ := json.Marshal(sh.Annotations) // a struct of strings and bools always encodes
			_ = json.Unmarshal(b, &th.Annotations)
		}
		h.Tools = append(h.Tools, th)
	}
	return h
}

// MetaAlwaysLoad is the _meta key that asks Claude Code to load a tool up front rather than
// defer it behind its tool search.
const MetaAlwaysLoad = "anthropic/alwaysLoad"

// Edit is what the hints change of one tool: the entries of the hints that match it merged
// in order, so a later entry's key replaces an earlier one's.
type Edit struct {
	Meta        map[string]json.RawMessage
	Description *string
	Annotations map[string]json.RawMessage
}

// Empty reports whether the edit changes nothing.
func (e Edit) Empty() bool {
	return len(e.Meta) == 0 && e.Description == nil && len(e.Annotations) == 0
}

// EditOf is the edit the hints make to the tool named tool by its server. alwaysLoad comes
// first, so a tool hint may set the mark to something else.
func (h Hints) EditOf(tool string) Edit {
	var e Edit
	if h.AlwaysLoad {
		e.Meta = map[string]json.RawMessage{MetaAlwaysLoad: json.RawMessage("true")}
	}
	for _, th := range h.Tools {
		if ok, err := path.Match(th.Tools, tool); err != nil || !ok {
			continue
		}
		e.Meta = merged(e.Meta, th.Meta)
		e.Annotations = merged(e.Annotations, th.Annotations)
		if th.Description != nil {
			e.Description = th.Description
		}
	}
	return e
}

// globNotes say which tool hints match nothing because their glob is malformed (the file's
// reader refuses them; a resource written by hand may have them), server by server.
func globNotes(hints map[string]Hints) []Note {
	var notes []Note
	for _, server := range slices.Sorted(maps.Keys(hints)) {
		for _, th := range hints[server].Tools {
			if _, err := path.Match(th.Tools, ""); err != nil {
				notes = append(notes, Note{server, fmt.Sprintf("toolHints %q is not a glob (%v): it matches no tool", th.Tools, err)})
			}
		}
	}
	return notes
}

// merged is base with over's entries set, as a new map when over has any (base is never
// written: it may be a hint's own map).
func merged(base, over map[string]json.RawMessage) map[string]json.RawMessage {
	if len(over) == 0 {
		return base
	}
	out := maps.Clone(base)
	if out == nil {
		out = map[string]json.RawMessage{}
	}
	maps.Copy(out, over)
	return out
}

// hinted is offered with each server's hints made to its tools, before anything is checked
// or noted of them (a hinted description is the one Claude Code cuts). The lists and tools
// that change are new: the upstream's are shared and never written.
func hinted(offered map[string][]*mcp.Tool, hints map[string]Hints) map[string][]*mcp.Tool {
	if len(hints) == 0 {
		return offered
	}
	out := make(map[string][]*mcp.Tool, len(offered))
	for server, list := range offered {
		h, ok := hints[server]
		if !ok {
			out[server] = list
			continue
		}
		edited := make([]*mcp.Tool, len(list))
		for i, t := range list {
			if t != nil { // project leaves nil out
				edited[i] = h.EditOf(t.Name).Apply(t)
			}
		}
		out[server] = edited
	}
	return out
}

// Apply is t with the edit made: t itself when the edit is empty, else a copy; t and the maps
// it points to are never written (the upstream's tools are shared). A value that does not
// decode leaves that key as it was.
func (e Edit) Apply(t *mcp.Tool) *mcp.Tool {
	if e.Empty() {
		return t
	}
	out := *t
	if len(e.Meta) > 0 {
		out.Meta = maps.Clone(out.Meta)
		if out.Meta == nil {
			out.Meta = mcp.Meta{}
		}
		for k, raw := range e.Meta {
			var v any
			if json.Unmarshal(raw, &v) == nil {
				out.Meta[k] = v
			}
		}
	}
	if e.Description != nil {
		out.Description = *e.Description
	}
	if len(e.Annotations) > 0 {
		out.Annotations = annotated(t.Annotations, e.Annotations)
	}
	return &out
}

// annotated is a new annotations value: base's with the keys of over replaced.
func annotated(base *mcp.ToolAnnotations, over map[string]json.RawMessage) *mcp.ToolAnnotations {
	fields := map[string]json.RawMessage{}
	if base != nil {
		if b, err := json.Marshal(base); err == nil {
			_ = json.Unmarshal(b, &fields) // an object: it was just marshalled from a struct
		}
	}
	maps.Copy(fields, over)
	out := &mcp.ToolAnnotations{}
	for k, v := range fields {
		// one key at a time, so that one value of the wrong type spoils only its own key
		b, _ := json.Marshal(map[string]json.RawMessage{k: v})
		_ = json.Unmarshal(b, out)
	}
	return out
}
