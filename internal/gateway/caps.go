package gateway

import (
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/internal/conn"
)

// relayedCapabilities are the client capabilities a server may use through the gateway: its
// requests for roots, sampling and elicitation reach the session that called it, and
// extensions pass as the session declares them, but for tasks, which the gateway does not
// carry. A server told more would ask the session for what never reaches it.
var relayedCapabilities = []string{"roots", "sampling", "elicitation", "extensions"}

// unrelayedExtensions are the extensions a session may declare that the gateway cannot carry.
var unrelayedExtensions = []string{"io.modelcontextprotocol/tasks"}

// relayable narrows a session's client capabilities (a JSON object) to those the gateway
// relays, in a fixed order: what a 2026-07-28 server is told the client can do. Anything that
// is not an object reads as no capability.
func relayable(caps json.RawMessage) json.RawMessage {
	var all map[string]json.RawMessage
	if json.Unmarshal(caps, &all) != nil {
		all = nil
	}
	if ext, ok := all["extensions"]; ok {
		all["extensions"] = withoutExtensions(ext)
	}
	out := []byte{}
	for _, k := range relayedCapabilities {
		if v, ok := all[k]; ok && len(v) > 0 && v[0] == '{' {
			out = conn.AppendMember(out, k, v)
		}
	}
	return append(append([]byte{'{'}, out...), '}')
}

// withoutExtensions drops the extensions the gateway cannot carry from an extensions object.
func withoutExtensions(ext json.RawMessage) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(ext, &m) != nil {
		return nil
	}
	for _, k := range unrelayedExtensions {
		delete(m, k)
	}
	out, _ := json.Marshal(m) // sorted keys
	return out
}

// sessionCapabilities gives a stateful session's declared capabilities, narrowed (relayable),
// when a 2026-07-28 server is to be told them (conn.WithClientCapabilities).
func sessionCapabilities(ss *mcp.ServerSession) func() json.RawMessage {
	return func() json.RawMessage {
		var caps json.RawMessage
		if ip := ss.InitializeParams(); ip != nil && ip.Capabilities != nil {
			caps, _ = json.Marshal(ip.Capabilities)
		}
		return relayable(caps)
	}
}

// requestCapabilities gives a 2026-07-28 request's own capabilities (its _meta's), narrowed.
func requestCapabilities(caps json.RawMessage) func() json.RawMessage {
	return func() json.RawMessage { return relayable(caps) }
}
