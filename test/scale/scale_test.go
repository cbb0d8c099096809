package scale

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	corev1 "k8s.io/api/core/v1"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/testenv"
)

// The scale benchmark (make bench-scale):
//
//	SCALE=10,100,1000 SCALE_STDIO=100 go test ./test/scale -run '^$' -bench '^BenchmarkScale$' -benchtime 1x -timeout 120m
//
// Each size is a stage of its own: a fresh API server, fixture processes and controller
// process, so that every figure is the controller's at that size alone. A stage creates the
// projects (3 servers each), waits until all are Ready, mounts SCALE_SESSIONS sessions per
// project (default 10, alternately 2025-11-25 and stateless 2026-07-28, each listening for
// list_changed), then runs the load: 200 sessions calling echo once a second while 100
// config edits are made, one every 100 ms (every 200 ms at 10 projects, so that no project is
// edited again within 2 s). SCALE_PROFILE=dir keeps each stage's controller log there and saves
// its CPU profile while the projects are created and during 10 s of the load, its heap profile
// once Ready and once each project's first two sessions are mounted, and its heap and
// goroutine profiles once all the sessions are mounted.

// httpFixtures is how many fixture processes serve every project's HTTP servers: half with
// 2025-11-25 sessions (stateful streamable HTTP: the raw fast path for calls), half stateless
// 2026-07-28 (calls through the SDK, tools/list as the health probe).
const httpFixtures = 4

func envInts(b *testing.B, name, def string) []int {
	v := os.Getenv(name)
	if v == "" {
		v = def
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 {
			b.Fatalf("%s=%q: want comma-separated counts", name, v)
		}
		if n > 0 {
			out = append(out, n)
		}
	}
	return out
}

func BenchmarkScale(b *testing.B) {
	testenv.Require(b)
	sizes := envInts(b, "SCALE", "10,100,1000")
	stdio := envInts(b, "SCALE_STDIO", "100")
	replicated := envInts(b, "SCALE_REPLICAS", "3000")
	per := envInts(b, "SCALE_SESSIONS", "10")
	if len(per) != 1 {
		b.Fatal("SCALE_SESSIONS: want one count")
	}
	profileDir := os.Getenv("SCALE_PROFILE")
	bins := build(b)
	var results []result
	done := map[string]bool{}
	stage := func(kind string, n int) {
		name := fmt.Sprintf("%s/projects=%d", kind, n)
		b.Run(name, func(b *testing.B) {
			if done[name] { // a stage runs once whatever b.N
				return
			}
			done[name] = true
			r := runStage(b, bins, kind, n, per[0], profileDir)
			results = append(results, r)
			r.report(b)
		})
	}
	for _, n := range sizes {
		stage("http", n)
	}
	for _, n := range stdio {
		stage("stdio", n)
	}
	printTable(os.Stdout, results)
	for _, n := range replicated {
		name := fmt.Sprintf("replicas/projects=%d", n)
		b.Run(name, func(b *testing.B) {
			if done[name] {
				return
			}
			done[name] = true
			r := runReplicaStage(b, bins, n, per[0], profileDir)
			r.report(b)
			r.print(os.Stdout)
		})
	}
}

// result is one stage's figures.
type result struct {
	kind                  string
	projects, connections int
	sessions              int
	createdIn, readyIn    time.Duration // from the first create: all created; all Ready
	readyEach             []time.Duration
	base, ready, conns    sample // controller started; all Ready; settled
	endpoints             sample // each project's first sessions mounted (its endpoint made), settled
	mounted               sample // sessions mounted, settled
	later                 int    // the sessions mounted after endpoints
	idleEnd               sample // 10 s later, no traffic
	mounts                []time.Duration
	mountFailed           int // sessions that did not connect, or saw no tools
	load                  load
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "scale: "+format+"\n", args...)
}

func objectMeta(ns string, i int) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("p%04d", i)}
}

