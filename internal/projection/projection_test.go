package projection

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/internal/toolname"
)

var object = map[string]any{"type": "object"}

func tool(name string, schema any) *mcp.Tool {
	return &mcp.Tool{Name: name, Description: "d " + name, InputSchema: schema, Meta: mcp.Meta{"upstream": true}}
}

func tools(names ...string) []*mcp.Tool {
	out := make([]*mcp.Tool, len(names))
	for i, n := range names {
		out[i] = tool(n, object)
	}
	return out
}

// hash is the suffix a raw name that must be changed gets: "_" and 8 hex digits of its sha256.
func hash(raw string) string {
	sum := sha256.Sum256([]byte(raw))
	return "_" + hex.EncodeToString(sum[:4])
}

func TestProject(t *testing.T) {
	long := strings.Repeat("l", 150)
	cases := map[string]struct {
		offered map[string][]*mcp.Tool
		budget  int               // 0: toolname.DefaultBudget
		want    map[string]string // projected name -> "server/raw"
		notes   []string          // fragments of "server: message", one per note, in order
	}{
		"nothing offered": {
			offered: map[string][]*mcp.Tool{"a": nil},
			want:    map[string]string{},
		},
		"plain names": {
			offered: map[string][]*mcp.Tool{"github": tools("search", "get_issue"), "fs": tools("read.file", "write-file")},
			want: map[string]string{
				"github__search": "github/search", "github__get_issue": "github/get_issue",
				"fs__read.file": "fs/read.file", "fs__write-file": "fs/write-file",
			},
		},
		"sanitized names get a hash and stay apart": {
			offered: map[string][]*mcp.Tool{"a": tools("x y", "x_y", "x/y", "x.y")},
			want: map[string]string{
				"a__x_y" + hash("x y"): "a/x y", "a__x_y": "a/x_y", "a__x_y" + hash("x/y"): "a/x/y", "a__x.y": "a/x.y",
			},
		},
		"over-long names are shortened with a hash": {
			offered: map[string][]*mcp.Tool{"srv": tools(long+"1", long+"2")},
			budget:  toolname.MaxLength,
			want: map[string]string{
				"srv__" + long[:114] + hash(long+"1"): "srv/" + long + "1",
				"srv__" + long[:114] + hash(long+"2"): "srv/" + long + "2",
			},
		},
		"the budget shortens what the spec's limit keeps": {
			offered: map[string][]*mcp.Tool{"github": tools("add_pull_request_review_comment_to_pending_review", "search")},
			budget:  toolname.DefaultBudget,
			want: map[string]string{
				"github__add_pull_request_review_commen" + hash("add_pull_request_review_comment_to_pending_review"): "github/add_pull_request_review_comment_to_pending_review",
				"github__search": "github/search",
			},
		},
		"a server too long for the budget is shortened too": {
			offered: map[string][]*mcp.Tool{"s": tools("read"), strings.Repeat("s", 40): tools("read", "write")},
			budget:  30,
			want: map[string]string{
				"s__read": "s/read",
				"sss" + hash(strings.Repeat("s", 40)) + "__read" + hash("read"):   strings.Repeat("s", 40) + "/read",
				"sss" + hash(strings.Repeat("s", 40)) + "__write" + hash("write"): strings.Repeat("s", 40) + "/write",
			},
		},
		"a true collision is skipped, not renamed": {
			// A server name the API refuses today, kept by an old object: "a__b"/"c" and
			// "a"/"b__c" are both "a__b__c". The later in (server, raw) order goes.
			offered: map[string][]*mcp.Tool{"a__b": tools("c"), "a": tools("b__c", "d")},
			want:    map[string]string{"a__b__c": "a/b__c", "a__d": "a/d"},
			notes:   []string{`a__b: tool "c" skipped: its name "a__b__c" is already taken by tool "b__c" of server "a"`},
		},
		"a tool listed twice keeps its first listing": {
			offered: map[string][]*mcp.Tool{"a": {tool("t", object), tool("t", map[string]any{"type": "object", "x": 1})}},
			want:    map[string]string{"a__t": "a/t"},
			notes:   []string{`a: tool "t" skipped: the server lists it more than once`},
		},
		"schemas that are not JSON objects are skipped": {
			offered: map[string][]*mcp.Tool{"a": {
				tool("bad", map[string]any{"type": "string"}),
				tool("good", json.RawMessage(`{"type":"object","properties":{}}`)),
				tool("none", nil),
				tool("notype", map[string]any{}),
				tool("null", json.RawMessage(`null`)),
				tool("raw", json.RawMessage(`[1]`)),
			}},
			want: map[string]string{"a__good": "a/good"},
			notes: []string{
				`a: tool "bad" skipped: input schema type is "string", not "object"`,
				`a: tool "none" skipped: no input schema`,
				`a: tool "notype" skipped: input schema has no type`,
				`a: tool "null" skipped: input schema is not a JSON object`,
				`a: tool "raw" skipped: input schema is not a JSON object`,
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, notes := Project(tc.offered, tc.budget, nil)
			limit := tc.budget
			if limit == 0 {
				limit = toolname.DefaultBudget
			}
			have := map[string]string{}
			for n, w := range got {
				have[n] = w.Server + "/" + w.Raw
				if w.Tool.Name != n || w.Tool.Meta["upstream"] != true || w.Tool.Description != "d "+w.Raw {
					t.Errorf("%s: the copy must carry the projected name, the rest (its _meta too) unchanged: %+v", n, w.Tool)
				}
				if !toolname.Valid(n) || len(n) > limit {
					t.Errorf("%q is not a valid tool name within %d", n, limit)
				}
			}
			if d := cmp.Diff(tc.want, have); d != "" {
				t.Errorf("tools (-want +got):\n%s", d)
			}
			var msgs []string
			for _, n := range notes {
				msgs = append(msgs, n.Server+": "+n.Message)
			}
			if len(msgs) != len(tc.notes) {
				t.Fatalf("notes:\n%s\nwant %d", strings.Join(msgs, "\n"), len(tc.notes))
			}
			for i, frag := range tc.notes {
				if !strings.Contains(msgs[i], frag) {
					t.Errorf("note %d is %q, want it to contain %q", i, msgs[i], frag)
				}
			}
			again, againNotes := Project(tc.offered, tc.budget, nil)
			if d := cmp.Diff(got, again); d != "" || !slices.Equal(notes, againNotes) {
				t.Fatalf("not a pure function:\n%s", d)
			}
		})
	}
}

