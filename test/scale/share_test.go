package scale

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/testenv"
)

// The share stage (SCALE_SHARE=sessions): one project whose one stdio server is share:
// session, and that many sessions on it, each with a connection and a server process of its
// own made at its mount. It times the mounts (each starts a process and waits for its tools),
// measures what a session and its connection add to the controller (beside the process's own
// RSS), and times each session's end to its process's exit: first one session at a time,
// then all the rest at once.
func BenchmarkScaleShare(b *testing.B) {
	testenv.Require(b)
	counts := envInts(b, "SCALE_SHARE", "1000")
	bins := build(b)
	for _, n := range counts {
		b.Run(fmt.Sprintf("share=session/sessions=%d", n), func(b *testing.B) {
			r := runShareStage(b, bins, n)
			r.report(b)
			r.print(os.Stdout)
		})
	}
}

// shareResult is the share stage's figures.
type shareResult struct {
	sessions            int
	ready, mounted      sample
	mounts              []time.Duration
	mountFailed         int
	firstErr            error
	exitEach            []time.Duration // one session closed, to its process's exit
	exitRest            time.Duration   // the rest closed together, to the last exit
	restClosed, restGot int             // how many the rest were, and how many exited
}

// shareSample is how many sessions are closed one at a time, each timed to its process's exit.
const shareSample = 100

func runShareStage(b *testing.B, bins binaries, n int) shareResult {
	r := shareResult{sessions: n}
	progress("share, %d sessions: starting the API server", n)
	env, err := testenv.Start()
	if err != nil {
		b.Fatal(err)
	}
	defer env.Stop()
	ctx := context.Background()
	ns := "scale"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		b.Fatal(err)
	}
	bound := strconv.Itoa(2 * n)
	ctrl := startController(b, bins.controller, env.Kubeconfig, b.TempDir(),
		"--max-sessions-per-project", bound, "--max-sessions-per-principal", bound,
		"--max-connections-per-server", bound, "--max-connections-per-principal", bound)
	defer ctrl.stop()
	obj := &v1alpha1.ProjectMCP{ObjectMeta: objectMeta(ns, 0), Spec: v1alpha1.ProjectMCPSpec{
		Servers: []v1alpha1.MCPServer{{Name: "a", Share: v1alpha1.ShareSession,
			Stdio: &v1alpha1.StdioServer{Command: bins.fixture, Args: []string{"--name", "a"}}}},
		IdleTimeout: &metav1.Duration{Duration: time.Hour},
	}}
	if err := env.Client.Create(ctx, obj); err != nil {
		b.Fatal(err)
	}
	time.Sleep(5 * time.Second) // reconciled: the endpoint exists, no process yet
	r.ready = ctrl.sample(b)

	progress("share, %d sessions: mounting them", n)
	tr := clientTransport()
	defer tr.CloseIdleConnections()
	endpoint := fmt.Sprintf("http://%s/projects/%s/%s/mcp", ctrl.gateway, ns, obj.Name)
	list := make([]sessionSpec, n)
	for i := range list {
		list[i] = sessionSpec{Name: fmt.Sprintf("s%d", i), Endpoint: endpoint}
	}
	agents, mounts, failed, firstErr := openSessions(list, newEdits(1), tr, true)
	r.mounts, r.mountFailed, r.firstErr = mounts, failed, firstErr
	time.Sleep(5 * time.Second)
	r.mounted = ctrl.sample(b)

	progress("share, %d sessions: ending them", n)
	r.timeExits(b, ctrl, agents)
	return r
}