func runStage(b *testing.B, bins binaries, kind string, n, per int, profileDir string) result {
	r := result{kind: kind, projects: n, connections: 3 * n, sessions: n * per}
	progress("%s, %d projects: starting the API server", kind, n)
	env, err := testenv.Start()
	if err != nil {
		b.Fatal(err)
	}
	defer env.Stop()
	var upstreams []string
	if kind == "http" {
		var stopFixtures func()
		upstreams, stopFixtures = startHTTPFixtures(b, bins.fixture, httpFixtures)
		defer stopFixtures()
	}
	ctx := context.Background()
	ns := "scale"
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		b.Fatal(err)
	}
	logDir := b.TempDir()
	if profileDir != "" {
		logDir = filepath.Join(profileDir, fmt.Sprintf("%s-%d", kind, n))
		if err := os.MkdirAll(logDir, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	ctrl := startController(b, bins.controller, env.Kubeconfig, logDir)
	defer func() {
		ctrl.stop()
		if b.Failed() {
			if log, err := os.ReadFile(ctrl.logPath); err == nil {
				b.Logf("controller log (last 4 KB): %s", log[max(0, len(log)-4096):])
			}
		}
	}()
	time.Sleep(2 * time.Second)
	r.base = ctrl.sample(b)

	specs := make([]v1alpha1.ProjectMCPSpec, n)
	for i := range specs {
		for k, name := range []string{"a", "b", "c"} {
			srv := v1alpha1.MCPServer{Name: name}
			if kind == "http" {
				srv.HTTP = &v1alpha1.HTTPServer{URL: upstreams[(3*i+k)%len(upstreams)]}
			} else {
				srv.Stdio = &v1alpha1.StdioServer{Command: bins.fixture, Args: []string{"--name", name}}
			}
			specs[i].Servers = append(specs[i].Servers, srv)
		}
		// Connections stay up for the whole stage: mounting 10,000 sessions takes longer than
		// the default idle window, and a mount after a reclaim would time a cold start.
		specs[i].IdleTimeout = &metav1.Duration{Duration: time.Hour}
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	w := watchReady(watchCtx, b, env, ns)

	var createProfile chan error
	if profileDir != "" {
		createProfile = make(chan error, 1)
		go func() {
			createProfile <- ctrl.profile(ctx, "/debug/pprof/profile?seconds=20", filepath.Join(profileDir, fmt.Sprintf("%s-%d-create-cpu.pprof", kind, n)))
		}()
	}
	progress("%s, %d projects: creating them", kind, n)
	created, t0 := createProjects(b, env.Client, ns, specs)
	r.createdIn = time.Since(t0)
	readyAt := w.wait(b, n, 10*time.Minute)
	r.readyIn = readyAt.Sub(t0)
	r.ready = ctrl.sample(b)
	for i, at := range w.times(n, ns) {
		r.readyEach = append(r.readyEach, at.Sub(created[i]))
	}
	progress("%s, %d projects: all Ready %s after the first create", kind, n, r.readyIn.Round(time.Millisecond))
	if createProfile != nil {
		if err := <-createProfile; err != nil {
			b.Logf("profile: %v", err)
		}
	}
	time.Sleep(5 * time.Second)
	r.conns = ctrl.sample(b)
	if profileDir != "" {
		if err := ctrl.profile(ctx, "/debug/pprof/heap", filepath.Join(profileDir, fmt.Sprintf("%s-%d-ready-heap.pprof", kind, n))); err != nil {
			b.Logf("profile: %v", err)
		}
	}

	progress("%s, %d projects: connecting %d sessions", kind, n, n*per)
	e := newEdits(n)
	tr := clientTransport()
	defer tr.CloseIdleConnections()
	endpoint := func(p int) string {
		return fmt.Sprintf("http://%s/projects/%s/%s/mcp", ctrl.gateway, ns, objectMeta(ns, p).Name)
	}
	// A project's first sessions make its endpoint (its catalog, routes and SDK server); the
	// rest only add themselves. One session of each revision on every project first, a sample,
	// then the others: what a session costs is what the others add.
	first := min(2, per)
	agents, mounts, failed := connectAgents(b, endpoint, n, 0, first, e, tr)
	defer func() { closeAgents(agents) }()
	r.mounts, r.mountFailed = mounts, failed
	time.Sleep(5 * time.Second)
	r.endpoints = ctrl.sample(b)
	if profileDir != "" {
		if err := ctrl.profile(ctx, "/debug/pprof/heap", filepath.Join(profileDir, fmt.Sprintf("%s-%d-endpoints-heap.pprof", kind, n))); err != nil {
			b.Logf("profile: %v", err)
		}
	}
	more, moreMounts, moreFailed := connectAgents(b, endpoint, n, first, per, e, tr)
	agents = append(agents, more...)
	r.mounts = append(r.mounts, moreMounts...)
	r.mountFailed += moreFailed
	r.later = n * (per - first)
	time.Sleep(5 * time.Second)
	r.mounted = ctrl.sample(b)
	profile := ""
	if profileDir != "" {
		profile = filepath.Join(profileDir, fmt.Sprintf("%s-%d-", kind, n))
		for _, p := range []string{"heap", "goroutine"} {
			if err := ctrl.profile(ctx, "/debug/pprof/"+p, profile+"mounted-"+p+".pprof"); err != nil {
				b.Logf("profile: %v", err)
			}
		}
	}
	time.Sleep(10 * time.Second)
	r.idleEnd = ctrl.sample(b)

	progress("%s, %d projects: load (200 calling sessions, 100 edits)", kind, n)
	r.load = runLoad(b, ctrl, env.Client, ns, specs, agents, e, profile)
	if r.load.callErrors > 0 {
		b.Logf("%d calls failed; the first: %v", r.load.callErrors, r.load.firstErr)
	}
	progress("%s, %d projects: done", kind, n)
	return r
}

// readyWatch follows the projects' status and notes when each first became Ready.
type readyWatch struct {
	mu    sync.Mutex
	ready map[string]time.Time
}

func isReady(o *v1alpha1.ProjectMCP) bool {
	return o.Status.ObservedGeneration == o.Generation && o.Status.ReadyServers == "3/3" &&
		meta.IsStatusConditionTrue(o.Status.Conditions, v1alpha1.ConditionReady)
}

func watchReady(ctx context.Context, b *testing.B, env *testenv.Env, ns string) *readyWatch {
	c, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		b.Fatal(err)
	}
	w := &readyWatch{ready: map[string]time.Time{}}
	note := func(o *v1alpha1.ProjectMCP) {
		if !isReady(o) {
			return
		}
		w.mu.Lock()
		if _, ok := w.ready[o.Name]; !ok {
			w.ready[o.Name] = time.Now()
		}
		w.mu.Unlock()
	}
	go func() {
		for ctx.Err() == nil {
			list := &v1alpha1.ProjectMCPList{}
			if err := c.List(ctx, list, client.InNamespace(ns)); err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			for i := range list.Items {
				note(&list.Items[i])
			}
			watch, err := c.Watch(ctx, &v1alpha1.ProjectMCPList{}, client.InNamespace(ns), &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.ResourceVersion}})
			if err != nil {
				continue
			}
			for ev := range watch.ResultChan() {
				if o, ok := ev.Object.(*v1alpha1.ProjectMCP); ok {
					note(o)
				}
			}
			watch.Stop()
		}
	}()
	return w
}

