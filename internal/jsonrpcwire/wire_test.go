package jsonrpcwire

import (
	"encoding/json"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

func TestMessages(t *testing.T) {
	for _, tc := range []struct {
		name string
		got  []byte
		want string
	}{
		{"request", Request("projectmcp-1", "tools/call", []byte(`{"name":"echo"}`)),
			`{"jsonrpc":"2.0","id":"projectmcp-1","method":"tools/call","params":{"name":"echo"}}`},
		{"request without params", Request("a", "ping", nil), `{"jsonrpc":"2.0","id":"a","method":"ping"}`},
		{"request with an id to escape", Request(`a"<b>`, "ping", []byte(`{}`)),
			`{"jsonrpc":"2.0","id":"a\"\u003cb\u003e","method":"ping","params":{}}`},
		{"notification", Notification("notifications/cancelled", []byte(`{"requestId":"x"}`)),
			`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"x"}}`},
		{"notification without params", Notification("notifications/initialized", nil),
			`{"jsonrpc":"2.0","method":"notifications/initialized"}`},
		{"result", ResponseTo(json.RawMessage(`7`), json.RawMessage(`{"ok":true}`), nil),
			`{"jsonrpc":"2.0","id":7,"result":{"ok":true}}`},
		{"error in place of a result", ResponseTo(json.RawMessage(`"s-1"`), json.RawMessage(`{}`), &jsonrpc.Error{Code: -32601, Message: "no"}),
			`{"jsonrpc":"2.0","id":"s-1","error":{"code":-32601,"message":"no"}}`},
		{"error with data", ResponseTo(json.RawMessage(`1`), nil, &jsonrpc.Error{Code: 1, Message: "m", Data: json.RawMessage(`{"a":1}`)}),
			`{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"m","data":{"a":1}}}`},
		{"error", ErrorTo(json.RawMessage(`"x"`), jsonrpc.CodeInternalError, `over "the" bound`),
			`{"jsonrpc":"2.0","id":"x","error":{"code":-32603,"message":"over \"the\" bound"}}`},
	} {
		if string(tc.got) != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, tc.got, tc.want)
		}
		if !json.Valid(tc.got) {
			t.Errorf("%s: not JSON: %s", tc.name, tc.got)
		}
	}
}

func TestMembers(t *testing.T) {
	for _, tc := range []struct {
		name string
		got  []byte
		want string
	}{
		{"first", AppendMember(nil, "a", json.RawMessage(`1`)), `"a":1`},
		{"next", AppendMember([]byte(`"a":1`), "b", json.RawMessage(`[true]`)), `"a":1,"b":[true]`},
		{"key to escape", AppendMember(nil, "a\nb", json.RawMessage(`null`)), `"a\nb":null`},
		{"quoted", AppendQuoted([]byte(`x:`), "é<&>\\"), `x:"é\u003c\u0026\u003e\\"`},
		{"quoted empty", AppendQuoted(nil, ""), `""`},
		{"invalid UTF-8", AppendQuoted(nil, "a\xffb"), `"a\ufffdb"`},
	} {
		if string(tc.got) != tc.want {
			t.Errorf("%s: got %s, want %s", tc.name, tc.got, tc.want)
		}
	}
}

func TestStringID(t *testing.T) {
	for _, tc := range []struct {
		id   string
		want string
		is   bool
	}{
		{`"projectmcp-1"`, "projectmcp-1", true},
		{`"projectmcp-\u0031"`, "projectmcp-1", true},
		{`"projectmcp-2"`, "projectmcp-1", false},
		{`1`, "1", false},
		{`null`, "projectmcp-1", false},
		{``, "", false},
	} {
		if got := StringID(json.RawMessage(tc.id), tc.want); got != tc.is {
			t.Errorf("StringID(%s, %q) = %t, want %t", tc.id, tc.want, got, tc.is)
		}
	}
}
