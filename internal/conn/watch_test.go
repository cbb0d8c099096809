package conn

import (
	"testing"
	"time"
)

func TestPick(t *testing.T) {
	for name, tc := range map[string]struct {
		due         chores
		sinceRelist time.Duration
		chore       chores
		wait        time.Duration
	}{
		"nothing":                            {0, time.Hour, 0, 0},
		"a death first":                      {deadChore | probeChore | relistChore, time.Hour, deadChore, 0},
		"a probe before a re-list":           {probeChore | backstopChore, time.Hour, probeChore, 0},
		"the backstop at once":               {backstopChore, 0, backstopChore, 0},
		"a list_changed's re-list":           {relistChore, minRelistInterval, relistChore, 0},
		"a list_changed's re-list too early": {relistChore, minRelistInterval - 100*time.Millisecond, 0, 100 * time.Millisecond},
		"a probe while a re-list waits":      {relistChore | probeChore, 0, probeChore, 0},
	} {
		t.Run(name, func(t *testing.T) {
			chore, wait := pick(tc.due, tc.sinceRelist)
			if chore != tc.chore || wait != tc.wait {
				t.Fatalf("pick = %b, %v; want %b, %v", chore, wait, tc.chore, tc.wait)
			}
		})
	}
}