// wait returns when n projects have been Ready, the moment the last one was.
func (w *readyWatch) wait(b *testing.B, n int, timeout time.Duration) time.Time {
	deadline := time.Now().Add(timeout)
	next := time.Now().Add(10 * time.Second)
	for {
		w.mu.Lock()
		count := len(w.ready)
		var last time.Time
		for _, t := range w.ready {
			if t.After(last) {
				last = t
			}
		}
		w.mu.Unlock()
		if count >= n {
			return last
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d projects Ready after %s", count, n, timeout)
		}
		if time.Now().After(next) {
			progress("%d of %d Ready", count, n)
			next = time.Now().Add(10 * time.Second)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// times are when each project first became Ready, by index.
func (w *readyWatch) times(n int, ns string) []time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]time.Time, n)
	for i := range out {
		out[i] = w.ready[objectMeta(ns, i).Name]
	}
	return out
}

func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[max(0, (len(s)*p+99)/100-1)]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func mib(n float64) float64 { return n / (1 << 20) }

func rate(n float64, from, to sample) float64 { return n / to.at.Sub(from.at).Seconds() }

// derived figures of a stage.
func (r result) perConnRSS() float64 {
	return float64(r.conns.rss-r.base.rss) / float64(r.connections)
}

// perSessionRSS is what a session adds to a project whose endpoint is made; perSessionAllRSS
// is what the sessions added in all, the projects' endpoints included, per session.
func (r result) perSessionRSS() float64 {
	if r.later == 0 {
		return r.perSessionAllRSS()
	}
	return float64(r.mounted.rss-r.endpoints.rss) / float64(r.later)
}
func (r result) perSessionAllRSS() float64 {
	return float64(r.mounted.rss-r.conns.rss) / float64(r.sessions)
}
func (r result) perConnHeap() float64 {
	return (r.conns.heapLive - r.base.heapLive) / float64(r.connections)
}
func (r result) perSessionHeap() float64 {
	if r.later == 0 {
		return (r.mounted.heapLive - r.conns.heapLive) / float64(r.sessions)
	}
	return (r.mounted.heapLive - r.endpoints.heapLive) / float64(r.later)
}
func (r result) perConnGoroutines() float64 {
	return (r.conns.goroutines - r.base.goroutines) / float64(r.connections)
}
func (r result) perConnThreads() float64 {
	return float64(r.conns.threads-r.base.threads) / float64(r.connections)
}
func (r result) perSessionGoroutines() float64 {
	if r.later == 0 {
		return (r.mounted.goroutines - r.conns.goroutines) / float64(r.sessions)
	}
	return (r.mounted.goroutines - r.endpoints.goroutines) / float64(r.later)
}

