package conn

import (
	"slices"
	"testing"
	"time"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
)

// Backstop re-lists of a server whose lists did not change are forwarded and not decoded
// through the SDK again; a change is still listed and published, and probes still find the
// server alive. A session that takes no forwarded requests (legacy SSE) lists on the typed
// path every time; a 2026-07-28 HTTP session's re-lists are its only probes.
func TestUnchangedRelistSkipsTheDecode(t *testing.T) {
	cases := map[string]struct {
		server   func(t *testing.T) v1alpha1.MCPServer
		forwards bool
		byRelist bool // probed by its re-lists, not probes of its own
	}{
		"stdio 2025-11-25":     {serverKinds["stdio 2025-11-25"], true, false},
		"stdio 2026-07-28":     {serverKinds["stdio 2026-07-28"], true, false},
		"streamable stateful":  {serverKinds["streamable stateful"], true, false},
		"streamable stateless": {serverKinds["streamable stateless"], true, true},
		"legacy SSE":           {serverKinds["legacy SSE"], false, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := start(t, Options{Server: tc.server(t), Settings: Settings{RelistInterval: 50 * time.Millisecond, HealthInterval: 50 * time.Millisecond}})
			ready := waitPhase(t, c, v1alpha1.PhaseReady)
			// Listed with forwarded requests from the first listing on (a 2026-07-28 HTTP session takes its _meta
			// from server/discover): every item is kept as the server sent it.
			if echo := ready.RawItem(KindTool, "echo"); (echo != nil) != tc.forwards {
				t.Fatalf("the first listing kept the tools as sent: %v, want %v", echo != nil, tc.forwards)
			}
			relists, lists, probes := c.counts.relists.Load(), c.counts.lists.Load(), c.counts.probes.Load()
			time.Sleep(600 * time.Millisecond)
			relists, lists, probes = c.counts.relists.Load()-relists, c.counts.lists.Load()-lists, c.counts.probes.Load()-probes
			if !tc.byRelist && probes < 5 {
				t.Fatalf("only %d probes in 600 ms", probes)
			}
			if tc.byRelist && probes != 0 { // its re-lists are its probes
				t.Fatalf("%d probes of a stateless server", probes)
			}
			if relists < 5 {
				t.Fatalf("only %d re-lists in 600 ms", relists)
			}
			if tc.forwards && lists > 0 { // the digest is the connect's listing's
				t.Fatalf("%d re-lists decoded the lists %d times: want none", relists, lists)
			}
			if !tc.forwards && lists < relists {
				t.Fatalf("without forwarded requests every re-list decodes: %d re-lists, %d decodes", relists, lists)
			}
			if p := c.Snapshot().Phase; p != v1alpha1.PhaseReady {
				t.Fatalf("the probes must find the server alive: %s", p)
			}
			call(t, c, "add_tool", map[string]any{"name": "late"})
			waitFor(t, c, "the new tool", func(s Snapshot) bool { return slices.Contains(names(s.Tools), "late") })
		})
	}
}
