package config

import (
	"encoding/json"
	"fmt"
	"path"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
)

var (
	toolHintKeys   = []string{"tools", "meta", "description", "annotations"}
	annotationKeys = []string{"title", "readOnlyHint", "destructiveHint", "idempotentHint", "openWorldHint"}
)

// toolHints reads a server's "toolHints": a list of entries, each naming the server's tools
// by a glob ("tools") and what clients are told of them beyond what the server says.
func (p *parser) toolHints(f member, in string) []v1alpha1.ToolHint {
	if !p.expectKind(f.value, kindArray, fmt.Sprintf("%q%s", f.key, in)) {
		return nil
	}
	if len(f.value.items) > v1alpha1.MaxToolHints {
		p.errorf(f.value.at, "%q%s has %d entries; the limit is %d", f.key, in, len(f.value.items), v1alpha1.MaxToolHints)
	}
	out := make([]v1alpha1.ToolHint, 0, len(f.value.items))
	for i, n := range f.value.items {
		what := fmt.Sprintf("\"toolHints[%d]\"%s", i, in)
		if !p.expectKind(n, kindObject, what) {
			continue
		}
		out = append(out, p.toolHint(n, what))
	}
	return out
}

func (p *parser) toolHint(n *node, what string) v1alpha1.ToolHint {
	in := " in " + what
	var h v1alpha1.ToolHint
	hasTools := false
	for _, m := range n.members {
		switch m.key {
		case "tools":
			hasTools = true
			h.Tools = p.toolGlob(m, in)
		case "meta":
			h.Meta = p.hintMeta(m, in)
		case "description":
			h.Description = p.hintText(m, in, v1alpha1.MaxToolHintDescription)
		case "annotations":
			h.Annotations = p.annotations(m, in)
		default:
			p.unknownKey(m, in, toolHintKeys)
		}
	}
	if !hasTools {
		p.errorf(n.at, "%s needs \"tools\", a glob of the server's tool names (\"*\" for all)", what)
	}
	return h
}

// toolGlob reads a glob as path.Match reads it, refusing one it cannot match with.
func (p *parser) toolGlob(m member, in string) string {
	what := fmt.Sprintf("%q%s", m.key, in)
	if !p.expectKind(m.value, kindString, what) {
		return ""
	}
	glob := m.value.str
	switch {
	case glob == "":
		p.errorf(m.value.at, "%s is empty; \"*\" matches every tool", what)
	case len(glob) > v1alpha1.MaxToolHintGlob:
		p.errorf(m.value.at, "%s is %d bytes long; the limit is %d", what, len(glob), v1alpha1.MaxToolHintGlob)
	default:
		if _, err := path.Match(glob, ""); err != nil {
			p.errorf(m.value.at, "%s is not a glob: %q (%v)", what, shorten(glob), err)
		}
	}
	return glob
}

// hintMeta reads the _meta entries of a hint: an object of any JSON values.
func (p *parser) hintMeta(m member, in string) map[string]apiextensionsv1.JSON {
	what := fmt.Sprintf("%q%s", m.key, in)
	if !p.expectKind(m.value, kindObject, what) {
		return nil
	}
	if len(m.value.members) > v1alpha1.MaxToolHintMeta {
		p.errorf(m.value.at, "%s has %d entries; the limit is %d", what, len(m.value.members), v1alpha1.MaxToolHintMeta)
	}
	out := make(map[string]apiextensionsv1.JSON, len(m.value.members))
	for _, e := range m.value.members {
		if e.key == "" {
			p.errorf(e.keyAt, "%s has an empty key", what)
			continue
		}
		out[e.key] = apiextensionsv1.JSON{Raw: nodeJSON(e.value)}
	}
	return out
}

// hintText reads a text clients are shown as written (no ${VAR} is resolved in it).
func (p *parser) hintText(m member, in string, limit int) *string {
	what := fmt.Sprintf("%q%s", m.key, in)
	if !p.expectKind(m.value, kindString, what) {
		return nil
	}
	if len(m.value.str) > limit {
		p.errorf(m.value.at, "%s is %d bytes long; the limit is %d", what, len(m.value.str), limit)
	}
	s := m.value.str
	return &s
}

// annotations reads the MCP tool annotations a hint overrides.
func (p *parser) annotations(m member, in string) *v1alpha1.ToolAnnotations {
	if !p.expectKind(m.value, kindObject, fmt.Sprintf("%q%s", m.key, in)) {
		return nil
	}
	in = " in \"annotations\"" + in
	a := &v1alpha1.ToolAnnotations{}
	flags := map[string]**bool{
		"readOnlyHint": &a.ReadOnlyHint, "destructiveHint": &a.DestructiveHint,
		"idempotentHint": &a.IdempotentHint, "openWorldHint": &a.OpenWorldHint,
	}
	for _, f := range m.value.members {
		if f.key == "title" {
			a.Title = p.hintText(f, in, v1alpha1.MaxToolHintTitle)
			continue
		}
		target, ok := flags[f.key]
		if !ok {
			p.unknownKey(f, in, annotationKeys)
			continue
		}
		if p.expectKind(f.value, kindBool, fmt.Sprintf("%q%s", f.key, in)) {
			b := f.value.boolean
			*target = &b
		}
	}
	return a
}

// nodeJSON is the JSON text of a parsed value.
func nodeJSON(n *node) json.RawMessage {
	switch n.kind {
	case kindNull:
		return json.RawMessage("null")
	case kindBool:
		if n.boolean {
			return json.RawMessage("true")
		}
		return json.RawMessage("false")
	case kindNumber:
		return json.RawMessage(n.str) // the literal as written, valid JSON
	case kindString:
		b, _ := json.Marshal(n.str) // a string always encodes
		return b
	case kindArray:
		out := []byte{'['}
		for i, item := range n.items {
			if i > 0 {
				out = append(out, ',')
			}
			out = append(out, nodeJSON(item)...)
		}
		return append(out, ']')
	default:
		out := []byte{'{'}
		for i, m := range n.members {
			if i > 0 {
				out = append(out, ',')
			}
			k, _ := json.Marshal(m.key)
			out = append(append(append(out, k...), ':'), nodeJSON(m.value)...)
		}
		return append(out, '}')
	}
}
