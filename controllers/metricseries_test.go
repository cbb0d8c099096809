package controllers_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/testenv/harness"
)

// Renaming a project's servers in a loop leaves on /metrics the series of the current names
// only (without --metrics-project-labels, the default): a removed name's series go with the
// last project that had a server of that name.
func TestRenamedServersLeaveNoSeries(t *testing.T) {
	ns := harness.NewNamespace(t)
	const width, rounds = 3, 8
	names := func(round int) []string {
		var out []string
		for i := range width {
			out = append(out, fmt.Sprintf("renamed-%d-%d", round, i))
		}
		return out
	}
	servers := func(round int) []v1alpha1.MCPServer {
		var out []v1alpha1.MCPServer
		for _, n := range names(round) {
			// Refused at once: every name gets its transitions and connect series.
			out = append(out, v1alpha1.MCPServer{Name: n, HTTP: &v1alpha1.HTTPServer{URL: "http://127.0.0.1:1/mcp"}})
		}
		return out
	}
	key := harness.Create(t, ns, "renames", v1alpha1.ProjectMCPSpec{
		Reconnect: &v1alpha1.ReconnectPolicy{MaxAttempts: ptr.To[int32](0)},
		Servers:   servers(0),
	})
	for round := range rounds {
		if round > 0 {
			harness.Update(t, key, func(o *v1alpha1.ProjectMCP) { o.Spec.Servers = servers(round) })
		}
		harness.WaitStatus(t, key, 30*time.Second, fmt.Sprintf("round %d's servers Failed", round), func(o *v1alpha1.ProjectMCP) bool {
			for _, n := range names(round) {
				if !harness.PhaseIs(n, v1alpha1.PhaseFailed)(o) {
					return false
				}
			}
			return len(o.Status.Servers) == width
		})
	}
	seen := map[string]int{}
	for _, s := range harness.NewScraper(t).Scrape() {
		if v := s.Labels["server"]; strings.HasPrefix(v, "renamed-") {
			seen[v]++
		}
	}
	var got []string
	for n := range seen {
		got = append(got, n)
	}
	slices.Sort(got)
	if want := names(rounds - 1); !slices.Equal(got, want) {
		t.Fatalf("/metrics must carry the current server names only: want %v, got %d names %v", want, len(got), got)
	}
}
