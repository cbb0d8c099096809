package projection

import (
	"encoding/json"
	"maps"
	"path"

	"github.com/modelcontextprotocol/go-sdk/mcp"
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

// Apply is a copy of t with the edit made; t and the maps it points to are never written
// (the upstream's tools are shared). A value that does not decode leaves that key as it was.
func (e Edit) Apply(t *mcp.Tool) *mcp.Tool {
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
