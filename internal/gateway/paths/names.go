package paths

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"reflect"
	"strings"

	"github.com/dsh-dev/projectmcp/internal/gateway/access"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// How a session is named: a stateful one by its Mcp-Session-Id, a stateless one by its
// principal with its SessionHeader, or with the client name it announces and its address;
// either as a ref (access.SessionRef), never as what the client sent.

// SessionHeader names a stateless (2026-07-28) client's session. Such a client has no
// Mcp-Session-Id: requests carrying the same value of this header are one session, whose
// slots appear in status and which is released after StatelessIdle without a request. A
// stateless request without the header belongs to a session named after the client's
// announced name and remote address.
const SessionHeader = "X-ProjectMCP-Session"

// MaxSessionName bounds the stateless session header and the client name a session announces:
// both are copied into status, whose size every session of the project shares.
const MaxSessionName = 128

// ValidSessionName reports whether a stateless session's header value may name a session.
func ValidSessionName(v string) bool {
	if len(v) == 0 || len(v) > MaxSessionName {
		return false
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._-:@", c) >= 0) {
			return false
		}
	}
	return true
}

// SessionID names the session a request belongs to by its ref (access.SessionRef; see
// SessionHeader).
func SessionID(req mcp.Request) (id string, stateless bool) {
	ss, _ := req.GetSession().(*mcp.ServerSession)
	if ss != nil && ss.ID() != "" {
		return access.SessionRef(ss.ID()), false
	}
	extra := req.GetExtra()
	var h http.Header
	if extra != nil {
		h = extra.Header
	}
	client := ""
	if m := MetaOf(req); m != nil {
		if info, ok := m[mcp.MetaKeyClientInfo].(map[string]any); ok {
			client, _ = info["name"].(string)
		}
	}
	return StatelessID(access.FromSDK(h), h.Get(SessionHeader), client), true
}

// StatelessID names a stateless session by its ref: its principal with its SessionHeader
// (named), else with the client name it announces and its address. Two principals that send
// the same header are two sessions.
func StatelessID(who access.Identity, named, client string) string {
	principal := who.Principal
	if named != "" {
		return access.SessionRef(principal + "\x00header\x00" + named)
	}
	if client == "" {
		client = "client"
	}
	client = Bounded(client)
	addr, _, _ := net.SplitHostPort(who.Addr)
	return access.SessionRef(fmt.Sprintf("%s\x00client\x00%s@%s", principal, client, addr))
}

// Bounded cuts a name an agent chose to MaxSessionName bytes; a cut name ends in "~" and 8 hex
// digits of the SHA-256 of the whole, so two long names that share a beginning stay apart.
func Bounded(name string) string {
	if len(name) <= MaxSessionName {
		return name
	}
	sum := sha256.Sum256([]byte(name))
	return strings.ToValidUTF8(name[:MaxSessionName-9], "") + "~" + hex.EncodeToString(sum[:4])
}

// MetaOf returns a request's _meta, or nil (the params may be a typed nil pointer).
func MetaOf(req mcp.Request) map[string]any {
	params := req.GetParams()
	if params == nil || reflect.ValueOf(params).IsNil() {
		return nil
	}
	return params.GetMeta()
}
