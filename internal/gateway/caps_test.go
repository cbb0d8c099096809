package gateway

import (
	"encoding/json"
	"testing"
)

func TestRelayable(t *testing.T) {
	for _, c := range []struct{ name, in, want string }{
		{"none", `{}`, `{}`},
		{"not an object", `[1]`, `{}`},
		{"absent", ``, `{}`},
		{"the ones relayed, in a fixed order", `{"elicitation":{"form":{}},"sampling":{"tools":{}},"roots":{"listChanged":true}}`,
			`{"roots":{"listChanged":true},"sampling":{"tools":{}},"elicitation":{"form":{}}}`},
		{"experimental is not relayed", `{"experimental":{"x":{}},"sampling":{}}`, `{"sampling":{}}`},
		{"tasks is not carried, other extensions are", `{"extensions":{"io.modelcontextprotocol/tasks":{},"io.modelcontextprotocol/ui":{"mimeTypes":["text/html"]}}}`,
			`{"extensions":{"io.modelcontextprotocol/ui":{"mimeTypes":["text/html"]}}}`},
		{"a capability that is not an object", `{"sampling":true,"roots":{}}`, `{"roots":{}}`},
	} {
		got := relayable(json.RawMessage(c.in))
		if string(got) != c.want || !json.Valid(got) {
			t.Errorf("%s: relayable(%s) = %s, want %s", c.name, c.in, got, c.want)
		}
	}
}

func TestErrorStatus(t *testing.T) {
	for code, want := range map[int64]int{-32601: 404, -32602: 400, -32021: 400, -32022: 400, -32603: 0, -32042: 0, 7: 0} {
		if got := errorStatus(code); got != want {
			t.Errorf("errorStatus(%d) = %d, want %d", code, got, want)
		}
	}
}
