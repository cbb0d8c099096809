package gateway

import (
	"time"

	"github.com/dsh-dev/projectmcp/internal/gateway/access"
)

// Access is decided per request, and a long-lived stream is one request: a 2025-11-25
// session's GET stream lasts until SessionTimeout after its last request, and a 2026-07-28
// listen as long as its client keeps it. So that a revoked identity stops receiving what they
// carry, the sweep looks at the verdicts the Authorizer holds (access.Revocable, no review on
// the way) and ends the stateful sessions, with their streams, and the listens of an identity
// whose access was refused since. And a listen ends SessionTimeout after it opened, with its
// result, so that its client listens again and is authorized anew: a verdict the Authorizer no
// longer holds tells nothing, so this bounds the rest. A client copes with a listen's end
// already, as the endpoint's closing (a restart, a handoff to another replica) ends it so.

// endRevoked ends what the sweep finds at now: the listens past their life, and the listens
// and stateful sessions of identities whose access was revoked.
func (p *project) endRevoked(now time.Time) {
	revoked := p.revoked()
	p.listeners.endWhere(func(l *listen) bool {
		return now.Sub(l.began) >= p.g.opts.SessionTimeout || revoked(l.who)
	})
	for ref, s := range p.sessions.served() {
		if revoked(s.who) {
			_ = s.ss.Close()
			p.ended(ref, s.ss)
		}
	}
}

// revoked reports whether the Authorizer holds a refusal of who's access to the project; never,
// in local mode or with an Authorizer that cannot tell.
func (p *project) revoked() func(access.Identity) bool {
	ra, ok := p.g.opts.Auth.(access.Revocable)
	if !ok {
		return func(access.Identity) bool { return false }
	}
	return func(who access.Identity) bool { return ra.Revoked(who, p.key) }
}
