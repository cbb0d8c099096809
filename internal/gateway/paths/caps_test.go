package paths

import (
	"encoding/json"
	"fmt"
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
		for range 2 { // read, then kept
			if got := relayedCaps.of(json.RawMessage(c.in)); string(got) != c.want {
				t.Errorf("%s: kept %s, want %s", c.name, got, c.want)
			}
		}
	}
}

// readOnce reads each value once while it keeps it, and keeps at most readOnceKept.
func TestReadOnce(t *testing.T) {
	reads := 0
	c := &readOnce[string]{read: func(raw json.RawMessage) string { reads++; return "read " + string(raw) }}
	for range 3 {
		if got := c.of(json.RawMessage("a")); got != "read a" {
			t.Fatalf("got %q", got)
		}
	}
	if reads != 1 {
		t.Fatalf("a value kept was read %d times", reads)
	}
	for i := range readOnceKept + 10 {
		c.of(json.RawMessage(fmt.Sprint(i)))
	}
	if len(c.kept) > readOnceKept {
		t.Fatalf("%d values kept, want at most %d", len(c.kept), readOnceKept)
	}
	if d := declaredCaps.of(json.RawMessage(`{"sampling":{}}`)); !d.ok || d.caps.Sampling == nil {
		t.Fatalf("declared: %+v", d)
	}
	if d := declaredCaps.of(json.RawMessage(`{"sampling":true}`)); d.ok {
		t.Fatalf("capabilities the SDK's types refuse must not be declared: %+v", d)
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
