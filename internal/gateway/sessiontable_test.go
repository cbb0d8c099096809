package gateway

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/internal/gateway/access"
	"github.com/dsh-dev/projectmcp/internal/gateway/paths"
)

// The session table keeps one record per session while the record holds anything, and drops
// it when the last of its fields is emptied: no session leaves a record behind.
func TestSessionTableRecords(t *testing.T) {
	var tab sessions
	now := time.Now()
	left := func(want int) {
		t.Helper()
		if n := len(tab.records); n != want {
			t.Fatalf("%d records, want %d: %+v", n, want, tab.records)
		}
	}

	// Owners: a principal's share, and a session of another principal's is foreign.
	if err := tab.own("a", "alice", 1, "ns/p"); err != nil {
		t.Fatal(err)
	}
	if err := tab.own("a", "alice", 1, "ns/p"); err != nil {
		t.Fatalf("owning one's own session again: %v", err)
	}
	if err := tab.own("a", "bob", 1, "ns/p"); !errors.Is(err, errNotOwner) {
		t.Fatalf("another's session: %v, want errNotOwner", err)
	}
	if err := tab.own("b", "alice", 1, "ns/p"); err == nil {
		t.Fatal("a session past the principal's share was owned")
	}
	left(1) // the refused one left none
	if !tab.foreign("a", "bob") || tab.foreign("a", "alice") || tab.foreign("unknown", "bob") {
		t.Error("foreign: wrong answer")
	}

	// A stateful session: activity, calls, expiry, end.
	ss := &mcp.ServerSession{}
	tab.initialized("a", ss, now)
	if !tab.enter("a", access.Identity{Principal: "alice"}) || tab.enter("unknown", access.Identity{Principal: "alice"}) {
		t.Error("enter: wrong answer")
	}
	if idle := tab.idle(now.Add(time.Hour), time.Minute); len(idle) != 0 {
		t.Error("a session with a request in flight expired")
	}
	tab.leave("a", now)
	cancelled := false
	tab.addCall("a", `1`, func() { cancelled = true })
	if tab.call("a", `"1"`) != nil || tab.call("a", `1`) == nil {
		t.Error("calls are named by their ids as sent")
	}
	if s, _ := tab.counts(); s != 1 {
		t.Errorf("%d stateful sessions, want 1", s)
	}
	if idle := tab.idle(now.Add(time.Hour), time.Minute); idle["a"] != ss {
		t.Error("an idle session did not expire")
	}
	if tab.enter("a", access.Identity{Principal: "alice"}) {
		t.Error("an expired session takes requests")
	}
	if tab.end("a", &mcp.ServerSession{}) {
		t.Error("ended a different session under the same ref")
	}
	if !tab.end("a", ss) || !cancelled {
		t.Error("ending a session did not cancel its calls")
	}
	tab.dropCall("a", `1`)
	tab.disown("a")
	left(0)

	// A stateless session, its level and subscriptions.
	tab.touch("s", now)
	tab.setLevel("s", "info")
	tab.setLevel("t", "debug")
	if l := tab.level(); l != "debug" {
		t.Errorf("level %q, want debug", l)
	}
	if ok, err := tab.claim("s", "alice", "file:///a", 1, 4); !ok || err != nil {
		t.Fatalf("claim: %v %v", ok, err)
	}
	if ok, err := tab.claim("s", "alice", "file:///b", 1, 4); ok || err == nil {
		t.Error("a claim past the bound succeeded")
	}
	if !tab.settle("s", "file:///a", "srv", true) {
		t.Error("a settled subscription is gone")
	}
	if gone := tab.stale(now.Add(time.Hour), time.Minute, false); len(gone) != 1 || gone[0] != "s" {
		t.Errorf("stale %v, want [s]", gone)
	}
	uris, leveled := tab.forget("s")
	if len(uris) != 1 || !leveled {
		t.Errorf("forget: %v %v", uris, leveled)
	}
	if server, ok := tab.unsubscribe("s", "file:///a"); !ok || server != "srv" {
		t.Errorf("unsubscribe: %q %v", server, ok)
	}
	tab.dropSubscriptions("s")
	tab.forget("t")
	left(0)
	if l := tab.level(); l != quietest {
		t.Errorf("level %q once every session has gone, want %q", l, quietest)
	}
}

