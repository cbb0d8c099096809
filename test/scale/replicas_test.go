package scale

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/buckets"
	"github.com/dsh-dev/projectmcp/internal/testenv"
)

// The replicas stage (SCALE_REPLICAS=projects): three `projectmcp controller` processes against
// one API server, sharing the projects by bucket Leases (--leader-elect, 64 buckets), with
// SCALE_SESSIONS sessions per project (default 10). It times every project Ready from the
// first create, measures each replica's memory, goroutines and descriptors, and, under the same
// load as the other stages, the calls through the replica serving the project beside calls
// through another replica (proxied), and edit → list_changed.
//
// The sessions are held by agent worker processes (this test binary, run with workerEnv):
// every session holds a stream, and this machine allows a process 20,000 descriptors. Each
// session goes through the replica serving its project, but one in proxiedOneIn goes through
// the next replica, which proxies it. Behind a Service two sessions in three would be proxied,
// and each proxied stream costs a descriptor on each of the two replicas: at 10,000 sessions a
// replica that passes this machine's per-process limit, so the stage proxies fewer and says so.
const (
	replicaCount    = 3
	replicaFixtures = 6 // HTTP fixture processes serving every project's servers
	proxiedOneIn    = 10
	workerSessions  = 8000 // sessions one worker process holds at most
	leaseNamespace  = "projectmcp-buckets"
)

// workerEnv runs this test binary as an agent worker (TestMain): it reads workerOps on stdin
// and answers with workerReplies on stdout.
const workerEnv = "PROJECTMCP_SCALE_AGENT_WORKER"

func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) != "" {
		os.Exit(runWorker(os.Stdin, os.Stdout))
	}
	os.Exit(m.Run())
}

// workerOp is one instruction to an agent worker, a JSON line.
type workerOp struct {
	Op       string        `json:"op"` // connect, edit, report or close
	Projects int           `json:"projects,omitempty"`
	Sessions []sessionSpec `json:"sessions,omitempty"`
	Project  int           `json:"project,omitempty"`
	At       int64         `json:"at,omitempty"` // an edit's start, unix ns
}

// workerReply answers connect (the sessions opened: their mounts and projects) and report
// (the list_changed latencies of the edits so far).
type workerReply struct {
	Mounts   []time.Duration `json:"mounts,omitempty"`
	Opened   []int           `json:"opened,omitempty"`
	Failed   int             `json:"failed,omitempty"`
	FirstErr string          `json:"firstErr,omitempty"`
	Edits    []time.Duration `json:"edits,omitempty"`
}

// runWorker is an agent worker's life: sessions opened on connect, edits noted, latencies
// reported, sessions closed on close or when the benchmark goes.
func runWorker(in io.Reader, out io.Writer) int {
	dec, enc := json.NewDecoder(in), json.NewEncoder(out)
	e := newEdits(0)
	var agents []*agent
	tr := clientTransport()
	defer func() { closeAgents(agents) }()
	for {
		var op workerOp
		if err := dec.Decode(&op); err != nil {
			return 0 // the benchmark has gone
		}
		var err error
		switch op.Op {
		case "connect":
			e = newEdits(op.Projects)
			var r workerReply
			var first error
			agents, r.Mounts, r.Failed, first = openSessions(op.Sessions, e, tr, false)
			for _, a := range agents {
				r.Opened = append(r.Opened, a.project)
			}
			if first != nil {
				r.FirstErr = first.Error()
			}
			err = enc.Encode(r)
		case "edit":
			e.beginAt(op.Project, time.Unix(0, op.At))
		case "report":
			err = enc.Encode(workerReply{Edits: e.latencies()})
		case "close":
			return 0
		}
		if err != nil {
			return 1
		}
	}
}

// worker is an agent worker process, as the benchmark drives it.
type worker struct {
	*process
	mu  sync.Mutex // enc
	enc *json.Encoder
	dec *json.Decoder
}

func startWorker(b *testing.B) *worker {
	b.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), workerEnv+"=1")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	return &worker{process: start(b, cmd), enc: json.NewEncoder(in), dec: json.NewDecoder(out)}
}