// timeExits closes shareSample sessions one at a time, each timed to the exit of one of the
// controller's server processes, then the rest at once, timed to the last exit.
func (r *shareResult) timeExits(b *testing.B, ctrl *controller, agents []*agent) {
	live := childPids(ctrl.pid())
	one := min(shareSample, len(agents))
	for _, a := range agents[:one] {
		start := time.Now()
		_ = a.session.Close()
		if gone := awaitExits(live, 1, 10*time.Second); gone == 1 {
			r.exitEach = append(r.exitEach, time.Since(start))
		}
	}
	rest := agents[one:]
	r.restClosed = len(rest)
	start := time.Now()
	closeAgents(rest)
	r.restGot = awaitExits(live, len(rest), time.Minute)
	r.exitRest = time.Since(start)
	if left := len(live); left > 0 {
		b.Logf("%d server processes still running after their sessions ended", left)
	}
}

// childPids are the process's children, as a set.
func childPids(pid int) map[int]bool {
	set := map[int]bool{}
	entries, _ := os.ReadDir("/proc")
	want := strconv.Itoa(pid)
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err == nil {
			if f := statFields(child); len(f) > 1 && f[1] == want {
				set[child] = true
			}
		}
	}
	return set
}

// awaitExits waits until n of live's processes have exited (the controller reaps them, so an
// exited one is gone) or timeout passes, removes the exited ones from live and says how many
// exited.
func awaitExits(live map[int]bool, n int, timeout time.Duration) int {
	gone := 0
	deadline := time.Now().Add(timeout)
	for gone < n && time.Now().Before(deadline) {
		for pid := range live {
			if syscall.Kill(pid, 0) != nil {
				delete(live, pid)
				gone++
			}
		}
		if gone < n {
			time.Sleep(time.Millisecond)
		}
	}
	return gone
}

// perSessionRSS is what a session and its connection add to the controller, the server
// process apart; perServerRSS is a server process's own.
func (r shareResult) perSessionRSS() float64 {
	return float64(r.mounted.rss-r.ready.rss) / float64(max(1, len(r.mounts)))
}
func (r shareResult) perServerRSS() float64 {
	return float64(r.mounted.childRSS) / float64(max(1, r.mounted.children))
}

func (r shareResult) report(b *testing.B) {
	b.ReportMetric(ms(pct(r.mounts, 50)), "mount-p50-ms")
	b.ReportMetric(ms(pct(r.mounts, 99)), "mount-p99-ms")
	b.ReportMetric(r.perSessionRSS()/1024, "rss-KiB/session-conn")
	b.ReportMetric(ms(pct(r.exitEach, 50)), "end-to-exit-p50-ms")
	b.ReportMetric(0, "ns/op")
}

func (r shareResult) print(out io.Writer) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "share: session, %d sessions\t\n", r.sessions)
	rows := []struct {
		name, value string
	}{
		{"sessions mounted (failed)", fmt.Sprintf("%d (%d)", len(r.mounts), r.mountFailed)},
		{"mount p50 / p99 ms", fmt.Sprintf("%.1f / %.1f", ms(pct(r.mounts, 50)), ms(pct(r.mounts, 99)))},
		{"server processes", strconv.Itoa(r.mounted.children)},
		{"controller RSS KiB per session and its connection", fmt.Sprintf("%.0f", r.perSessionRSS()/1024)},
		{"server process RSS KiB each", fmt.Sprintf("%.0f", r.perServerRSS()/1024)},
		{"controller goroutines per session", fmt.Sprintf("%.1f", (r.mounted.goroutines-r.ready.goroutines)/float64(max(1, len(r.mounts))))},
		{"end to exit p50 / p99 ms (one at a time)", fmt.Sprintf("%.1f / %.1f", ms(pct(r.exitEach, 50)), ms(pct(r.exitEach, 99)))},
		{"end to last exit, the rest together", fmt.Sprintf("%s (%d of %d)", r.exitRest.Round(time.Millisecond), r.restGot, r.restClosed)},
	}
	for _, row := range rows {
		fmt.Fprintf(tw, "%s\t%s\t\n", row.name, row.value)
	}
	if r.firstErr != nil {
		fmt.Fprintf(tw, "first mount failure\t%v\t\n", r.firstErr)
	}
	_ = tw.Flush()
}
