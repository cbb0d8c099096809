package conn

import (
	"errors"
	"fmt"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

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
		var caps []byte
		if c.caps != "" {
			caps = []byte(c.caps)
		}
		if got := string(withCapabilities([]byte(session), caps)); got != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.name, got, c.want)
		}
	}
	if got := string(withCapabilities([]byte(`not members`), []byte(`{}`))); got != "not members" {
		t.Errorf("members it cannot read are left as they are: %s", got)
	}
}

// A server's JSON-RPC error reaches the gateway with its code, message and data, the
// connection's secrets redacted; any other failure is not an upstream error.
func TestUpstreamError(t *testing.T) {
	c := &Conn{secretValues: []string{"s3cret-token"}}
	c.opts.Server.Name = "a"
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
