package conn

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// withCapabilities is otherMembers.withCapabilities for members read now.
func withCapabilities(session []byte, capsOf func() json.RawMessage) []byte {
	o := &otherMembers{}
	o.members, o.ok = othersOf(session)
	return o.withCapabilities(session, capsOf)
}

func TestWithCapabilities(t *testing.T) {
	session := `"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"projectmcp"},"io.modelcontextprotocol/clientCapabilities":{"sampling":{},"elicitation":{}}`
	for _, c := range []struct {
		name, caps, want string
	}{
		{"none given: the gateway's own", "", session},
		{"the session's in their place",
			`{"roots":{}}`,
			`"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"projectmcp"},"io.modelcontextprotocol/clientCapabilities":{"roots":{}}`},
		{"none declared", `{}`,
			`"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"projectmcp"},"io.modelcontextprotocol/clientCapabilities":{}`},
	} {
		var caps func() json.RawMessage
		if c.caps != "" {
			caps = func() json.RawMessage { return json.RawMessage(c.caps) }
		}
		if got := string(withCapabilities([]byte(session), caps)); got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
	}
	if got := string(withCapabilities([]byte(`not members`), func() json.RawMessage { return json.RawMessage(`{}`) })); got != "not members" {
		t.Errorf("members it cannot read are left as they are: %s", got)
	}
}

// A server's JSON-RPC error reaches the gateway with its code, message and data, the
// connection's secrets redacted; any other failure is not an upstream error.
func TestUpstreamError(t *testing.T) {
	c := &scrubber{server: "a", values: []string{"s3cret-token"}}
	wire := &jsonrpc.Error{Code: -32021, Message: "needs sampling (token s3cret-token)", Data: []byte(`{"requiredCapabilities":{"sampling":{}},"echo":"s3cret-token"}`)}
	got, ok := UpstreamError(fmt.Errorf("forwarding: %w", c.callError(fmt.Errorf("calling: %w", wire))))
	if !ok || got.Code != -32021 || got.Message != "needs sampling (token [redacted])" ||
		string(got.Data) != `{"requiredCapabilities":{"sampling":{}},"echo":"[redacted]"}` {
		t.Fatalf("UpstreamError = %+v, %v", got, ok)
	}
	if _, ok := UpstreamError(c.callError(errors.New("connection refused"))); ok {
		t.Fatal("a transport failure is not the server's answer")
	}
	if _, ok := UpstreamError(wire); ok {
		t.Fatal("an error that did not come through a connection is not an upstream error")
	}
}

func TestItemMembers(t *testing.T) {
	for _, c := range []struct {
		name string
		kind Kind
		in   string
		want string
	}{
		{"a tool without its name", KindTool, `{"name":"t","description":"d","_meta":{"ui":{"resourceUri":"ui://a/app"}}}`,
			`"description":"d","_meta":{"ui":{"resourceUri":"ui://a/app"}}`},
		{"taskSupport is not advertised", KindTool, `{"name":"t","execution":{"taskSupport":"required"},"inputSchema":{"type":"object"}}`,
			`"inputSchema":{"type":"object"}`},
		{"the rest of execution stays", KindTool, `{"name":"t","execution":{"taskSupport":"optional","other":1}}`,
			`"execution":{"other":1}`},
		{"forbidden is what the gateway does", KindTool, `{"name":"t","execution":{"taskSupport":"forbidden"}}`,
			`"execution":{"taskSupport":"forbidden"}`},
		{"a prompt keeps what it has", KindPrompt, `{"name":"p","execution":{"taskSupport":"required"}}`,
			`"execution":{"taskSupport":"required"}`},
		{"a resource keeps its uri", KindResource, `{"uri":"x://a","name":"a"}`, `"uri":"x://a","name":"a"`},
	} {
		got, err := itemMembers(json.RawMessage(c.in), c.kind)
		if err != nil || string(got) != c.want {
			t.Errorf("%s: %s (%v), want %s", c.name, got, err, c.want)
		}
	}
}

func TestCacheHintsMerge(t *testing.T) {
	public5 := CacheHints{Known: true, TTLMs: 5000}
	private2 := CacheHints{Known: true, TTLMs: 2000, Private: true}
	for _, c := range []struct {
		a, b, want CacheHints
	}{
		{CacheHints{}, CacheHints{}, CacheHints{}},
		{CacheHints{}, public5, public5},
		{public5, CacheHints{}, public5},
		{public5, private2, private2},
		{private2, CacheHints{Known: true, TTLMs: 9000}, private2},
		{CacheHints{Known: true, TTLMs: 100}, private2, CacheHints{Known: true, TTLMs: 100, Private: true}},
	} {
		if got := c.a.Merge(c.b); got != c.want {
			t.Errorf("%+v.Merge(%+v) = %+v, want %+v", c.a, c.b, got, c.want)
		}
	}
}
