package gateway

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"sync"
	"time"

	"github.com/dsh-dev/projectmcp/internal/gateway/access"
	"github.com/dsh-dev/projectmcp/internal/gateway/paths"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Sessions are private to the principal that opened them, and nothing outside the gateway
// learns their ids.
//
// A session's ref (access.SessionRef) is a hash of what names it on the wire, and its name
// everywhere the id would be seen by someone else.
//
// The session table binds each ref to the principal that mounted it. A request that names a
// session its principal does not own is answered 404, on every method and path, exactly as a
// session that does not exist is: the caller learns nothing about it.

// DefaultMaxSessionsPerPrincipal is the default of Options.MaxSessionsPerPrincipal.
const DefaultMaxSessionsPerPrincipal = 100

// errNotOwner refuses a mount under a ref another principal owns. Refs of both kinds make that
// unreachable (a stateful ref is minted by initialize, a stateless one hashes the
// principal in); the check keeps the table's one rule in the one place that writes it.
var errNotOwner = errors.New("session not found")

// sessions is an endpoint's table of its sessions: one record per session, by its ref
// (access.SessionRef), and the one lock that guards every record. Only the table's methods read or
// write a record, each under the lock and without calling out while it holds it (but for the
// cancel functions of a session's calls, which only cancel a context). A record exists while
// it holds something: a principal, a stateful session, a stateless session's last request, a
// log level, a subscription or a call in flight; the method that empties it drops it.
type sessions struct {
	mu      sync.Mutex
	records map[string]*session
	// principals counts each principal's sessions on every endpoint of the project together
	// (the project endpoint's table and its per-server endpoints' share one), so that opening
	// sessions on each endpoint does not multiply an identity's bound.
	principals *principals

	// The project's log level (notify.go): a session has set one (leveled); relevel's
	// goroutine runs (leveling) and the levels changed since it last applied them (levelStale).
	leveled, leveling, levelStale bool
	// leveledOn are the servers a session holding a grant on them has set a level for (an RBAC
	// project's servers each have their own level).
	leveledOn map[string]bool
}

// session is one session's record.
type session struct {
	owner string // the principal that mounted it (owned)
	owned bool

	// A stateful session once it has initialized, and its activity (for SessionTimeout):
	// nil once it has expired or ended.
	ss       *mcp.ServerSession
	activity *activity

	// seen: a stateless session's last request (for StatelessIdle); zero for a stateful one.
	seen time.Time

	level    mcp.LoggingLevel // the log level it set (hasLevel)
	hasLevel bool

	// who is the identity the session is served as (its latest request's, as a client renews
	// its token), whose grants are decided. grants are the servers it holds a grant on (an RBAC
	// project; grants.go), decided for the routes grantsFor at grantsAt; undecided while
	// grantsAt is zero.
	who       access.Identity
	grants    map[string]bool
	grantsFor *paths.Routes
	grantsAt  time.Time

	subs   map[string]string             // subscribed URI → server (pendingSubscription while under way)
	subsOf string                        // the principal whose share subs count toward
	calls  map[string]context.CancelFunc // forwarded calls in flight, by JSON-RPC id as sent (1 and "1" differ)
}

// activity is a stateful session's request count and when its last request ended.
type activity struct {
	busy int
	last time.Time
}

func (r *session) empty() bool {
	return !r.owned && r.ss == nil && r.activity == nil && r.seen.IsZero() && !r.hasLevel && len(r.subs) == 0 && len(r.calls) == 0
}

// record is ref's record, made when it has none; t.mu is held.
func (t *sessions) record(ref string) *session {
	r := t.records[ref]
	if r == nil {
		if t.records == nil {
			t.records = map[string]*session{}
		}
		r = &session{}
		t.records[ref] = r
	}
	return r
}

// tidy drops ref's record once it holds nothing; t.mu is held.
func (t *sessions) tidy(ref string, r *session) {
	if r.empty() {
		delete(t.records, ref)
	}
}

