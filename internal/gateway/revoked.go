package gateway

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/dsh-dev/projectmcp/internal/gateway/access"
)

// Access is decided per request, and a long-lived stream is one request: a 2025-11-25
// session's GET stream lasts until SessionTimeout after its last request, and a 2026-07-28
// listen as long as its client keeps it. So that a revoked identity stops receiving what they
// carry, each sweep does two things, neither of which waits for a review in the run loop:
//   - endRevoked looks at the verdicts the Authorizer holds (access.Revocable) and ends the
//     stateful sessions, with their streams, and the listens of an identity whose access was
//     refused since;
//   - recheckHolders has the Authorizer review again, in the background, the access of every
//     identity holding such a stream whose verdict went stale, as its next request would, so
//     that a revocation shows at the next sweep though no request of theirs came.
//
// A listen is not ended for its age: clients (the Go SDK's among them) do not listen again
// when a listen ends, and would stop hearing of list changes until they reconnect.

// endRevoked ends the listens and stateful sessions of identities whose access was revoked.
func (p *project) endRevoked() {
	revoked := p.revoked()
	p.listeners.endWhere(func(l *listen) bool { return revoked(l.who) })
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

// holders are the identities of the project's listens and stateful sessions, once each
// whatever address they came from (one verdict serves them all).
func (p *project) holders() []access.Identity {
	seen := map[access.Identity]bool{}
	var who []access.Identity
	add := func(id access.Identity) {
		anywhere := id
		anywhere.Addr = ""
		if !seen[anywhere] {
			seen[anywhere] = true
			who = append(who, id)
		}
	}
	for _, id := range p.listeners.holders() {
		add(id)
	}
	for _, s := range p.sessions.served() {
		add(s.who)
	}
	return who
}

// held is one identity's access to one project, to review again.
type held struct {
	key types.NamespacedName
	who access.Identity
}

// recheckHolders starts a pass over the holders of the projects' long-lived streams, unless
// the last one is still running: the Authorizer answers a fresh verdict from its cache and
// reviews a stale one within the identity's allowance for reviewing verdicts again.
func (g *Gateway) recheckHolders(ctx context.Context, projects []*project) {
	ra, ok := g.opts.Auth.(access.Revocable)
	if !ok {
		return
	}
	var all []held
	for _, p := range projects {
		for _, who := range p.holders() {
			all = append(all, held{p.key, who})
		}
	}
	if len(all) == 0 {
		return
	}
	g.rechecks.start(func() {
		for _, h := range all {
			if ctx.Err() != nil {
				return
			}
			ra.Recheck(ctx, h.who, h.key)
		}
	})
}

// rechecker runs one pass at a time and owns it: the run loop waits for it on its way out.
type rechecker struct {
	mu      sync.Mutex
	running bool
	wg      sync.WaitGroup
}

// start runs pass in a goroutine of its own, unless a pass is running.
func (r *rechecker) start(pass func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.running {
		return
	}
	r.running = true
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer func() {
			r.mu.Lock()
			r.running = false
			r.mu.Unlock()
		}()
		pass()
	}()
}

// wait returns once no pass runs.
func (r *rechecker) wait() { r.wg.Wait() }
