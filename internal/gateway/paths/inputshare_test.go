package paths

import (
	"fmt"
	"strings"
	"testing"
)

// An identity's sessions share one quota of the places for calls waiting for input: sessions
// cost nothing to open, so with a quota per session alone, ten sessions of one identity took
// all of a project's places and another identity's call got none.
func TestInputPlacesPerPrincipal(t *testing.T) {
	in := &inputs{max: 100, each: 10, whose: 25, parked: map[string]*pendingCall{}}
	park := func(principal, session string) error {
		pc := &pendingCall{principal: principal, session: session}
		if err := in.refusal(pc); err != nil {
			return err
		}
		in.parked[fmt.Sprintf("state-%d", len(in.parked))] = pc
		return nil
	}
	// One identity opens 10 sessions and has each ask for input 10 times.
	parked := 0
	for s := range 10 {
		for range 10 {
			if park("mallory", fmt.Sprintf("s%d", s)) == nil {
				parked++
			}
		}
	}
	if parked != 25 {
		t.Fatalf("one identity's 10 sessions hold %d places, want its share of 25", parked)
	}
	for _, tc := range []struct {
		name, principal, session, refused string
	}{
		{"the identity once more, from a new session", "mallory", "s-new", "calls of this identity's sessions"},
		{"another identity", "alice", "a1", ""},
	} {
		err := park(tc.principal, tc.session)
		switch {
		case tc.refused == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused)):
			t.Errorf("%s: %v, want a refusal naming %q", tc.name, err, tc.refused)
		}
	}
	// A session's own share still holds within its principal's.
	for range 10 {
		_ = park("alice", "a2")
	}
	if err := park("alice", "a2"); err == nil || !strings.Contains(err.Error(), "calls of this session") {
		t.Errorf("a session past its own share: %v", err)
	}
}
