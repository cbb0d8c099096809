package projection

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/internal/toolname"
)

func str(s string) *string { return &s }

func raws(kv ...string) map[string]json.RawMessage {
	out := map[string]json.RawMessage{}
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = json.RawMessage(kv[i+1])
	}
	return out
}

// A server's tool hints reach the tools whose own names their globs match, later entries
// overriding earlier ones per key; the upstream's tools are never written, and no hint (or no
// match) leaves a tool exactly as the server listed it.
func TestProjectToolHints(t *testing.T) {
	yes, no := true, false
	upstream := func() map[string][]*mcp.Tool {
		return map[string][]*mcp.Tool{
			"a": {
				{Name: "read_file", Description: "reads", InputSchema: object, Meta: mcp.Meta{"upstream": true},
					Annotations: &mcp.ToolAnnotations{Title: "Read", DestructiveHint: &yes}},
				{Name: "write_file", Description: "writes", InputSchema: object},
			},
			"b": {{Name: "read_file", Description: "b reads", InputSchema: object}},
		}
	}
	cases := map[string]struct {
		hints map[string]Hints
		want  map[string]*mcp.Tool // projected name -> the tool, for those the hints change
	}{
		"no hint": {},
		"a glob that matches nothing": {
			hints: map[string]Hints{"a": {Tools: []ToolHint{{Tools: "nothing*", Description: str("x")}}}},
		},
		"a malformed glob matches nothing": {
			hints: map[string]Hints{"a": {Tools: []ToolHint{{Tools: "[", Description: str("x")}}}},
		},
		"meta merged over the server's": {
			hints: map[string]Hints{"a": {Tools: []ToolHint{{Tools: "read_*", Meta: raws("anthropic/maxResultSizeChars", "500000", "upstream", `"hint"`)}}}},
			want: map[string]*mcp.Tool{"a__read_file": {Name: "a__read_file", Description: "reads", InputSchema: object,
				Meta:        mcp.Meta{"upstream": "hint", "anthropic/maxResultSizeChars": float64(500000)},
				Annotations: &mcp.ToolAnnotations{Title: "Read", DestructiveHint: &yes}}},
		},
		"description replaced, annotations overridden key by key": {
			hints: map[string]Hints{"a": {Tools: []ToolHint{{Tools: "*", Description: str("new"),
				Annotations: raws("readOnlyHint", "true", "destructiveHint", "false")}}}},
			want: map[string]*mcp.Tool{
				"a__read_file": {Name: "a__read_file", Description: "new", InputSchema: object, Meta: mcp.Meta{"upstream": true},
					Annotations: &mcp.ToolAnnotations{Title: "Read", ReadOnlyHint: true, DestructiveHint: &no}},
				"a__write_file": {Name: "a__write_file", Description: "new", InputSchema: object,
					Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, DestructiveHint: &no}},
			},
		},
		"later entries override earlier ones per key": {
			hints: map[string]Hints{"a": {AlwaysLoad: true, Tools: []ToolHint{
				{Tools: "write_file", Description: str("first"), Meta: raws("k", "1", "j", "1")},
				{Tools: "write_*", Meta: raws("k", "2", MetaAlwaysLoad, "false")},
			}}},
			want: map[string]*mcp.Tool{
				"a__read_file": {Name: "a__read_file", Description: "reads", InputSchema: object,
					Meta:        mcp.Meta{"upstream": true, MetaAlwaysLoad: true},
					Annotations: &mcp.ToolAnnotations{Title: "Read", DestructiveHint: &yes}},
				"a__write_file": {Name: "a__write_file", Description: "first", InputSchema: object,
					Meta: mcp.Meta{"k": float64(2), "j": float64(1), MetaAlwaysLoad: false}},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			offered := upstream()
			plain, _ := Project(upstream(), toolname.DefaultBudget, nil)
			got, _ := Project(offered, toolname.DefaultBudget, tc.hints)
			for n, w := range got {
				want, changed := tc.want[n]
				if !changed {
					want = plain[n].Tool
				}
				if d := cmp.Diff(want, w.Tool); d != "" {
					t.Errorf("%s (-want +got):\n%s", n, d)
				}
			}
			if d := cmp.Diff(upstream(), offered); d != "" {
				t.Errorf("the upstream's tools were modified (-before +after):\n%s", d)
			}
		})
	}
}

// The note on a description Claude Code cuts is about the description served: a hint's, when
// one replaces the server's.
func TestToolHintDescriptionNote(t *testing.T) {
	long := strings.Repeat("d", ClientTextLimit+1)
	offered := map[string][]*mcp.Tool{"a": {
		{Name: "short", Description: "s", InputSchema: object},
		{Name: "long", Description: long, InputSchema: object},
	}}
	hints := map[string]Hints{"a": {Tools: []ToolHint{
		{Tools: "short", Description: &long},
		{Tools: "long", Description: str("now short")},
	}}}
	_, notes := Project(offered, toolname.DefaultBudget, hints)
	if len(notes) != 1 || !strings.Contains(notes[0].Message, `tool "short"`) {
		t.Fatalf("want one note, on short's hinted description: %+v", notes)
	}
}

// A tool hint whose glob is malformed matches nothing, and a note on its server says so.
func TestToolHintBadGlobNote(t *testing.T) {
	offered := map[string][]*mcp.Tool{"a": tools("t")}
	hints := map[string]Hints{"a": {Tools: []ToolHint{{Tools: "t[", Description: str("x")}, {Tools: "t*"}}}}
	got, notes := Project(offered, toolname.DefaultBudget, hints)
	want := []Note{{"a", `toolHints "t[" is not a glob (syntax error in pattern): it matches no tool`}}
	if d := cmp.Diff(want, notes); d != "" {
		t.Errorf("notes (-want +got):\n%s", d)
	}
	if got["a__t"].Tool.Description != "d t" {
		t.Errorf("a malformed glob matched: %q", got["a__t"].Tool.Description)
	}
}