// perEndpointRSS is what a project's endpoint costs beyond its first sessions: what they
// added, less what as many sessions add.
func (r result) perEndpointRSS() float64 {
	firsts := float64(r.sessions - r.later)
	return (float64(r.endpoints.rss-r.conns.rss) - firsts*r.perSessionRSS()) / float64(r.projects)
}

func (r result) report(b *testing.B) {
	b.ReportMetric(r.readyIn.Seconds(), "all-ready-s")
	b.ReportMetric(mib(float64(r.load.after.rss)), "rss-MiB")
	b.ReportMetric(mib(r.mounted.heapLive), "heap-live-MiB")
	b.ReportMetric(r.mounted.goroutines, "goroutines")
	b.ReportMetric(r.perConnRSS()/1024, "rss-KiB/conn")
	b.ReportMetric(r.perSessionRSS()/1024, "rss-KiB/session")
	b.ReportMetric(ms(pct(r.load.edits, 50)), "edit-p50-ms")
	b.ReportMetric(ms(pct(r.load.edits, 99)), "edit-p99-ms")
	b.ReportMetric(ms(pct(r.load.calls, 50)), "call-p50-ms")
	b.ReportMetric(ms(pct(r.load.calls, 99)), "call-p99-ms")
	b.ReportMetric(0, "ns/op")
}

