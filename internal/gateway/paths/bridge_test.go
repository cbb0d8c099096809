package paths

import (
	"encoding/json"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A 2025-11-25 server's result, made a 2026-07-28 one: serverInfo first, the server's members
// as it sent them, resultType last; a _meta of the server's own keeps its keys.
func TestNewestShape(t *testing.T) {
	info := json.RawMessage(`{"name":"projectmcp","version":"v1alpha1"}`)
	for _, c := range []struct{ name, in, want string }{
		{"members kept as sent", `{"content":[{"type":"text","text":"x"}],"structuredContent":{"b":1,"a":2},"isError":true}`,
			`{"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"projectmcp","version":"v1alpha1"}},"content":[{"type":"text","text":"x"}],"structuredContent":{"b":1,"a":2},"isError":true,"resultType":"complete"}`},
		{"no members", ` {} `, `{"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"projectmcp","version":"v1alpha1"}},"resultType":"complete"}`},
		{"a _meta of the server's", `{"content":[],"_meta":{"trace":"t1"}}`,
			`{"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"projectmcp","version":"v1alpha1"},"trace":"t1"},"content":[],"resultType":"complete"}`},
		{"a resultType of the server's, set once", `{"content":[],"resultType":"x"}`,
			`{"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"projectmcp","version":"v1alpha1"}},"content":[],"resultType":"complete"}`},
		{"a _meta named with escapes", `{"content":[],"\u005fmeta":{"k":1}}`,
			`{"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"projectmcp","version":"v1alpha1"},"k":1},"content":[],"resultType":"complete"}`},
		{"a null _meta", `{"_meta":null,"content":[]}`,
			`{"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"projectmcp","version":"v1alpha1"}},"content":[],"resultType":"complete"}`},
	} {
		got, err := statelessShape(json.RawMessage(c.in), info, "")
		if err != nil || string(got) != c.want {
			t.Errorf("%s: %s (%v), want %s", c.name, got, err, c.want)
		}
	}
	// A read's caching hints, as the SDK's server gives them, either way.
	for in, want := range map[string]string{
		`{"contents":[]}`:            `{"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"projectmcp","version":"v1alpha1"}},"ttlMs":0,"cacheScope":"private","contents":[],"resultType":"complete"}`,
		`{"_meta":{},"contents":[]}`: `{"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"projectmcp","version":"v1alpha1"}},"cacheScope":"private","contents":[],"resultType":"complete","ttlMs":0}`,
	} {
		if got, err := statelessShape(json.RawMessage(in), info, "private"); err != nil || string(got) != want {
			t.Errorf("a read %s: %s (%v), want %s", in, got, err, want)
		}
	}
	for _, bad := range []string{``, `[]`, `"x"`, `{"_meta":[1]}`, `{"_meta":`} {
		if got, err := statelessShape(json.RawMessage(bad), info, ""); err == nil {
			t.Errorf("%q: %s, want an error", bad, got)
		}
	}
}

// The input-required result decodes as the SDK's client reads one: the server's requests
// under the gateway's ids, and the state to resume with.
func TestInputRequired(t *testing.T) {
	round := &inputRound{state: "projectmcp-input.t.0.s", requests: mcp.InputRequestMap{
		"projectmcp-1": &mcp.ElicitParams{Message: "hi"},
	}}
	raw, err := inputRequired(round, json.RawMessage(`{"name":"projectmcp","version":"v1alpha1"}`))
	if err != nil {
		t.Fatal(err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	if string(top["resultType"]) != `"input_required"` || string(top["requestState"]) != `"projectmcp-input.t.0.s"` {
		t.Fatalf("%s", raw)
	}
	var res mcp.CallToolResult
	if err := json.Unmarshal(raw, &res); err != nil || res.RequestState != round.state || len(res.InputRequests) != 1 {
		t.Fatalf("%s decodes to %+v (%v)", raw, res, err)
	}
}

// A held call's result as the SDK's path takes it on resumption: decoded from the forward
// path's raw result; a result that is no result of the request is an error, never a nil the
// handler would dereference.
func TestResultAs(t *testing.T) {
	res, err := resultAs[*mcp.CallToolResult](json.RawMessage(`{"content":[{"type":"text","text":"x"}]}`))
	if err != nil || len(res.Content) != 1 {
		t.Fatalf("%+v %v", res, err)
	}
	typed := &mcp.CallToolResult{IsError: true}
	if res, err := resultAs[*mcp.CallToolResult](typed); err != nil || res != typed {
		t.Fatalf("%+v %v", res, err)
	}
	for _, bad := range []any{json.RawMessage(`null`), json.RawMessage(`[1]`), json.RawMessage(`{`), &mcp.GetPromptResult{}, nil} {
		if res, err := resultAs[*mcp.CallToolResult](bad); err == nil {
			t.Errorf("%v: %+v, want an error", bad, res)
		}
	}
}
