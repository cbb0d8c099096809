package paths

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/dsh-dev/projectmcp/internal/jsonrpcwire"
)

// The message-level path reads a request as the SDK's server does: a case variant of a
// member's name is an unknown member, never the one it resembles, and a body nested deeper
// than the SDK decodes is refused before the decoder's recursion could take it past the
// stack's limit (a fatal error, not a panic).
func TestFastParamsDecodeExactly(t *testing.T) {
	for _, c := range []struct {
		body, name string
		ok         bool
	}{
		{`{"name":"a"}`, "a", true},
		{`{"name":"a","Name":"b"}`, "a", true},
		{`{"Name":"b","name":"a"}`, "a", true},
		{`{"NAME":"b"}`, "", true},
		{` {"name":"a"} `, "a", true},
		{`{"name":"a"} {}`, "", false},
		{`{"name":1}`, "", false},
		{`{"name":"a","arguments":{"a":"` + strings.Repeat("[", 2000) + `"}}`, "a", true},
		{`{"name":"a","arguments":{"a":` + strings.Repeat("[", 4<<20) + `}}`, "", false},
	} {
		var params callParams
		err := jsonrpcwire.DecodeExact([]byte(c.body), &params)
		if (err == nil) != c.ok || (c.ok && params.Name != c.name) {
			t.Errorf("%.60s: name %q (%v), want %q (ok %v)", c.body, params.Name, err, c.name, c.ok)
		}
	}
}

var callBody = []byte(`{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"a__echo","arguments":{"text":"hello, world"},"_meta":{"progressToken":"t-1","traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}}`)

// What the message-level path pays to read a call, the envelope and then the params: exactly,
// and as the standard library would.
func BenchmarkDecodeRequest(b *testing.B) {
	for _, c := range []struct {
		name   string
		decode func([]byte, any) error
	}{{"encoding-json", json.Unmarshal}, {"exact", jsonrpcwire.DecodeExact}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var env envelope
				var params callParams
				if c.decode(callBody, &env) != nil || c.decode(env.Params, &params) != nil {
					b.Fatal("decode")
				}
			}
		})
	}
}