// printTable prints every stage's figures side by side, and how the HTTP stages grow from
// the smallest to the largest.
func printTable(out io.Writer, results []result) {
	if len(results) == 0 {
		return
	}
	var httpRuns []result
	for _, r := range results {
		if r.kind == "http" {
			httpRuns = append(httpRuns, r)
		}
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	header := "figure\t"
	for _, r := range results {
		header += fmt.Sprintf("%s %d×3\t", r.kind, r.projects)
	}
	growth := len(httpRuns) > 1
	if growth {
		header += fmt.Sprintf("http %d÷%d\t", httpRuns[len(httpRuns)-1].projects, httpRuns[0].projects)
	}
	fmt.Fprintln(tw, header)
	row := func(name, format string, f func(r result) float64) {
		line := name + "\t"
		for _, r := range results {
			line += fmt.Sprintf(format, f(r)) + "\t"
		}
		if growth {
			first, last := f(httpRuns[0]), f(httpRuns[len(httpRuns)-1])
			if first != 0 {
				line += fmt.Sprintf("%.2f×", last/first)
			}
			line += "\t"
		}
		fmt.Fprintln(tw, line)
	}
	row("projects created (s)", "%.1f", func(r result) float64 { return r.createdIn.Seconds() })
	row("all Ready after the first create (s)", "%.1f", func(r result) float64 { return r.readyIn.Seconds() })
	row("create → Ready, each p50 (s)", "%.2f", func(r result) float64 { return pct(r.readyEach, 50).Seconds() })
	row("create → Ready, each p99 (s)", "%.2f", func(r result) float64 { return pct(r.readyEach, 99).Seconds() })
	row("reconciles/s while creating", "%.0f", func(r result) float64 { return rate(r.ready.reconciles-r.base.reconciles, r.base, r.ready) })
	row("status writes/s while creating", "%.0f", func(r result) float64 { return rate(r.ready.statusPut-r.base.statusPut, r.base, r.ready) })
	row("reconcile, mean while creating (ms)", "%.0f", func(r result) float64 {
		return 1000 * (r.ready.reconcileS - r.base.reconcileS) / (r.ready.reconciles - r.base.reconciles)
	})
	row("controller CPU while creating (% of a core)", "%.0f", func(r result) float64 {
		return 100 * float64(r.ready.cpu-r.base.cpu) / float64(r.ready.at.Sub(r.base.at))
	})
	row("API server + etcd CPU while creating (% of a core)", "%.0f", func(r result) float64 {
		return 100 * float64(r.ready.apiCPU-r.base.apiCPU) / float64(r.ready.at.Sub(r.base.at))
	})
	row("reconciles per project to Ready", "%.1f", func(r result) float64 { return (r.ready.reconciles - r.base.reconciles) / float64(r.projects) })
	row("status writes per project to Ready", "%.1f", func(r result) float64 { return (r.ready.statusPut - r.base.statusPut) / float64(r.projects) })
	row("sessions", "%.0f", func(r result) float64 { return float64(r.sessions) })
	row("mount p50 (ms)", "%.1f", func(r result) float64 { return ms(pct(r.mounts, 50)) })
	row("mount p99 (ms)", "%.1f", func(r result) float64 { return ms(pct(r.mounts, 99)) })
	row("sessions failed to mount", "%.0f", func(r result) float64 { return float64(r.mountFailed) })
	row("status writes per session mounted", "%.2f", func(r result) float64 { return (r.mounted.statusPut - r.conns.statusPut) / float64(r.sessions) })
	row("RSS: started (MiB)", "%.0f", func(r result) float64 { return mib(float64(r.base.rss)) })
	row("RSS: all Ready (MiB)", "%.0f", func(r result) float64 { return mib(float64(r.conns.rss)) })
	row("RSS: sessions mounted (MiB)", "%.0f", func(r result) float64 { return mib(float64(r.mounted.rss)) })
	row("RSS: after the load (MiB)", "%.0f", func(r result) float64 { return mib(float64(r.load.after.rss)) })
	row("RSS: peak (MiB)", "%.0f", func(r result) float64 { return mib(float64(r.load.after.hwm)) })
	row("heap live: sessions mounted (MiB)", "%.1f", func(r result) float64 { return mib(r.mounted.heapLive) })
	row("heap in use: sessions mounted (MiB)", "%.1f", func(r result) float64 { return mib(r.mounted.heapInuse) })
	row("goroutine stacks: sessions mounted (MiB)", "%.1f", func(r result) float64 { return mib(r.mounted.stacks) })
	row("goroutines: sessions mounted", "%.0f", func(r result) float64 { return r.mounted.goroutines })
	row("open fds: sessions mounted", "%.0f", func(r result) float64 { return r.mounted.fds })
	row("OS threads: sessions mounted", "%.0f", func(r result) float64 { return float64(r.mounted.threads) })
	row("RSS per connection (KiB)", "%.0f", func(r result) float64 { return r.perConnRSS() / 1024 })
	row("heap live per connection (KiB)", "%.0f", func(r result) float64 { return r.perConnHeap() / 1024 })
	row("goroutines per connection", "%.1f", result.perConnGoroutines)
	row("OS threads per connection", "%.2f", result.perConnThreads)
	row("RSS per project endpoint (KiB)", "%.0f", func(r result) float64 { return r.perEndpointRSS() / 1024 })
	row("RSS per session (KiB)", "%.0f", func(r result) float64 { return r.perSessionRSS() / 1024 })
	row("heap live per session (KiB)", "%.0f", func(r result) float64 { return r.perSessionHeap() / 1024 })
	row("goroutines per session", "%.1f", result.perSessionGoroutines)
	row("RSS per session, endpoints included (KiB)", "%.0f", func(r result) float64 { return r.perSessionAllRSS() / 1024 })
	row("server processes", "%.0f", func(r result) float64 { return float64(r.mounted.children) })
	row("server processes' RSS (MiB)", "%.0f", func(r result) float64 { return mib(float64(r.mounted.childRSS)) })
	row("idle CPU, no traffic (% of a core)", "%.1f", func(r result) float64 {
		return 100 * float64(r.idleEnd.cpu-r.mounted.cpu) / float64(r.idleEnd.at.Sub(r.mounted.at))
	})
	row("load: CPU (% of a core)", "%.0f", func(r result) float64 {
		return 100 * float64(r.load.after.cpu-r.load.before.cpu) / float64(r.load.after.at.Sub(r.load.before.at))
	})
	row("load: the benchmark's CPU (% of a core)", "%.0f", func(r result) float64 {
		return 100 * float64(r.load.benchCPU) / float64(r.load.after.at.Sub(r.load.before.at))
	})
	row("load: machine load average (1 min)", "%.1f", func(r result) float64 { return r.load.loadavg })
	row("load: reconciles/s", "%.1f", func(r result) float64 {
		return rate(r.load.after.reconciles-r.load.before.reconciles, r.load.before, r.load.after)
	})
	row("load: reconcile, mean (ms)", "%.0f", func(r result) float64 {
		return 1000 * (r.load.after.reconcileS - r.load.before.reconcileS) / (r.load.after.reconciles - r.load.before.reconciles)
	})
	row("load: reconcile queue, deepest", "%.0f", func(r result) float64 { return r.load.maxQueue })
	row("load: API server + etcd CPU (% of a core)", "%.0f", func(r result) float64 {
		return 100 * float64(r.load.after.apiCPU-r.load.before.apiCPU) / float64(r.load.after.at.Sub(r.load.before.at))
	})
	row("load: status write conflicts", "%.0f", func(r result) float64 { return r.load.after.conflicts - r.load.before.conflicts })
	row("load: status writes/s", "%.1f", func(r result) float64 {
		return rate(r.load.after.statusPut-r.load.before.statusPut, r.load.before, r.load.after)
	})
	row("load: calls/s (200 sessions, 1/s each)", "%.0f", func(r result) float64 { return r.load.callsPerSec })
	row("load: call p50 (ms)", "%.2f", func(r result) float64 { return ms(pct(r.load.calls, 50)) })
	row("load: call p99 (ms)", "%.2f", func(r result) float64 { return ms(pct(r.load.calls, 99)) })
	row("load: connections not Ready after it", "%.0f", func(r result) float64 { return r.load.after.connAll - r.load.after.connReady })
	row("load: calls failed", "%.0f", func(r result) float64 { return float64(r.load.callErrors) })
	row("edit → list_changed p50 (ms)", "%.1f", func(r result) float64 { return ms(pct(r.load.edits, 50)) })
	row("edit → list_changed p99 (ms)", "%.1f", func(r result) float64 { return ms(pct(r.load.edits, 99)) })
	row("list_changed received / expected (%)", "%.1f", func(r result) float64 {
		return 100 * float64(len(r.load.edits)) / float64(max(1, r.load.expected))
	})
	tw.Flush()
}