func (w *worker) send(op workerOp) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.enc.Encode(op)
}

// ask sends op and reads the worker's reply.
func (w *worker) ask(op workerOp) (workerReply, error) {
	var r workerReply
	if err := w.send(op); err != nil {
		return r, err
	}
	err := w.dec.Decode(&r)
	return r, err
}

// close has the worker close its sessions and exit.
func (w *worker) close() {
	_ = w.send(workerOp{Op: "close"})
	select {
	case <-w.exited:
	case <-time.After(2 * time.Minute):
		w.stop()
	}
}

// replicaResult is the replicas stage's figures.
type replicaResult struct {
	projects, sessions, proxied int
	createdIn, readyIn          time.Duration
	readyEach                   []time.Duration
	served                      []int // projects per replica
	mounts                      []time.Duration
	mountFailed                 int
	ready, mounted, after       []sample // per replica
	load                        replicaLoad
}

// replicaLoad is what the replicas stage's load measured.
type replicaLoad struct {
	direct, proxied []time.Duration // echo calls through the serving replica, and through another
	callErrors      int64
	firstErr        error
	edits           []time.Duration
	expected        int
	before          []sample
}

func runReplicaStage(b *testing.B, bins binaries, n, per int, profileDir string) replicaResult {
	r := replicaResult{projects: n, sessions: n * per}
	progress("replicas, %d projects: starting the API server", n)
	env, err := testenv.Start()
	if err != nil {
		b.Fatal(err)
	}
	defer env.Stop()
	upstreams, stopFixtures := startHTTPFixtures(b, bins.fixture, replicaFixtures)
	defer stopFixtures()
	ctx := context.Background()
	ns := "scale"
	for _, name := range []string{ns, leaseNamespace} {
		if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
			b.Fatal(err)
		}
	}
	logDir := b.TempDir()
	if profileDir != "" {
		logDir = filepath.Join(profileDir, fmt.Sprintf("replicas-%d", n))
	}
	ctrls := make([]*controller, replicaCount)
	for i := range ctrls {
		dir := filepath.Join(logDir, fmt.Sprintf("r%d", i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		ctrls[i] = startController(b, bins.controller, env.Kubeconfig, dir,
			"--leader-elect", "--leader-election-namespace", leaseNamespace, "--buckets", "64")
		defer ctrls[i].stop()
	}
	time.Sleep(5 * time.Second) // the replicas share the buckets (a few retry periods)
	samples := func() []sample {
		out := make([]sample, len(ctrls))
		for i, c := range ctrls {
			out[i] = c.sample(b)
		}
		return out
	}

	specs := make([]v1alpha1.ProjectMCPSpec, n)
	for i := range specs {
		for k, name := range []string{"a", "b", "c"} {
			specs[i].Servers = append(specs[i].Servers, v1alpha1.MCPServer{Name: name, HTTP: &v1alpha1.HTTPServer{URL: upstreams[(3*i+k)%len(upstreams)]}})
		}
		specs[i].IdleTimeout = &metav1.Duration{Duration: time.Hour}
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	w := watchReady(watchCtx, b, env, ns)
	progress("replicas, %d projects: creating them", n)
	created, t0 := createProjects(b, env.Client, ns, specs)
	r.createdIn = time.Since(t0)
	readyAt := w.wait(b, n, 20*time.Minute)
	r.readyIn = readyAt.Sub(t0)
	for i, at := range w.times(n, ns) {
		r.readyEach = append(r.readyEach, at.Sub(created[i]))
	}
	progress("replicas, %d projects: all Ready %s after the first create", n, r.readyIn.Round(time.Millisecond))
	time.Sleep(5 * time.Second)
	r.ready = samples()

	owner := owners(b, env.Client, ns, n, ctrls)
	r.served = make([]int, len(ctrls))
	for _, o := range owner {
		r.served[o]++
	}
	via := func(p, replica int) string {
		return fmt.Sprintf("http://%s/projects/%s/%s/mcp", ctrls[replica].gateway, ns, objectMeta(ns, p).Name)
	}
	list := make([]sessionSpec, 0, n*per)
	for p := range n {
		for s := range per {
			front := owner[p]
			if (p*per+s)%proxiedOneIn == 0 {
				front = (front + 1) % len(ctrls)
				r.proxied++
			}
			list = append(list, sessionSpec{Project: p, Stateless: s%2 == 1, Name: fmt.Sprintf("scale-%d-%d", p, s), Endpoint: via(p, front)})
		}
	}
	progress("replicas, %d projects: connecting %d sessions (%d through another replica)", n, len(list), r.proxied)
	workers, perProject := r.connect(b, list, n)
	defer func() {
		for _, wk := range workers {
			wk.close()
		}
	}()
	time.Sleep(5 * time.Second)
	r.mounted = samples()

	progress("replicas, %d projects: load (100 sessions calling through the serving replica, 100 through another; 100 edits)", n)
	r.load = runReplicaLoad(b, env.Client, ns, specs, owner, via, workers, perProject, samples)
	r.after = samples()
	if r.load.callErrors > 0 {
		b.Logf("%d calls failed; the first: %v", r.load.callErrors, r.load.firstErr)
	}
	progress("replicas, %d projects: done", n)
	return r
}

// createProjects creates the projects, 16 at a time; it returns when each was created, and
// when the first was.
func createProjects(b *testing.B, c client.Client, ns string, specs []v1alpha1.ProjectMCPSpec) ([]time.Time, time.Time) {
	created := make([]time.Time, len(specs))
	t0 := time.Now()
	var wg sync.WaitGroup
	work := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range work {
				obj := &v1alpha1.ProjectMCP{ObjectMeta: objectMeta(ns, i), Spec: specs[i]}
				if err := c.Create(context.Background(), obj); err != nil {
					b.Errorf("create %s: %v", obj.Name, err)
				}
				created[i] = time.Now()
			}
		})
	}
	for i := range specs {
		work <- i
	}
	close(work)
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	return created, t0
}

