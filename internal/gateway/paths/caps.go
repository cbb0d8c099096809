package paths

import (
	"encoding/json"
	"sync"

	"github.com/dsh-dev/projectmcp/internal/jsonrpcwire"
	"github.com/modelcontextprotocol/go-sdk/mcp"
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
			out = jsonrpcwire.AppendMember(out, k, v)
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
	return func() json.RawMessage { return relayedCaps.of(caps) }
}

// A 2026-07-28 client sends the same capabilities with every request, so what the gateway
// makes of them is made once per distinct value, not per request: the narrowed ones a server
// is told (relayable), and the ones a bridged request declares, decoded (bridge.go).
var (
	relayedCaps  = &readOnce[json.RawMessage]{read: relayable}
	declaredCaps = &readOnce[declared]{read: declare}
)

// declared is a session's client capabilities as the SDK's types take them; ok false when they
// do not decode.
type declared struct {
	caps mcp.ClientCapabilities
	ok   bool
}

func declare(caps json.RawMessage) declared {
	var d declared
	d.ok = json.Unmarshal(caps, &d.caps) == nil
	return d
}

// readOnceKept bounds the values a readOnce keeps; past it they are forgotten and kept anew.
const readOnceKept = 1024

// readOnce keeps read's answers by the bytes read. An answer is shared, and only read.
type readOnce[T any] struct {
	read func(json.RawMessage) T
	mu   sync.Mutex
	kept map[string]T
}

func (c *readOnce[T]) of(raw json.RawMessage) T {
	c.mu.Lock()
	out, ok := c.kept[string(raw)]
	c.mu.Unlock()
	if ok {
		return out
	}
	out = c.read(raw)
	c.mu.Lock()
	if c.kept == nil || len(c.kept) >= readOnceKept {
		c.kept = make(map[string]T)
	}
	c.kept[string(raw)] = out
	c.mu.Unlock()
	return out
}
