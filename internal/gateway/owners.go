package gateway

import (
	"errors"
)

// Sessions are private to the principal that opened them, and nothing outside the gateway
// learns their ids.
//
// A session's ref (access.SessionRef) is a hash of what names it on the wire, and its name
// everywhere the id would be seen by someone else.
//
// The session table (sessions.go) binds each ref to the principal that mounted it. A request that names a
// session its principal does not own is answered 404, on every method and path, exactly as a
// session that does not exist is: the caller learns nothing about it.

// DefaultMaxSessionsPerPrincipal is the default of Options.MaxSessionsPerPrincipal.
const DefaultMaxSessionsPerPrincipal = 100

// own records that the session ref belongs to principal. It refuses (with the reason) a
// session another principal owns, and a new one past the principal's share of the project.
func (p *project) own(ref, principal string) error {
	return p.sessions.own(ref, principal, p.g.opts.MaxSessionsPerPrincipal, p.key.String())
}

// errNotOwner refuses a mount under a ref another principal owns. Refs of both kinds make that
// unreachable (a stateful ref is minted by initialize, a stateless one hashes the
// principal in); the check keeps the table's one rule in the one place that writes it.
var errNotOwner = errors.New("session not found")
