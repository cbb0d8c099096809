package paths

import "testing"

// Only an initialize whose client capabilities have a tasks object declares Tasks.
func TestDeclaresTasks(t *testing.T) {
	for _, c := range []struct {
		body string
		want bool
	}{
		{`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"capabilities":{"tasks":{"requests":{}}}}}`, true},
		{`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"capabilities":{"elicitation":{}}}}`, false},
		{`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"capabilities":{"tasks":true}}}`, false},
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"initialize","arguments":{"tasks":{}}}}`, false},
		{`not json "initialize" "tasks"`, false},
	} {
		if got := declaresTasks([]byte(c.body)); got != c.want {
			t.Errorf("%s: %t, want %t", c.body, got, c.want)
		}
	}
}

// The tasks capability is added to an initialize result, in a JSON body or an event stream's
// data line; one that has it already, and any other message, stay as they are.
func TestWithTasksCapability(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"jsonrpc":"2.0","id":1,"result":{"capabilities":{"tools":{}},"protocolVersion":"2025-11-25"}}`,
			`{"id":1,"jsonrpc":"2.0","result":{"capabilities":{"tasks":{"cancel":{},"requests":{"tools":{"call":{}}}},"tools":{}},"protocolVersion":"2025-11-25"}}`},
		{"event: message\nid: 1\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"capabilities\":{}}}\n\n",
			"event: message\nid: 1\ndata: {\"id\":1,\"jsonrpc\":\"2.0\",\"result\":{\"capabilities\":{\"tasks\":{\"cancel\":{},\"requests\":{\"tools\":{\"call\":{}}}}}}}\n\n"},
		{`{"jsonrpc":"2.0","id":1,"result":{"capabilities":{"tasks":{}}}}`, `{"jsonrpc":"2.0","id":1,"result":{"capabilities":{"tasks":{}}}}`},
		{`{"jsonrpc":"2.0","id":1,"error":{"code":-32600,"message":"no"}}`, `{"jsonrpc":"2.0","id":1,"error":{"code":-32600,"message":"no"}}`},
		{"Bad Request\n", "Bad Request\n"},
	} {
		if got := string(withTasksCapability([]byte(c.in))); got != c.want {
			t.Errorf("%q:\n got %q\nwant %q", c.in, got, c.want)
		}
	}
}
