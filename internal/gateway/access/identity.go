package access

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
)

// Identity is who a request comes from, as the gateway authenticated it: made once, after the
// Authorizer or local mode allowed the request, and handed down as a value (the endpoint's and
// the request path's functions take it as a parameter; a context value would cost every call a
// copy of its *http.Request). Nothing downstream reads who is asking from a client's headers.
type Identity struct {
	// Principal names the identity sessions are bound to (Principal; local mode's by uid).
	Principal string
	// Addr is the caller's address as the gateway's listener saw it (host:port): a stateless
	// session's name without a SessionHeader has it, and review budgets are per source.
	Addr string
	// token is the bearer token that authenticated the request, for the RBAC item reviews of
	// its user (Permit); "" in local mode. It is never logged or written anywhere.
	token string
}

// NewIdentity is the identity of r, which the gateway authenticated as principal.
func NewIdentity(principal string, r *http.Request) Identity {
	return Identity{Principal: principal, Addr: r.RemoteAddr, token: bearerOf(r.Header)}
}

// bearerOf is the bearer token of an Authorization header, or "".
func bearerOf(h http.Header) string {
	token, _ := strings.CutPrefix(h.Get("Authorization"), "Bearer ")
	return token
}

// The SDK hands its method handlers the request's HTTP header and nothing of the request's
// context (a stateful session's requests are served in the session's own context), so an
// identity crosses into them in two headers: ToSDK writes them over whatever the client sent,
// before any request reaches the SDK, and FromSDK reads them in the handlers. Nothing else
// reads or writes them, and no request carries them upstream (a forwarded request is written
// from its body alone).
const (
	principalHeader = "X-ProjectMCP-Principal"
	addrHeader      = "X-ProjectMCP-Remote-Addr"
)

// ToSDK writes id into h, the header of a request the SDK may serve.
func ToSDK(h http.Header, id Identity) {
	h.Set(principalHeader, id.Principal)
	h.Set(addrHeader, id.Addr)
}

// FromSDK is the identity ToSDK wrote into h (the header an SDK handler is given); the zero
// Identity for nil.
func FromSDK(h http.Header) Identity {
	if h == nil {
		return Identity{}
	}
	return Identity{Principal: h.Get(principalHeader), Addr: h.Get(addrHeader), token: bearerOf(h)}
}

// SessionRef is the name of a session outside the SDK's own session table: a hash of what names
// it on the wire (a 2025-11-25 session's Mcp-Session-Id; for a 2026-07-28 session, its principal
// with its SessionHeader, or client name and address). The ref is the session's name everywhere
// the id would be seen by someone else: the registry and so status.sessions, spans, logs, and the
// gateway's own tables. A ref read from status cannot be sent back as an Mcp-Session-Id.
func SessionRef(wireName string) string {
	sum := sha256.Sum256([]byte(wireName))
	return "s-" + hex.EncodeToString(sum[:8])
}
