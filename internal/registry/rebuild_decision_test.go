package registry

import (
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/conn"
)

// rebuildAtMount: only a dead connection, never one in use, and at most once per reconnect
// backoff window of the rebuilds since the server was last found healthy.
func TestRebuildAtMount(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	policy := conn.Policy{MaxAttempts: 5, InitialBackoff: time.Second, MaxBackoff: 30 * time.Second}
	failed := conn.Snapshot{Phase: v1alpha1.PhaseFailed}
	empty := conn.Snapshot{Phase: v1alpha1.PhaseReady, ReadySince: now.Add(-time.Minute)}
	docs := conn.Snapshot{Phase: v1alpha1.PhaseReady, ReadySince: now.Add(-time.Minute), Resources: []*mcp.Resource{{URI: "docs://a"}}}
	cases := map[string]struct {
		s        conn.Snapshot
		inUse    bool
		last     time.Duration // before now; 0: never rebuilt
		rebuilds int
		want     bool
		zero     bool // a policy of zero values: the defaults
	}{
		"failed, never rebuilt":                  {failed, false, 0, 0, true, false},
		"offering nothing, never rebuilt":        {empty, false, 0, 0, true, false},
		"offering nothing, not yet dead":         {conn.Snapshot{Phase: v1alpha1.PhaseReady, ReadySince: now.Add(-time.Second)}, false, 0, 0, false, false},
		"resources only":                         {docs, false, 0, 0, false, false},
		"ready with tools":                       {conn.Snapshot{Phase: v1alpha1.PhaseReady, RawToolCount: 2}, false, 0, 0, false, false},
		"connecting":                             {conn.Snapshot{Phase: v1alpha1.PhaseConnecting}, false, 0, 0, false, false},
		"disconnected":                           {conn.Snapshot{Phase: v1alpha1.PhaseDisconnected, EverReady: true}, false, 0, 0, false, false},
		"dead but in use":                        {empty, true, 0, 0, false, false},
		"failed and in use":                      {failed, true, 0, 0, false, false},
		"healthy since the last rebuild":         {failed, false, time.Millisecond, 0, true, false},
		"first window (1 s) not over":            {failed, false, 999 * time.Millisecond, 1, false, false},
		"first window over":                      {failed, false, time.Second, 1, true, false},
		"second window (2 s) not over":           {failed, false, 1999 * time.Millisecond, 2, false, false},
		"second window over":                     {empty, false, 2 * time.Second, 2, true, false},
		"fifth window (16 s) not over":           {failed, false, 15 * time.Second, 5, false, false},
		"capped window (30 s) not over":          {failed, false, 29 * time.Second, 12, false, false},
		"capped window over":                     {failed, false, 30 * time.Second, 12, true, false},
		"window over but the server is in use":   {empty, true, time.Hour, 3, false, false},
		"window over but the server is healthy":  {docs, false, time.Hour, 3, false, false},
		"defaults (500 ms) for a policy of zero": {failed, false, 500 * time.Millisecond, 1, true, true},
		"default window not over":                {failed, false, 499 * time.Millisecond, 1, false, true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var last time.Time
			if tc.last > 0 {
				last = now.Add(-tc.last)
			}
			p := policy
			if tc.zero {
				p = conn.Policy{}
			}
			if got := rebuildAtMount(now, tc.s, tc.inUse, last, tc.rebuilds, p); got != tc.want {
				t.Errorf("rebuildAtMount = %v, want %v", got, tc.want)
			}
		})
	}
}