// own records that the session ref belongs to principal. It refuses (with the reason) a
// session another principal owns, and a new one past max sessions of principal's on every
// endpoint of the project together.
func (t *sessions) own(ref, principal string, max int, project string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.record(ref)
	switch {
	case r.owned && r.owner == principal:
		return nil
	case r.owned:
		return errNotOwner
	}
	if n, ok := t.shared().take(principal, ref, max); !ok {
		t.tidy(ref, r)
		return fmt.Errorf("this identity holds %d sessions of projectmcp %s, the most one identity may (--max-sessions-per-principal); end one first",
			n, project)
	}
	r.owner, r.owned = principal, true
	return nil
}

// disown forgets a released session's owner.
func (t *sessions) disown(ref string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.records[ref]
	if r == nil || !r.owned {
		return
	}
	t.shared().give(r.owner, ref)
	r.owner, r.owned = "", false
	r.who, r.grants, r.grantsFor, r.grantsAt = access.Identity{}, nil, nil, time.Time{}
	t.tidy(ref, r)
}

// shared is the principals' table, made for a table that shares none; t.mu is held.
func (t *sessions) shared() *principals {
	if t.principals == nil {
		t.principals = &principals{}
	}
	return t.principals
}

// principals are the sessions each principal owns on a project's endpoints, under a lock of its
// own that is taken with a session table's held and takes no other (a leaf).
type principals struct {
	mu sync.Mutex
	// refs: principal → session ref → the endpoints that own it. A stateless session used
	// on several endpoints has one ref on each (its name is the project's), and is one session.
	refs map[string]map[string]int
	// subs: principal → the resource subscriptions its sessions hold, on every endpoint.
	subs map[string]int
	// listens: principal → its sessions' open listens, and session ref → its own.
	listens, sessionListens map[string]int
}

// take counts ref among principal's sessions; false (with how many it holds) when it is a new
// one past max.
func (o *principals) take(principal, ref string, max int) (int, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	held := o.refs[principal]
	if held[ref] == 0 && len(held) >= max {
		return len(held), false
	}
	if held == nil {
		if o.refs == nil {
			o.refs = map[string]map[string]int{}
		}
		held = map[string]int{}
		o.refs[principal] = held
	}
	held[ref]++
	return len(held), true
}

// give takes back one endpoint's ownership of ref.
func (o *principals) give(principal, ref string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	held := o.refs[principal]
	if held[ref] == 0 {
		return // never taken
	}
	if held[ref]--; held[ref] <= 0 {
		delete(held, ref)
	}
	if len(held) == 0 {
		delete(o.refs, principal)
	}
}

// subscribe counts one more subscription of principal's sessions; false (with how many they
// hold) past whose.
func (o *principals) subscribe(principal string, whose int) (int, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := o.subs[principal]
	if n >= whose {
		return n, false
	}
	if o.subs == nil {
		o.subs = map[string]int{}
	}
	o.subs[principal] = n + 1
	return n + 1, true
}

// unsubscribe counts n fewer subscriptions of principal's sessions.
func (o *principals) unsubscribe(principal string, n int) {
	if n == 0 {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if left := o.subs[principal] - n; left > 0 {
		o.subs[principal] = left
	} else {
		delete(o.subs, principal)
	}
}

// listen counts one more open listen of ref's, principal's session; an error naming the bound
// when the session holds perSession or its principal's sessions perPrincipal.
func (o *principals) listen(principal, ref string, perSession, perPrincipal int) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case o.sessionListens[ref] >= perSession:
		return fmt.Errorf("this session has %d listens open, the most one session may; end one first", o.sessionListens[ref])
	case o.listens[principal] >= perPrincipal:
		return fmt.Errorf("this identity's sessions have %d listens open, the most one identity may (--max-sessions-per-principal); end one first", o.listens[principal])
	}
	if o.listens == nil {
		o.listens, o.sessionListens = map[string]int{}, map[string]int{}
	}
	o.listens[principal]++
	o.sessionListens[ref]++
	return nil
}

// unlisten counts a listen listen counted that has ended.
func (o *principals) unlisten(principal, ref string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.sessionListens[ref] == 0 {
		return // never counted
	}
	if o.listens[principal]--; o.listens[principal] <= 0 {
		delete(o.listens, principal)
	}
	if o.sessionListens[ref]--; o.sessionListens[ref] <= 0 {
		delete(o.sessionListens, ref)
	}
}