// owners is the index of the replica serving each project: the one whose gateway address its
// bucket's Lease names.
func owners(b *testing.B, c client.Client, ns string, n int, ctrls []*controller) []int {
	var leases coordinationv1.LeaseList
	if err := c.List(context.Background(), &leases, client.InNamespace(leaseNamespace)); err != nil {
		b.Fatal(err)
	}
	byBucket := map[string]int{}
	for _, l := range leases.Items {
		for i, ctrl := range ctrls {
			if l.Annotations[buckets.AnnotationAddress] == ctrl.gateway {
				byBucket[l.Name] = i
			}
		}
	}
	out := make([]int, n)
	for p := range n {
		var obj v1alpha1.ProjectMCP
		if err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: objectMeta(ns, p).Name}, &obj); err != nil {
			b.Fatal(err)
		}
		if obj.Status.Owner == nil {
			b.Fatalf("project %d has no owner in status", p)
		}
		i, ok := byBucket[buckets.LeaseName(int(obj.Status.Owner.Bucket))]
		if !ok {
			b.Fatalf("project %d: no replica holds bucket %d", p, obj.Status.Owner.Bucket)
		}
		out[p] = i
	}
	return out
}

// connect opens list's sessions in worker processes, workerSessions each at most, all at once;
// it returns the workers and how many sessions each project has open.
func (r *replicaResult) connect(b *testing.B, list []sessionSpec, projects int) ([]*worker, []int) {
	nw := (len(list) + workerSessions - 1) / workerSessions
	workers := make([]*worker, nw)
	replies := make([]workerReply, nw)
	errs := make([]error, nw)
	var wg sync.WaitGroup
	for i := range workers {
		workers[i] = startWorker(b)
		part := list[i*len(list)/nw : (i+1)*len(list)/nw]
		wg.Go(func() {
			replies[i], errs[i] = workers[i].ask(workerOp{Op: "connect", Projects: projects, Sessions: part})
		})
	}
	wg.Wait()
	perProject := make([]int, projects)
	for i, rep := range replies {
		if errs[i] != nil {
			b.Fatalf("agent worker %d: %v", i, errs[i])
		}
		r.mounts = append(r.mounts, rep.Mounts...)
		r.mountFailed += rep.Failed
		for _, p := range rep.Opened {
			perProject[p]++
		}
		if rep.FirstErr != "" {
			b.Logf("agent worker %d: %d sessions failed to connect; the first: %s", i, rep.Failed, rep.FirstErr)
		}
	}
	if r.mountFailed*100 > len(list) {
		b.Fatalf("%d of %d sessions failed to connect", r.mountFailed, len(list))
	}
	return workers, perProject
}

