package gateway

import (
	"encoding/json"
	"testing"

	"github.com/dsh-dev/projectmcp/internal/projection"
)

// setNested adds the key to a tool's _meta as the server listed it, keeping every other member's
// bytes and order, and refuses what is not an object's members.
func TestSetNested(t *testing.T) {
	const key = "anthropic/alwaysLoad"
	for _, tc := range []struct {
		name, members, want string // want "" for an error
	}{
		{"no members", ``, `"_meta":{"anthropic/alwaysLoad":true}`},
		{"no _meta", `"description":"d","inputSchema":{"type":"object"}`,
			`"description":"d","inputSchema":{"type":"object"},"_meta":{"anthropic/alwaysLoad":true}`},
		{"a _meta of its own", `"_meta":{"ui":{"resourceUri":"ui://a"}},"x":[1, 2]`,
			`"_meta":{"ui":{"resourceUri":"ui://a"},"anthropic/alwaysLoad":true},"x":[1, 2]`},
		{"the key already there", `"_meta":{"anthropic/alwaysLoad":false,"b":1}`, `"_meta":{"b":1,"anthropic/alwaysLoad":true}`},
		{"an empty _meta", `"_meta":{}`, `"_meta":{"anthropic/alwaysLoad":true}`},
		{"a _meta that is not an object", `"_meta":null`, `"_meta":{"anthropic/alwaysLoad":true}`},
		{"unknown members pass", `"execution":{"taskSupport":"forbidden"},"future":{"a":[{"b":null}]}`,
			`"execution":{"taskSupport":"forbidden"},"future":{"a":[{"b":null}]},"_meta":{"anthropic/alwaysLoad":true}`},
		{"not members", `1,2`, ""},
		{"cut short", `"a":`, ""},
		{"trailing garbage", `"a":1}{`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := setNested([]byte(tc.members), "_meta", key, json.RawMessage("true"))
			if tc.want == "" {
				if err == nil {
					t.Fatalf("want an error, got %s", got)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Fatalf("got %s (%v)\nwant %s", got, err, tc.want)
			}
			if !json.Valid(append(append([]byte{'{'}, got...), '}')) {
				t.Fatalf("not an object's members: %s", got)
			}
		})
	}
}

// editMembers makes a tool hint's edit to a tool as its server listed it: _meta and annotations
// entries set beside the server's, the description replaced in its place, every other member's
// bytes and order kept, the same bytes for the same edit.
func TestEditMembers(t *testing.T) {
	desc := "new"
	edit := projection.Edit{
		Meta:        map[string]json.RawMessage{"z": json.RawMessage("1"), "a": json.RawMessage(`"x"`)},
		Annotations: map[string]json.RawMessage{"readOnlyHint": json.RawMessage("true")},
		Description: &desc,
	}
	for _, tc := range []struct {
		name, members, want string // want "" for an error
	}{
		{"bare", `"name":"t"`, `"name":"t","_meta":{"a":"x","z":1},"annotations":{"readOnlyHint":true},"description":"new"`},
		{"the server's own", `"description":"old","annotations":{"title":"T","readOnlyHint":false},"x":[1, 2],"_meta":{"z":0,"k":null}`,
			`"description":"new","annotations":{"title":"T","readOnlyHint":true},"x":[1, 2],"_meta":{"k":null,"a":"x","z":1}`},
		{"not members", `1,2`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := editMembers([]byte(tc.members), edit)
			if tc.want == "" {
				if err == nil {
					t.Fatalf("want an error, got %s", got)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Fatalf("got %s (%v)\nwant %s", got, err, tc.want)
			}
		})
	}
}