// The upstream's tool is copied, never modified.
func TestProjectLeavesInputAlone(t *testing.T) {
	in := tool("x y", object)
	got, _ := Project(map[string][]*mcp.Tool{"a": {in}}, toolname.DefaultBudget, nil)
	if in.Name != "x y" || in.Meta == nil {
		t.Fatalf("the input was modified: %+v", in)
	}
	if w := got["a__x_y"+hash("x y")]; w.Tool == in {
		t.Fatal("the projected tool must be a copy")
	}
}

// A tool's projected name is the same whatever other servers are present: the projection of
// every subset of servers agrees with the projection of all of them on every tool it keeps.
func TestNameDoesNotDependOnOtherServers(t *testing.T) {
	all := map[string][]*mcp.Tool{
		"a":     tools("b__c", "x y", "x_y"),
		"a-b":   tools("c", "x y"),
		"ab":    tools("c"),
		"gh":    tools("search", strings.Repeat("z", 130)),
		"other": tools("c", "x_y"),
	}
	full, notes := Project(all, toolname.DefaultBudget, nil)
	if len(notes) != 0 {
		t.Fatalf("no collisions expected: %v", notes)
	}
	names := slices.Sorted(maps.Keys(all))
	for mask := 1; mask < 1<<len(names); mask++ {
		subset := map[string][]*mcp.Tool{}
		for i, n := range names {
			if mask&(1<<i) != 0 {
				subset[n] = all[n]
			}
		}
		got, _ := Project(subset, toolname.DefaultBudget, nil)
		want := 0
		for _, n := range names {
			want += len(subset[n])
		}
		if len(got) != want {
			t.Fatalf("subset %v: %d tools, want %d", slices.Collect(maps.Keys(subset)), len(got), want)
		}
		for name, w := range got {
			if f, ok := full[name]; !ok || f.Server != w.Server || f.Raw != w.Raw {
				t.Fatalf("subset %v: %q is %s/%s, but %+v with every server", slices.Collect(maps.Keys(subset)), name, w.Server, w.Raw, f)
			}
		}
	}
}

// Prompts take the tools' naming rule: kept when valid and within the budget, hashed when
// changed, a clash skipped.
func TestPrompts(t *testing.T) {
	long := "summarize_the_pull_request_for_the_release_notes"
	offered := map[string][]*mcp.Prompt{
		"a": {{Name: "greet", Meta: mcp.Meta{"x": 1}}, {Name: "b__c"}, {Name: "x y"}, {Name: long}},
		"b": {{Name: "greet"}},
	}
	got, notes := Prompts(offered, toolname.DefaultBudget)
	want := map[string]string{"a__greet": "a/greet", "a__b__c": "a/b__c", "a__x_y" + hash("x y"): "a/x y", "b__greet": "b/greet",
		"a__" + long[:47-3-9] + hash(long): "a/" + long}
	if len(got) != len(want) || len(notes) != 0 {
		t.Fatalf("got %v, notes %v", got, notes)
	}
	for name, from := range want {
		p, ok := got[name]
		if !ok || p.Server+"/"+p.Raw != from || p.Prompt.Name != name || (from == "a/greet") != (p.Prompt.Meta != nil) {
			t.Errorf("%s: %+v", name, p)
		}
	}
	if offered["a"][0].Name != "greet" {
		t.Error("the input must not be changed")
	}
}