// runReplicaLoad has pairs of sessions of one project each, one through the replica serving it
// and one through the next, call echo once a second each, while it makes 100 config edits
// (as runLoad does) and times their list_changed at every worker's sessions.
func runReplicaLoad(b *testing.B, cl client.Client, ns string, specs []v1alpha1.ProjectMCPSpec, owner []int,
	via func(p, replica int) string, workers []*worker, perProject []int, samples func() []sample) replicaLoad {
	const (
		pairs     = 100
		editN     = 100
		editGap   = 100 * time.Millisecond
		warmup    = 3 * time.Second
		maxSettle = 10 * time.Second
	)
	n := len(specs)
	var list []sessionSpec
	for k := range pairs {
		p := k * n / pairs
		for j, front := range []int{owner[p], (owner[p] + 1) % replicaCount} {
			list = append(list, sessionSpec{Project: p, Stateless: k%2 == 1, Name: fmt.Sprintf("caller-%d-%d", k, j), Endpoint: via(p, front)})
		}
	}
	tr := clientTransport()
	defer tr.CloseIdleConnections()
	callers, _, failed, err := openSessions(list, newEdits(n), tr, false)
	if failed > 0 {
		b.Fatalf("%d of the calling sessions failed to connect; the first: %v", failed, err)
	}
	defer closeAgents(callers)
	var out replicaLoad
	var measuring atomic.Bool
	var mu sync.Mutex
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, a := range callers {
		proxied := i%2 == 1
		tool := string(rune('a'+(i/2)%3)) + "__echo"
		wg.Go(func() {
			paced(stop, time.Second, func() {
				d, err := timedEcho(a.session, tool)
				if !measuring.Load() {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					out.callErrors++
					if out.firstErr == nil {
						out.firstErr = err
					}
				case proxied:
					out.proxied = append(out.proxied, d)
				default:
					out.direct = append(out.direct, d)
				}
			})
		})
	}
	time.Sleep(warmup)
	measuring.Store(true)
	out.before = samples()
	toggled := make([]bool, n)
	gap := max(editGap, 2*time.Second/time.Duration(n))
	for i := range editN {
		p := i % n
		if n >= editN {
			p = i * n / editN
		}
		toggled[p] = !toggled[p]
		patch := editPatch(b, specs[p], toggled[p])
		at := time.Now()
		for _, wk := range workers {
			if err := wk.send(workerOp{Op: "edit", Project: p, At: at.UnixNano()}); err != nil {
				b.Fatal(err)
			}
		}
		if err := cl.Patch(context.Background(), &v1alpha1.ProjectMCP{ObjectMeta: objectMeta(ns, p)}, client.RawPatch(types.MergePatchType, patch)); err != nil {
			b.Fatalf("edit project %d: %v", p, err)
		}
		out.expected += perProject[p]
		time.Sleep(gap)
	}
	deadline := time.Now().Add(maxSettle)
	for {
		out.edits = nil
		for _, wk := range workers {
			rep, err := wk.ask(workerOp{Op: "report"})
			if err != nil {
				b.Fatal(err)
			}
			out.edits = append(out.edits, rep.Edits...)
		}
		if len(out.edits) >= out.expected || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	return out
}

func (r replicaResult) report(b *testing.B) {
	b.ReportMetric(r.readyIn.Seconds(), "all-ready-s")
	for i, s := range r.after {
		b.ReportMetric(mib(float64(s.rss)), fmt.Sprintf("r%d-rss-MiB", i))
	}
	b.ReportMetric(ms(pct(r.load.direct, 50)), "call-owner-p50-ms")
	b.ReportMetric(ms(pct(r.load.proxied, 50)), "call-proxied-p50-ms")
	b.ReportMetric(ms(pct(r.load.edits, 50)), "edit-p50-ms")
	b.ReportMetric(ms(pct(r.load.edits, 99)), "edit-p99-ms")
	b.ReportMetric(0, "ns/op")
}

// print prints the replicas stage's figures, each replica's side by side.
func (r replicaResult) print(out io.Writer) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	each := func(f func(s sample) float64, format string, of []sample) string {
		var parts []string
		for _, s := range of {
			parts = append(parts, fmt.Sprintf(format, f(s)))
		}
		return strings.Join(parts, " / ")
	}
	rows := [][2]string{
		{"replicas; projects × servers; sessions (through another replica)", fmt.Sprintf("%d; %d × 3; %d (%d)", replicaCount, r.projects, r.sessions, r.proxied)},
		{"projects created (s)", fmt.Sprintf("%.1f", r.createdIn.Seconds())},
		{"all Ready after the first create (s)", fmt.Sprintf("%.1f", r.readyIn.Seconds())},
		{"create → Ready, each p50 / p99 (s)", fmt.Sprintf("%.2f / %.2f", pct(r.readyEach, 50).Seconds(), pct(r.readyEach, 99).Seconds())},
		{"projects served, per replica", strings.Trim(strings.Join(strings.Fields(fmt.Sprint(r.served)), " / "), "[]")},
		{"mount p50 / p99 (ms); failed", fmt.Sprintf("%.1f / %.1f; %d", ms(pct(r.mounts, 50)), ms(pct(r.mounts, 99)), r.mountFailed)},
		{"RSS all Ready, per replica (MiB)", each(func(s sample) float64 { return mib(float64(s.rss)) }, "%.0f", r.ready)},
		{"RSS sessions mounted, per replica (MiB)", each(func(s sample) float64 { return mib(float64(s.rss)) }, "%.0f", r.mounted)},
		{"RSS peak, per replica (MiB)", each(func(s sample) float64 { return mib(float64(s.hwm)) }, "%.0f", r.after)},
		{"heap live, sessions mounted, per replica (MiB)", each(func(s sample) float64 { return mib(s.heapLive) }, "%.0f", r.mounted)},
		{"goroutines, sessions mounted, per replica", each(func(s sample) float64 { return s.goroutines }, "%.0f", r.mounted)},
		{"open descriptors, sessions mounted, per replica", each(func(s sample) float64 { return s.fds }, "%.0f", r.mounted)},
		{"load: CPU, per replica (% of a core)", r.loadCPU()},
		{"load: call p50 / p99 through the serving replica (ms)", fmt.Sprintf("%.2f / %.2f", ms(pct(r.load.direct, 50)), ms(pct(r.load.direct, 99)))},
		{"load: call p50 / p99 through another replica (ms)", fmt.Sprintf("%.2f / %.2f", ms(pct(r.load.proxied, 50)), ms(pct(r.load.proxied, 99)))},
		{"load: proxying's cost, p50 (ms)", fmt.Sprintf("%.2f", ms(pct(r.load.proxied, 50)-pct(r.load.direct, 50)))},
		{"load: calls failed", fmt.Sprint(r.load.callErrors)},
		{"edit → list_changed p50 / p99 (ms)", fmt.Sprintf("%.1f / %.1f", ms(pct(r.load.edits, 50)), ms(pct(r.load.edits, 99)))},
		{"list_changed received / expected", fmt.Sprintf("%d / %d", len(r.load.edits), r.load.expected)},
	}
	fmt.Fprintln(tw, "figure\treplicas\t")
	for _, row := range rows {
		fmt.Fprintf(tw, "%s\t%s\t\n", row[0], row[1])
	}
	tw.Flush()
}

func (r replicaResult) loadCPU() string {
	var parts []string
	for i := range r.after {
		if i >= len(r.load.before) {
			break
		}
		from, to := r.load.before[i], r.after[i]
		parts = append(parts, fmt.Sprintf("%.0f", 100*float64(to.cpu-from.cpu)/float64(to.at.Sub(from.at))))
	}
	return strings.Join(slices.Clip(parts), " / ")
}
