package gateway

import (
	"errors"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
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
	if !tab.enter("a") || tab.enter("unknown") {
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
	if tab.enter("a") {
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
	if ok, err := tab.claim("s", "file:///a", 1); !ok || err != nil {
		t.Fatalf("claim: %v %v", ok, err)
	}
	if ok, err := tab.claim("s", "file:///b", 1); ok || err == nil {
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