// On an RBAC project a session's grants decide what it is given of a server outside its own
// requests (holders) and which servers its level counts for (levels); grants decided for other
// routes, or too long ago, are to be decided again; a session's grants go with its owner.
func TestSessionTableGrants(t *testing.T) {
	var tab sessions
	now := time.Now()
	routes, later := &paths.Routes{}, &paths.Routes{}
	alice, bob := access.Identity{Principal: "alice"}, access.Identity{Principal: "bob"}
	ssA, ssB := &mcp.ServerSession{}, &mcp.ServerSession{}
	for ref, who := range map[string]access.Identity{"a": alice, "b": bob} {
		if err := tab.own(ref, who.Principal, 1, "ns/p"); err != nil {
			t.Fatal(err)
		}
		tab.identify(ref, who)
	}
	tab.initialized("a", ssA, now)
	tab.initialized("b", ssB, now)
	if holders, stale := tab.holders("db", now, time.Minute); len(holders) != 0 || !stale {
		t.Fatalf("before any decision: holders %v, stale %v; want none, stale", holders, stale)
	}
	if n := len(tab.undecided(routes, now, time.Minute)); n != 2 {
		t.Fatalf("%d undecided, want 2", n)
	}
	if tab.grant("a", bob, routes, now, map[string]bool{"db": true}) {
		t.Fatal("grants of another's identity were taken")
	}
	tab.grant("a", alice, routes, now, map[string]bool{"db": true})
	tab.grant("b", bob, routes, now, map[string]bool{})
	if holders, stale := tab.holders("db", now, time.Minute); len(holders) != 1 || holders[0] != ssA || stale {
		t.Fatalf("holders of db %v (stale %v), want a's session alone", holders, stale)
	}
	if _, stale := tab.holders("db", now.Add(2*time.Minute), time.Minute); !stale {
		t.Error("grants older than fresh are not stale")
	}
	if g, ok := tab.decided("a", routes, now, time.Minute); !ok || !g["db"] {
		t.Errorf("decided: %v %v", g, ok)
	}
	if _, ok := tab.decided("a", later, now, time.Minute); ok {
		t.Error("grants decided for other routes stand")
	}
	if n := len(tab.undecided(routes, now, time.Minute)); n != 0 {
		t.Errorf("%d undecided, want none", n)
	}

	// Levels: bob's debug counts for no server; alice's info for db alone.
	tab.setLevel("a", "info")
	tab.setLevel("b", "debug")
	if l := tab.levels([]string{"db", "vault"}); l["db"] != "info" || l["vault"] != "" {
		t.Errorf("levels %v, want db at info and vault left alone", l)
	}
	if !tab.grant("a", alice, later, now, map[string]bool{"db": true, "vault": true}) {
		t.Error("a leveled session's new grant does not set the levels again")
	}
	if tab.grant("a", alice, later, now, map[string]bool{"db": true, "vault": true}) {
		t.Error("the same grants set the levels again")
	}
	if l := tab.levels([]string{"db", "vault"}); l["db"] != "info" || l["vault"] != "info" {
		t.Errorf("levels %v, want both at info", l)
	}
	tab.forget("a")
	if l := tab.levels([]string{"db", "vault"}); l["db"] != quietest || l["vault"] != quietest {
		t.Errorf("levels %v once alice's session left, want both at %q (bob's debug counts for none)", l, quietest)
	}

	// Released: the grants go with the owner.
	tab.disown("a")
	if holders, _ := tab.holders("db", now, time.Minute); len(holders) != 0 {
		t.Errorf("a released session still holds db: %v", holders)
	}
}