// count is how many sessions principal holds.
func (o *principals) count(principal string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.refs[principal])
}

// foreign reports whether a session is owned by a principal other than principal. An unknown
// session is not foreign: the SDK answers it (404) as it does any unknown id.
func (t *sessions) foreign(ref, principal string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.records[ref]
	return r != nil && r.owned && r.owner != principal
}

// owned reports whether a principal owns the session ref.
func (t *sessions) owned(ref string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.records[ref]
	return r != nil && r.owned
}

// initialized records a stateful session that is initializing, active as of now.
func (t *sessions) initialized(ref string, ss *mcp.ServerSession, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.record(ref)
	r.ss, r.activity = ss, &activity{last: now}
}

// stateful returns a mounted stateful session, or nil.
func (t *sessions) stateful(ref string) *mcp.ServerSession {
	t.mu.Lock()
	defer t.mu.Unlock()
	if r := t.records[ref]; r != nil {
		return r.ss
	}
	return nil
}

// statefuls are the mounted stateful sessions, by ref.
func (t *sessions) statefuls() map[string]*mcp.ServerSession {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]*mcp.ServerSession{}
	for ref, r := range t.records {
		if r.ss != nil {
			out[ref] = r.ss
		}
	}
	return out
}

// served are the mounted stateful sessions, by ref, each with the identity it is served as.
func (t *sessions) served() map[string]servedSession {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]servedSession{}
	for ref, r := range t.records {
		if r.ss != nil && r.owned {
			out[ref] = servedSession{r.ss, r.who}
		}
	}
	return out
}

// servedSession is a stateful session and who it is served as.
type servedSession struct {
	ss  *mcp.ServerSession
	who access.Identity
}

// counts are the mounted stateful sessions and the stateless ones.
func (t *sessions) counts() (stateful, stateless int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range t.records {
		if r.ss != nil {
			stateful++
		}
		if !r.seen.IsZero() {
			stateless++
		}
	}
	return stateful, stateless
}

// enter notes a request of a stateful session, served as who; false when it is not one of
// ours.
func (t *sessions) enter(ref string, who access.Identity) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.records[ref]
	if r == nil || r.activity == nil {
		return false
	}
	r.activity.busy++
	if r.owned && r.owner == who.Principal {
		r.who = who
	}
	return true
}

// leave notes the end of a request enter noted, at now.
func (t *sessions) leave(ref string, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if r := t.records[ref]; r != nil && r.activity != nil {
		r.activity.busy--
		r.activity.last = now
	}
}

// idle takes the stateful sessions with no request in flight and none for longer than
// timeout: they take no more requests (enter), and the caller closes and releases them.
func (t *sessions) idle(now time.Time, timeout time.Duration) map[string]*mcp.ServerSession {
	t.mu.Lock()
	defer t.mu.Unlock()
	idle := map[string]*mcp.ServerSession{}
	for ref, r := range t.records {
		if a := r.activity; a != nil && a.busy == 0 && now.Sub(a.last) > timeout {
			if r.ss != nil {
				idle[ref] = r.ss
			}
			r.activity = nil
		}
	}
	return idle
}

// end takes a stateful session out of the table and cancels its forwarded calls, which no
// disconnect ends (paths: resume.go); false when ss is not the session ref names (released already,
// or a different session under the same ref).
func (t *sessions) end(ref string, ss *mcp.ServerSession) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.records[ref]
	if r == nil || r.ss != ss {
		return false
	}
	r.ss, r.activity = nil, nil
	for _, cancel := range r.calls {
		cancel()
	}
	t.tidy(ref, r)
	return true
}

// touch notes a stateless session's request at now.
func (t *sessions) touch(ref string, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.record(ref).seen = now
}

// stale takes the stateless sessions whose last request is older than idle (every one with
// idle 0), for the caller to release.
func (t *sessions) stale(now time.Time, idle time.Duration, all bool) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var gone []string
	for ref, r := range t.records {
		if !r.seen.IsZero() && (all || now.Sub(r.seen) > idle) {
			gone = append(gone, ref)
			r.seen = time.Time{}
			t.tidy(ref, r)
		}
	}
	return gone
}

