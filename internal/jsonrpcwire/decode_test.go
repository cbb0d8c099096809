package jsonrpcwire

import (
	"strings"
	"testing"
)

// DecodeExact reads as the SDK does: a key matches its field's name exactly, nothing may follow
// the value, and nesting past the SDK decoder's depth is refused before any decoding.
func TestDecodeExact(t *testing.T) {
	type msg struct {
		Method string `json:"method"`
	}
	for name, c := range map[string]struct {
		in, method, err string
	}{
		"exact key":            {`{"method":"tools/call"}`, "tools/call", ""},
		"key of another case":  {`{"METHOD":"tools/call"}`, "", ""},
		"data after":           {`{"method":"a"} {}`, "", "data after the JSON value"},
		"at the depth":         {strings.Repeat("[", 1000) + strings.Repeat("]", 1000), "", "cannot unmarshal"},
		"past the depth":       {`{"method":"a","x":` + strings.Repeat("[", 1000) + strings.Repeat("]", 1000) + `}`, "", "nested deeper than 1000 levels"},
		"brackets in a string": {`{"method":"` + strings.Repeat("[", 2000) + `"}`, strings.Repeat("[", 2000), ""},
	} {
		t.Run(name, func(t *testing.T) {
			var m msg
			err := DecodeExact([]byte(c.in), &m)
			if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
				t.Fatalf("error %v, want %q", err, c.err)
			}
			if err == nil && m.Method != c.method {
				t.Errorf("method %q, want %q", m.Method, c.method)
			}
		})
	}
}
