package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
)

// Sessions are private to the principal that opened them, and nothing outside the gateway
// learns their ids.
//
// A session's ref is a hash of what names it on the wire (a 2025-11-25 session's
// Mcp-Session-Id; for a 2026-07-28 session, its principal with its SessionHeader, or client name
// and address). The ref is the session's name everywhere the id would be seen by someone
// else: the registry and so status.sessions, spans, logs, and the gateway's own tables. A ref
// read from status cannot be sent back as an Mcp-Session-Id.
//
// The session table (sessions.go) binds each ref to the principal that mounted it. A request that names a
// session its principal does not own is answered 404, on every method and path, exactly as a
// session that does not exist is: the caller learns nothing about it.

// DefaultMaxSessionsPerPrincipal is the default of Options.MaxSessionsPerPrincipal.
const DefaultMaxSessionsPerPrincipal = 100

// principalHeader carries the authenticated principal from the HTTP layer to the MCP layer,
// as remoteHeader does the address. The gateway overwrites whatever a client sent in it, and
// it is never forwarded upstream.
const principalHeader = "X-ProjectMCP-Principal"

// sessionRef is the name of a session outside the SDK's own session table.
func sessionRef(wireName string) string {
	sum := sha256.Sum256([]byte(wireName))
	return "s-" + hex.EncodeToString(sum[:8])
}

// own records that the session ref belongs to principal. It refuses (with the reason) a
// session another principal owns, and a new one past the principal's share of the project.
func (p *project) own(ref, principal string) error {
	return p.sessions.own(ref, principal, p.g.opts.MaxSessionsPerPrincipal, p.key.String())
}

// errNotOwner refuses a mount under a ref another principal owns. Refs of both kinds make that
// unreachable (a stateful ref is minted by initialize, a stateless one hashes the
// principal in); the check keeps the table's one rule in the one place that writes it.
var errNotOwner = errors.New("session not found")

// principalOf is the principal the gateway authenticated for a request (see principalHeader).
func principalOf(h http.Header) string {
	if h == nil {
		return ""
	}
	return h.Get(principalHeader)
}