// addCall records a forwarded call of ref's by its JSON-RPC id, cancelled by cancel.
func (t *sessions) addCall(ref, id string, cancel context.CancelFunc) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.record(ref)
	if r.calls == nil {
		r.calls = map[string]context.CancelFunc{}
	}
	r.calls[id] = cancel
}

// dropCall forgets a forwarded call that has ended.
func (t *sessions) dropCall(ref, id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if r := t.records[ref]; r != nil {
		delete(r.calls, id)
		t.tidy(ref, r)
	}
}

// call is the cancel function of ref's forwarded call id in flight, or nil.
func (t *sessions) call(ref, id string) context.CancelFunc {
	t.mu.Lock()
	defer t.mu.Unlock()
	if r := t.records[ref]; r != nil {
		return r.calls[id]
	}
	return nil
}

// setLevel records the log level ref set.
func (t *sessions) setLevel(ref string, level mcp.LoggingLevel) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.record(ref)
	r.level, r.hasLevel = level, true
	t.leveled = true
}

// level is the level the servers are set to: the most verbose of the sessions' levels; with
// none, quietest if a session ever set one, else "" (leave the servers alone).
func (t *sessions) level() mcp.LoggingLevel {
	t.mu.Lock()
	defer t.mu.Unlock()
	level := mcp.LoggingLevel("")
	best := math.MaxInt
	for _, r := range t.records {
		if i := paths.LevelRank(r.level); r.hasLevel && i >= 0 && i < best {
			best, level = i, r.level
		}
	}
	if level == "" && t.leveled {
		return quietest
	}
	return level
}

// levels are the levels an RBAC project's servers are set to: each the most verbose of the
// levels of the sessions that hold a grant on it; with none, quietest if one ever set one, else
// "" (leave the server alone). A session's level changes no server it holds no grant on.
func (t *sessions) levels(servers []string) map[string]mcp.LoggingLevel {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]mcp.LoggingLevel, len(servers))
	for _, server := range servers {
		level := mcp.LoggingLevel("")
		best := math.MaxInt
		for _, r := range t.records {
			if i := paths.LevelRank(r.level); r.hasLevel && r.grants[server] && i >= 0 && i < best {
				best, level = i, r.level
			}
		}
		switch {
		case level != "":
			if t.leveledOn == nil {
				t.leveledOn = map[string]bool{}
			}
			t.leveledOn[server] = true
		case t.leveledOn[server]:
			level = quietest
		}
		out[server] = level
	}
	return out
}

// relevel marks the levels changed; true when the caller is to start the goroutine that
// applies them (none runs).
func (t *sessions) relevel() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.levelStale = true
	start := !t.leveling
	t.leveling = true
	return start
}

// releveled is relevel's goroutine asking whether to go round again; false: it ends.
func (t *sessions) releveled() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.levelStale {
		t.leveling = false
		return false
	}
	t.levelStale = false
	return true
}

// claim makes ref's subscription entry for uri, pending, on principal's share; false when it
// has one already (nil error), or when the session holds max or its principal's sessions
// whose together (the error names the bound).
func (t *sessions) claim(ref, principal, uri string, max, whose int) (bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.record(ref)
	if _, ok := r.subs[uri]; ok {
		return false, nil
	}
	if len(r.subs) == 0 {
		r.subsOf = principal
	}
	if n := len(r.subs); n >= max {
		t.tidy(ref, r)
		return false, fmt.Errorf(
			"this session holds %d resource subscriptions, the most one session may (--max-subscriptions-per-session); unsubscribe one first", n)
	}
	if n, ok := t.shared().subscribe(r.subsOf, whose); !ok {
		t.tidy(ref, r)
		return false, fmt.Errorf(
			"this identity's sessions hold %d resource subscriptions, the most one identity may (%d times --max-subscriptions-per-session); unsubscribe one first", n, subscriptionsPerPrincipal)
	}
	if r.subs == nil {
		r.subs = map[string]string{}
	}
	r.subs[uri] = pendingSubscription
	return true, nil
}