// Resources keep their URIs; a URI or template two servers list goes to the first by name.
func TestResources(t *testing.T) {
	res, tmpl, notes := Resources(
		map[string][]*mcp.Resource{"b": {{URI: "file:///x"}, {URI: "file:///b"}}, "a": {{URI: "file:///x"}}},
		map[string][]*mcp.ResourceTemplate{"b": {{URITemplate: "t://{id}"}}, "a": {{URITemplate: "t://{id}"}, {URITemplate: "a://{id}"}}},
	)
	if res["file:///x"].Server != "a" || res["file:///b"].Server != "b" || len(res) != 2 {
		t.Errorf("resources: %+v", res)
	}
	if tmpl["t://{id}"].Server != "a" || tmpl["a://{id}"].Server != "a" || len(tmpl) != 2 {
		t.Errorf("templates: %+v", tmpl)
	}
	if len(notes) != 2 || notes[0].Server != "b" || !strings.Contains(notes[0].Message, `"a"`) {
		t.Errorf("notes: %+v", notes)
	}
}

// Claude Code keeps 2 KB of a tool's description and of a server's instructions: a text over it
// gets a note naming the server, the tool and its size, and is still served whole.
func TestClientTextLimit(t *testing.T) {
	described := func(name, desc string) *mcp.Tool {
		return &mcp.Tool{Name: name, Description: desc, InputSchema: object}
	}
	cases := map[string]struct {
		text string
		note string // "" for none
	}{
		"empty":                     {text: ""},
		"at the limit":              {text: strings.Repeat("a", 2048)},
		"one byte over":             {text: strings.Repeat("a", 2049), note: "of 2049 bytes, over the 2048 (2 KB) Claude Code keeps"},
		"far over":                  {text: strings.Repeat("a", 100_000), note: "of 100000 bytes"},
		"multi-byte counts bytes":   {text: strings.Repeat("é", 1025), note: "of 2050 bytes"},
		"multi-byte within the cap": {text: strings.Repeat("é", 1024)},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, notes := Project(map[string][]*mcp.Tool{"docs": {described("search", tc.text), described("fetch", "short")}}, toolname.DefaultBudget, nil)
			if len(got) != 2 || got["docs__search"].Tool.Description != tc.text {
				t.Fatalf("the tool must be served whole whatever its description: %d tools", len(got))
			}
			want := 0
			if tc.note != "" {
				want = 1
			}
			if len(notes) != want {
				t.Fatalf("notes %+v, want %d", notes, want)
			}
			if want == 1 {
				n := notes[0]
				if n.Server != "docs" || !strings.HasPrefix(n.Message, `tool "search": a description `+tc.note) ||
					!strings.Contains(n.Message, "Claude Code cuts the rest (served whole here)") {
					t.Errorf("note %+v", n)
				}
			}

			note, ok := InstructionsNote("docs", tc.text)
			if ok != (tc.note != "") {
				t.Fatalf("instructions note %+v, %v", note, ok)
			}
			if ok && (note.Server != "docs" || !strings.HasPrefix(note.Message, "instructions "+tc.note)) {
				t.Errorf("instructions note %+v", note)
			}
		})
	}
}

// A server's alwaysLoad marks each of its tools with _meta["anthropic/alwaysLoad"]: true, beside
// the tool's own _meta, and leaves the other servers' tools and the upstream's maps alone.
func TestProjectHints(t *testing.T) {
	bare := &mcp.Tool{Name: "bare", InputSchema: object}
	cases := map[string]struct {
		hints map[string]Hints
		want  map[string]mcp.Meta // projected name -> its _meta
	}{
		"no hints": {
			want: map[string]mcp.Meta{"a__t": {"upstream": true}, "a__bare": nil, "b__t": {"upstream": true}},
		},
		"alwaysLoad on one server": {
			hints: map[string]Hints{"a": {AlwaysLoad: true}},
			want: map[string]mcp.Meta{"a__t": {"upstream": true, MetaAlwaysLoad: true}, "a__bare": {MetaAlwaysLoad: true},
				"b__t": {"upstream": true}},
		},
		"alwaysLoad false is no hint": {
			hints: map[string]Hints{"a": {}, "b": {AlwaysLoad: false}},
			want:  map[string]mcp.Meta{"a__t": {"upstream": true}, "a__bare": nil, "b__t": {"upstream": true}},
		},
		"a hint for a server that offers nothing": {
			hints: map[string]Hints{"gone": {AlwaysLoad: true}, "b": {AlwaysLoad: true}},
			want:  map[string]mcp.Meta{"a__t": {"upstream": true}, "a__bare": nil, "b__t": {"upstream": true, MetaAlwaysLoad: true}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			offered := map[string][]*mcp.Tool{"a": {tool("t", object), bare}, "b": tools("t")}
			got, _ := Project(offered, toolname.DefaultBudget, tc.hints)
			have := map[string]mcp.Meta{}
			for n, w := range got {
				have[n] = w.Tool.Meta
			}
			if d := cmp.Diff(tc.want, have); d != "" {
				t.Errorf("_meta (-want +got):\n%s", d)
			}
			if offered["a"][0].Meta[MetaAlwaysLoad] != nil || bare.Meta != nil {
				t.Fatal("the upstream's tools were modified")
			}
		})
	}
}
