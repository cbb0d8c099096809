//go:build faults

package faults

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/conn"
)

// toollessServer opens a stream of new sessions, stateful and stateless, on a project whose
// servers offer resources and no tool (a stdio one and an HTTP one, each answering tools/list
// with method not found, as a server that does not declare tools may), past conn.DeadAfter,
// beside a server of the same project that fails at every start. The resources-only servers
// are never restarted (one process start, one connection, one phase all along); the failing
// one is rebuilt by the sessions' mounts at most once per reconnect backoff window, not once
// per session.
func (s *suite) toollessServer(t *testing.T) {
	s.fault(t, row{fault: "a resources-only server under a stream of new sessions (never restarted)",
		sees:       "every session lists the server's resources; the server stays `Ready` on one connection and one process however many sessions come; a server of the project that fails at start is rebuilt by the sessions' mounts once per backoff window (`lastRebuild`, `Rebuilt` events), not once per session",
		guaranteed: "a server is asked only for the lists it declared at initialize; one that offers resources or prompts is not dead; a session's mount rebuilds a dead connection at most once per reconnect backoff window (each rebuild one attempt of the spent budget) and never one with requests in flight or subscriptions",
	}, func(t *testing.T, r *row) {
		starts := filepath.Join(t.TempDir(), "starts")
		broken := filepath.Join(t.TempDir(), "broken") // while it exists the failing server exits at start
		if err := os.WriteFile(broken, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		policy := conn.Policy{MaxAttempts: 1, InitialBackoff: time.Second, MaxBackoff: 4 * time.Second}
		web := s.startHTTPFixture(t, "--name", "webdocs", "--offer", "resources")
		key := s.project(t, "toolless", v1alpha1.ProjectMCPSpec{
			Reconnect: &v1alpha1.ReconnectPolicy{MaxAttempts: new(int32(policy.MaxAttempts)),
				InitialBackoff: &metav1.Duration{Duration: policy.InitialBackoff}, MaxBackoff: &metav1.Duration{Duration: policy.MaxBackoff}},
			Servers: []v1alpha1.MCPServer{
				s.stdio("docs", "--offer", "resources", "--start-log", starts),
				{Name: "webdocs", HTTP: &v1alpha1.HTTPServer{URL: web}},
				s.stdio("failing", "--fail-if-exists", broken),
			},
		}, false)
		obj := s.waitStatus(t, key, 60*time.Second, "docs and webdocs Ready, failing Failed", func(o *v1alpha1.ProjectMCP) bool {
			return serverStatus(o, "docs").Phase == v1alpha1.PhaseReady && serverStatus(o, "webdocs").Phase == v1alpha1.PhaseReady &&
				serverStatus(o, "failing").Phase == v1alpha1.PhaseFailed
		})
		docs, webdocs := serverStatus(obj, "docs"), serverStatus(obj, "webdocs")
		time.Sleep(conn.DeadAfter + 500*time.Millisecond) // what counted as dead before is dead by now
		rebuildsBefore := s.rebuildsAtMount(t, "failing")

		const period = 15 * time.Second
		sessions, start := 0, time.Now()
		for time.Since(start) < period {
			version := "2025-11-25"
			if sessions%2 == 1 {
				version = "" // 2026-07-28, stateless
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			cs, err := s.connect(ctx, key, version, nil)
			if err != nil {
				cancel()
				t.Fatalf("session %d: %v", sessions, err)
			}
			res, err := cs.ListResources(ctx, nil)
			_ = cs.Close()
			cancel()
			var uris []string
			if err == nil {
				for _, r := range res.Resources {
					uris = append(uris, r.URI)
				}
			}
			if err != nil || len(uris) != 2 || !strings.Contains(strings.Join(uris, " "), "fixture://docs/readme") {
				t.Fatalf("session %d (%s) lists %v, %v: want the resources of docs and webdocs", sessions, revision(version), uris, err)
			}
			sessions++
			time.Sleep(100 * time.Millisecond)
		}
		took := time.Since(start)

		obj = s.waitStatus(t, key, 10*time.Second, "status after the sessions", func(o *v1alpha1.ProjectMCP) bool { return o.Status.ObservedGeneration == o.Generation })
		for _, was := range []v1alpha1.ServerStatus{docs, webdocs} {
			now := serverStatus(obj, was.Name)
			if now.Phase != v1alpha1.PhaseReady || now.Connection != was.Connection || now.LastRebuild != nil ||
				!now.LastTransitionTime.Equal(was.LastTransitionTime) {
				t.Errorf("%s was restarted: %s on connection %s (was %s) since %v (was %v), lastRebuild %+v",
					was.Name, now.Phase, now.Connection, was.Connection, now.LastTransitionTime, was.LastTransitionTime, now.LastRebuild)
			}
		}
		b, err := os.ReadFile(starts)
		if n := strings.Count(string(b), "\n"); err != nil || n != 1 {
			t.Errorf("docs started %d times (%v), want once", n, err)
		}
		rebuilds := s.rebuildsAtMount(t, "failing") - rebuildsBefore
		allowed := 1 // the first at once, then one per window
		for at := policy.Window(1); at <= took; at += policy.Window(allowed) {
			allowed++
		}
		if rebuilds < 1 || rebuilds > allowed {
			t.Errorf("the failing server was rebuilt %d times by %d sessions in %s, want 1 to %d (one per backoff window)", rebuilds, sessions, took.Round(time.Second), allowed)
		}
		r.figure("%d sessions (stateful and stateless) in %s, each listing both servers' resources; docs started once, both on one connection all along",
			sessions, took.Round(100*time.Millisecond))
		r.figure("the failing server beside them: %d rebuilds at mount (at most %d by its windows), not %d", rebuilds, allowed, sessions)
	})
}

// rebuildsAtMount reads the controller's count of a server's rebuilds at mount (every project's
// server of that name) from /metrics.
func (s *suite) rebuildsAtMount(t *testing.T, server string) int {
	t.Helper()
	n := 0.0
	for name, v := range scrape(t, s.addrs.metrics) {
		if strings.HasPrefix(name, "projectmcp_rebuilds_total{") && strings.Contains(name, `server="`+server+`"`) &&
			strings.Contains(name, `reason="`+v1alpha1.RebuildReasonDeadAtMount+`"`) {
			n += v
		}
	}
	return int(n)
}