// The principals' table counts sessions, not endpoints: a session owned on two endpoints is
// one of its principal's, a new one past the bound is refused, and the count falls only when
// the last endpoint gives a session back.
func TestPrincipalsCountSessions(t *testing.T) {
	shared := &principals{}
	project, view := sessions{principals: shared}, sessions{principals: shared}
	for _, step := range []struct {
		name      string
		tab       *sessions
		ref       string
		principal string
		ok        bool
	}{
		{"a first session", &project, "a", "alice", true},
		{"the same session on a per-server endpoint", &view, "a", "alice", true},
		{"a second session on the per-server endpoint", &view, "b", "alice", true},
		{"a third, on the project endpoint", &project, "c", "alice", false},
		{"another identity", &view, "c", "bob", true},
	} {
		if err := step.tab.own(step.ref, step.principal, 2, "ns/p"); (err == nil) != step.ok {
			t.Fatalf("%s: %v, want ok=%v", step.name, err, step.ok)
		}
	}
	if n := shared.count("alice"); n != 2 {
		t.Fatalf("alice holds %d sessions, want 2", n)
	}
	view.disown("a")
	if n := shared.count("alice"); n != 2 {
		t.Fatalf("a session still owned on the project endpoint counts: alice holds %d, want 2", n)
	}
	project.disown("a")
	view.disown("b")
	if n := shared.count("alice"); n != 0 || len(shared.refs) != 1 {
		t.Fatalf("alice holds %d sessions, %d principals counted; want 0 and bob alone", n, len(shared.refs))
	}
}

// An identity's sessions share one bound on their subscriptions, on every endpoint of the
// project: new sessions do not bring new shares. A subscription that goes, by unsubscribe, a
// failed upstream subscribe or the session's release, gives its place back.
func TestSubscriptionsPerPrincipal(t *testing.T) {
	shared := &principals{}
	project, view := sessions{principals: shared}, sessions{principals: shared}
	claim := func(tab *sessions, ref, principal, uri string) error {
		_, err := tab.claim(ref, principal, uri, 2, 3)
		return err
	}
	for _, step := range []struct {
		tab                 *sessions
		ref, principal, uri string
		refused             string
	}{
		{&project, "s1", "mallory", "file:///1", ""},
		{&project, "s1", "mallory", "file:///2", ""},
		{&project, "s1", "mallory", "file:///3", "--max-subscriptions-per-session"},
		{&view, "s2", "mallory", "file:///1", ""},
		{&view, "s3", "mallory", "file:///1", "this identity's sessions hold 3"},
		{&view, "s4", "alice", "file:///1", ""},
	} {
		err := claim(step.tab, step.ref, step.principal, step.uri)
		if step.refused == "" && err != nil || step.refused != "" && (err == nil || !strings.Contains(err.Error(), step.refused)) {
			t.Fatalf("%s's session %s subscribing to %s: %v, want refused=%q", step.principal, step.ref, step.uri, err, step.refused)
		}
	}
	project.settle("s1", "file:///1", "a", true)
	project.settle("s1", "file:///2", "a", false) // the upstream subscribe failed
	view.unsubscribe("s2", "file:///1")
	if err := claim(&view, "s3", "mallory", "file:///1"); err != nil {
		t.Fatalf("places given back: %v", err)
	}
	project.dropSubscriptions("s1")
	view.dropSubscriptions("s3")
	view.dropSubscriptions("s4")
	if len(shared.subs) != 0 {
		t.Fatalf("subscriptions still counted: %v", shared.subs)
	}
}

// Giving back what was never taken changes nothing and does not panic.
func TestPrincipalsGiveBackUntaken(t *testing.T) {
	var o principals
	o.give("alice", "a")
	o.unlisten("alice", "a")
	o.unsubscribe("alice", 1)
	if _, ok := o.take("alice", "a", 1); !ok || o.count("alice") != 1 {
		t.Fatal("the table is not as new")
	}
}
