package config

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
)

// A server's toolHints are carried into the spec in order, _meta values as written (any JSON),
// the description and annotations as given.
func TestParseToolHints(t *testing.T) {
	src := `{"mcpServers": {"fs": {"command": "x", "toolHints": [
		{"tools": "*", "meta": {"anthropic/alwaysLoad": true, "anthropic/maxResultSizeChars": 500000,
			"x": {"list": [1, "two", null, false], "s": "a\"b ${NOT_A_VAR}"}}},
		{"tools": "write_*", "description": "Writes ${PATH} verbatim.",
			"annotations": {"title": "Write", "readOnlyHint": false, "destructiveHint": true, "idempotentHint": true, "openWorldHint": false}}
	]}}}`
	got, err := Parse(file, []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	yes, no := true, false
	desc, title := "Writes ${PATH} verbatim.", "Write"
	want := []v1alpha1.ToolHint{
		{Tools: "*", Meta: map[string]apiextensionsv1.JSON{
			"anthropic/alwaysLoad":         {Raw: []byte("true")},
			"anthropic/maxResultSizeChars": {Raw: []byte("500000")},
			"x":                            {Raw: []byte(`{"list":[1,"two",null,false],"s":"a\"b ${NOT_A_VAR}"}`)},
		}},
		{Tools: "write_*", Description: &desc, Annotations: &v1alpha1.ToolAnnotations{
			Title: &title, ReadOnlyHint: &no, DestructiveHint: &yes, IdempotentHint: &yes, OpenWorldHint: &no}},
	}
	if d := cmp.Diff(want, got.Servers[0].ToolHints); d != "" {
		t.Fatalf("toolHints (-want +got):\n%s", d)
	}
}

// A toolHints entry the reader cannot carry is refused at its place, naming the key.
func TestParseToolHintsErrors(t *testing.T) {
	hints := func(s string) string { return `{"mcpServers": {"fs": {"command": "x", "toolHints": ` + s + `}}}` }
	cases := []struct{ name, src, at, want string }{
		{"not a list", hints(`{"tools": "*"}`), `{"tools"`, `"toolHints" in server "fs" must be an array, not an object`},
		{"entry not an object", hints(`["*"]`), `"*"`, `"toolHints[0]" in server "fs" must be an object, not a string`},
		{"no tools", hints(`[{"description": "d"}]`), `{"description"`, `"toolHints[0]" in server "fs" needs "tools"`},
		{"bad glob", hints(`[{"tools": "read_["}]`), `"read_["`, `"tools" in "toolHints[0]" in server "fs" is not a glob: "read_["`},
		{"empty glob", hints(`[{"tools": ""}]`), `""`, `"tools" in "toolHints[0]" in server "fs" is empty`},
		{"meta not an object", hints(`[{"tools": "*", "meta": ["anthropic/alwaysLoad"]}]`), `["anthropic`,
			`"meta" in "toolHints[0]" in server "fs" must be an object, not an array`},
		{"unknown annotation", hints(`[{"tools": "*"}, {"tools": "*", "annotations": {"readonlyHint": true}}]`), `"readonlyHint"`,
			`unknown key "readonlyHint" in "annotations" in "toolHints[1]" in server "fs"; did you mean "readOnlyHint"?`},
		{"annotation not a bool", hints(`[{"tools": "*", "annotations": {"openWorldHint": "no"}}]`), `"no"`,
			`"openWorldHint" in "annotations" in "toolHints[0]" in server "fs" must be a boolean, not a string`},
		{"unknown key", hints(`[{"tools": "*", "descriptio": "d"}]`), `"descriptio"`,
			`unknown key "descriptio" in "toolHints[0]" in server "fs"; did you mean "description"?`},
		{"description not a string", hints(`[{"tools": "*", "description": 1}]`), `1}`,
			`"description" in "toolHints[0]" in server "fs" must be a string, not a number`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec, err := Parse(file, []byte(tc.src))
			if spec != nil {
				t.Fatalf("a failed parse must return no spec, got %+v", spec)
			}
			line, col := position(t, tc.src, tc.at)
			assertError(t, err, line, col, tc.want)
		})
	}
}