// unsub takes r's subscription to uri out, and off its principal's share; t.mu is held.
func (t *sessions) unsub(r *session, uri string) {
	if _, ok := r.subs[uri]; ok {
		delete(r.subs, uri)
		t.shared().unsubscribe(r.subsOf, 1)
	}
}

// settle ends a claim: the subscription is server's when the upstream subscribe succeeded
// (ok), else it goes; still is false when the session dropped it meanwhile.
func (t *sessions) settle(ref, uri, server string, ok bool) (still bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.records[ref]
	if r == nil {
		return false
	}
	if _, still = r.subs[uri]; still {
		if ok {
			r.subs[uri] = server
		} else {
			t.unsub(r, uri)
			t.tidy(ref, r)
		}
	}
	return still
}

// unsubscribe takes ref's subscription to uri out, with its server.
func (t *sessions) unsubscribe(ref, uri string) (server string, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.records[ref]
	if r == nil {
		return "", false
	}
	server, ok = r.subs[uri]
	t.unsub(r, uri)
	t.tidy(ref, r)
	return server, ok
}

// dropSubscriptions takes ref's subscriptions out (released: their upstream ones are gone).
func (t *sessions) dropSubscriptions(ref string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if r := t.records[ref]; r != nil {
		t.shared().unsubscribe(r.subsOf, len(r.subs))
		r.subs = nil
		t.tidy(ref, r)
	}
}

// forget takes a released session's log level out, and returns its subscriptions' URIs and
// whether it had set a level.
func (t *sessions) forget(ref string) (uris []string, leveled bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.records[ref]
	if r == nil {
		return nil, false
	}
	for uri := range r.subs {
		uris = append(uris, uri)
	}
	leveled = r.hasLevel
	r.level, r.hasLevel = "", false
	t.tidy(ref, r)
	return uris, leveled
}

// identify notes the identity a session's request is served as (the owner's alone).
func (t *sessions) identify(ref string, who access.Identity) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if r := t.records[ref]; r != nil && r.owned && r.owner == who.Principal {
		r.who = who
	}
}

// decided are ref's grants, when they were decided for routes no longer than fresh before now.
func (t *sessions) decided(ref string, routes *paths.Routes, now time.Time, fresh time.Duration) (map[string]bool, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.records[ref]
	if r == nil || !current(r, routes, now, fresh) {
		return nil, false
	}
	return r.grants, true
}

// current reports whether r's grants were decided for routes no longer than fresh before now.
func current(r *session, routes *paths.Routes, now time.Time, fresh time.Duration) bool {
	return !r.grantsAt.IsZero() && r.grantsFor == routes && now.Sub(r.grantsAt) <= fresh
}

// grant records the grants decided for ref's identity who, for routes at now (unless the
// session has gone, or is another's). releveled: the session has set a level, and the servers
// it holds a grant on changed.
func (t *sessions) grant(ref string, who access.Identity, routes *paths.Routes, now time.Time, grants map[string]bool) (releveled bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.records[ref]
	if r == nil || !r.owned || r.owner != who.Principal {
		return false
	}
	releveled = r.hasLevel && !maps.Equal(r.grants, grants)
	r.grants, r.grantsFor, r.grantsAt = grants, routes, now
	return releveled
}

// undecided are the sessions whose grants are to be decided (again): never decided, decided
// for other routes, or longer than fresh before now; by ref, each with who it is served as.
func (t *sessions) undecided(routes *paths.Routes, now time.Time, fresh time.Duration) map[string]access.Identity {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]access.Identity{}
	for ref, r := range t.records {
		if r.owned && !current(r, routes, now, fresh) {
			out[ref] = r.who
		}
	}
	return out
}

// holders are the mounted stateful sessions whose identity holds a grant on server, as last
// decided; stale: a session's grants are older than fresh, to be decided again.
func (t *sessions) holders(server string, now time.Time, fresh time.Duration) (holders []*mcp.ServerSession, stale bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, r := range t.records {
		if r.ss == nil {
			continue
		}
		if r.grants[server] {
			holders = append(holders, r.ss)
		}
		if r.owned && (r.grantsAt.IsZero() || now.Sub(r.grantsAt) > fresh) {
			stale = true
		}
	}
	return holders, stale
}
