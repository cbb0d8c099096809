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

func TestOwnResult(t *testing.T) {
	if got := string(ownResult("down", false)); got != `{"content":[{"type":"text","text":"down"}],"isError":true}` {
		t.Errorf("2025-11-25: %s", got)
	}
	if got := string(ownResult("down", true)); got != `{"resultType":"complete","content":[{"type":"text","text":"down"}],"isError":true}` {
		t.Errorf("2026-07-28: %s", got)
	}
}

func TestBadInputResponses(t *testing.T) {
	for params, want := range map[string]bool{
		`{"name":"t"}`: false,
		`{"name":"t","inputResponses":{"ask":{"action":"accept"}}}`: false,
		`{"name":"t","inputResponses":42}`:                          true,
		`{"name":"t","inputResponses":null}`:                        true,
		`{"name":"t","inputResponses":[]}`:                          true,
		`{"name":"t","inputResponses":{"ask":42}}`:                  true,
	} {
		if got := badInputResponses(json.RawMessage(params)); got != want {
			t.Errorf("badInputResponses(%s) = %v", params, got)
		}
	}
}
