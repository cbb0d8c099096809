package scale

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/gateway"
)

// agent is one agent session of a project: a 2025-11-25 session (Mcp-Session-Id, list_changed
// on its GET stream) or a stateless 2026-07-28 one (named by gateway.SessionHeader,
// list_changed on its subscriptions/listen stream).
type agent struct {
	project   int
	stateless bool
	session   *mcp.ClientSession
	edits     *edits
	seen      atomic.Uint64 // the last edit of its project whose list_changed it recorded
}

// edits times config edits to the list_changed they cause at each session of the project.
type edits struct {
	seq   []atomic.Uint64 // per project: edits made
	start []atomic.Int64  // per project: when the last one was sent (unix ns)

	mu  sync.Mutex
	lat []time.Duration
}

func newEdits(projects int) *edits {
	return &edits{seq: make([]atomic.Uint64, projects), start: make([]atomic.Int64, projects)}
}

// begin notes an edit of project p about to be sent.
func (e *edits) begin(p int) { e.beginAt(p, time.Now()) }

// beginAt notes an edit of project p sent at t (by another process: the clock is the machine's).
func (e *edits) beginAt(p int, t time.Time) {
	e.start[p].Store(t.UnixNano())
	e.seq[p].Add(1)
}

func (e *edits) received() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.lat)
}

func (e *edits) latencies() []time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]time.Duration(nil), e.lat...)
}

// changed is the session's ToolListChangedHandler: the first list_changed after an edit of
// its project counts, from the moment the edit was sent.
func (a *agent) changed() {
	now := time.Now()
	seq := a.edits.seq[a.project].Load()
	if seq == 0 {
		return
	}
	old := a.seen.Load()
	if old >= seq || !a.seen.CompareAndSwap(old, seq) {
		return
	}
	d := now.Sub(time.Unix(0, a.edits.start[a.project].Load()))
	a.edits.mu.Lock()
	a.edits.lat = append(a.edits.lat, d)
	a.edits.mu.Unlock()
}

// clientTransport is shared by every session of the benchmark, with a pool large enough for
// the concurrent callers (the default keeps 2 idle connections per host and closes the rest).
func clientTransport() *http.Transport {
	return &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 512,
		IdleConnTimeout:     90 * time.Second,
	}
}

type headerRT struct {
	base http.RoundTripper
	name string
}

func (r headerRT) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set(gateway.SessionHeader, r.name)
	return r.base.RoundTrip(req)
}

// connectAgents opens sessions from to to (exclusive) of each project, alternating the
// revisions (session k of a project is stateless when k is odd), with a bounded number of
// connects in flight; it returns them with each one's mount time (connect and the first
// tools/list, which waits for the mount).
//
// A session that fails is left out and counted; more than 1% failing fails the benchmark.
func connectAgents(b *testing.B, endpoint func(int) string, projects, from, to int, e *edits, tr http.RoundTripper) ([]*agent, []time.Duration, int) {
	b.Helper()
	per := to - from
	list := make([]sessionSpec, projects*per)
	for i := range list {
		p, k := i/per, from+i%per
		list[i] = sessionSpec{Project: p, Stateless: k%2 == 1, Name: fmt.Sprintf("scale-%d-%d", p, k), Endpoint: endpoint(p)}
	}
	agents, mounts, n, err := openSessions(list, e, tr, true)
	if n > 0 {
		b.Logf("%d of %d sessions failed to connect; the first: %v", n, len(list), err)
	}
	if n*100 > len(list) {
		closeAgents(agents)
		b.FailNow()
	}
	return agents, mounts, n
}

// sessionSpec is one session to open: its project, its revision, its name (a stateless
// session's gateway.SessionHeader) and the endpoint it goes through.
type sessionSpec struct {
	Project   int    `json:"project"`
	Stateless bool   `json:"stateless"`
	Name      string `json:"name"`
	Endpoint  string `json:"endpoint"`
}

// openSessions opens the sessions of list, 8 at a time; it returns those that connected and
// saw tools, with their mount times, and how many failed (and the first failure).
func openSessions(list []sessionSpec, e *edits, tr http.RoundTripper, tell bool) ([]*agent, []time.Duration, int, error) {
	const parallel = 8
	agents := make([]*agent, len(list))
	mounts := make([]time.Duration, len(list))
	var failed atomic.Int64
	var firstErr atomic.Value
	work := make(chan int)
	var wg sync.WaitGroup
	for range parallel {
		wg.Go(func() {
			for i := range work {
				spec := list[i]
				a, took, err := openSession(spec, e, tr)
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, fmt.Errorf("session %s of project %d: %w", spec.Name, spec.Project, err))
					continue
				}
				mounts[i] = took
				agents[i] = a
			}
		})
	}
	next := time.Now().Add(30 * time.Second)
	for i := range list {
		work <- i
		if tell && time.Now().After(next) {
			progress("%d of %d sessions", i, len(list))
			next = time.Now().Add(30 * time.Second)
		}
	}
	close(work)
	wg.Wait()
	var ok []*agent
	var times []time.Duration
	for i, a := range agents {
		if a != nil {
			ok = append(ok, a)
			times = append(times, mounts[i])
		}
	}
	err, _ := firstErr.Load().(error)
	return ok, times, int(failed.Load()), err
}

// openSession connects one session and lists its tools (which waits for the mount).
func openSession(spec sessionSpec, e *edits, tr http.RoundTripper) (*agent, time.Duration, error) {
	a := &agent{project: spec.Project, stateless: spec.Stateless, edits: e}
	hc := &http.Client{Transport: tr}
	version := "2025-11-25"
	if a.stateless {
		hc.Transport = headerRT{tr, spec.Name}
		version = "" // the newest: 2026-07-28
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "scale", Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { a.changed() },
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	s, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: spec.Endpoint, HTTPClient: hc},
		&mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		return nil, 0, err
	}
	res, err := s.ListTools(ctx, nil)
	if err == nil && len(res.Tools) == 0 {
		err = fmt.Errorf("no tools")
	}
	if err != nil {
		_ = s.Close()
		return nil, 0, err
	}
	a.session = s
	return a, time.Since(start), nil
}

func closeAgents(agents []*agent) {
	var wg sync.WaitGroup
	work := make(chan *agent)
	for range 64 {
		wg.Go(func() {
			for a := range work {
				_ = a.session.Close()
			}
		})
	}
	for _, a := range agents {
		if a != nil && a.session != nil {
			work <- a
		}
	}
	close(work)
	wg.Wait()
}

// load is what the load phase measured.
type load struct {
	calls       []time.Duration
	callErrors  int64
	firstErr    error
	callsPerSec float64
	edits       []time.Duration // edit → list_changed at each session of the edited project
	expected    int             // list_changed the edits should have caused
	before      sample
	after       sample
	benchCPU    time.Duration // the benchmark's own process (the sessions)
	loadavg     float64       // the machine's 1-minute load average as the load began
	maxQueue    float64       // the deepest the reconcile queue was
}

// runLoad calls echo from callers concurrent sessions (on every server, spread over the
// projects) while it makes editN config edits, one every editGap, each toggling a tools filter
// on server c of a project (a repoint whose new tool set reaches the sessions as
// list_changed), and times both.
func runLoad(b *testing.B, ctrl *controller, cl client.Client, ns string, specs []v1alpha1.ProjectMCPSpec, agents []*agent,
	e *edits, profile string) load {
	b.Helper()
	const (
		callers   = 200
		interval  = time.Second // each caller's pace: 200 calls/s in all
		editN     = 100
		editGap   = 100 * time.Millisecond // or more, so that no project is edited again within 2 s
		warmup    = 3 * time.Second
		maxSettle = 10 * time.Second
	)
	per := make([]int, len(specs)) // sessions of each project
	for _, a := range agents {
		per[a.project]++
	}
	var measuring atomic.Bool
	var out load
	var errMu sync.Mutex
	stop := make(chan struct{})
	lat := make([][]time.Duration, callers)
	var wg sync.WaitGroup
	pick := func(k int) *agent { // spread over the projects, alternately of each revision
		i := k * len(agents) / callers
		for j := i; j < len(agents); j++ {
			if agents[j].stateless == (k%2 == 1) {
				return agents[j]
			}
		}
		return agents[i]
	}
	for k := range callers {
		a := pick(k)
		tool := string(rune('a'+k%3)) + "__echo"
		wg.Go(func() {
			paced(stop, interval, func() {
				d, err := timedEcho(a.session, tool)
				if !measuring.Load() {
					return
				}
				if err != nil {
					errMu.Lock()
					out.callErrors++
					if out.firstErr == nil {
						out.firstErr = err
					}
					errMu.Unlock()
				} else {
					lat[k] = append(lat[k], d)
				}
			})
		})
	}
	time.Sleep(warmup)
	measuring.Store(true)
	out.before = ctrl.sample(b)
	depthDone := make(chan struct{})
	depthStop := make(chan struct{})
	go func() { // the deepest the reconcile queue gets during the load, once a second
		defer close(depthDone)
		for {
			select {
			case <-depthStop:
				return
			case <-time.After(time.Second):
			}
			if m, err := ctrl.scrape(); err == nil {
				out.maxQueue = max(out.maxQueue, m.Sum("workqueue_depth", "name", "projectmcp"))
			}
		}
	}()
	out.loadavg = loadAverage()
	selfCPU := processCPU()
	var profiled chan error
	if profile != "" {
		profiled = make(chan error, 1)
		go func() {
			profiled <- ctrl.profile(context.Background(), "/debug/pprof/profile?seconds=10", profile+"load-cpu.pprof")
		}()
	}
	toggled := make([]bool, len(specs))
	gap := max(editGap, 2*time.Second/time.Duration(len(specs)))
	for i := range editN {
		p := i % len(specs)
		if len(specs) >= editN {
			p = i * len(specs) / editN
		}
		toggled[p] = !toggled[p]
		patch := editPatch(b, specs[p], toggled[p])
		e.begin(p)
		if err := cl.Patch(context.Background(), &v1alpha1.ProjectMCP{ObjectMeta: objectMeta(ns, p)},
			client.RawPatch(types.MergePatchType, patch)); err != nil {
			b.Fatalf("edit project %d: %v", p, err)
		}
		out.expected += per[p]
		time.Sleep(gap)
	}
	deadline := time.Now().Add(maxSettle)
	for e.received() < out.expected && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	close(depthStop)
	<-depthDone
	out.after = ctrl.sample(b)
	out.benchCPU = processCPU() - selfCPU
	measuring.Store(false)
	close(stop)
	wg.Wait()
	for _, l := range lat {
		out.calls = append(out.calls, l...)
	}
	out.callsPerSec = float64(len(out.calls)) / out.after.at.Sub(out.before.at).Seconds()
	out.edits = e.latencies()
	if profiled != nil {
		if err := <-profiled; err != nil {
			b.Logf("profile: %v", err)
		}
	}
	return out
}

// paced calls call once every interval until stop is closed (at once after a call that took
// longer), from a random phase: an agent's pace, not a closed loop that would measure only the
// queue.
func paced(stop <-chan struct{}, interval time.Duration, call func()) {
	next := time.Now().Add(rand.N(interval))
	tick := time.NewTimer(time.Until(next))
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		next = next.Add(interval)
		call()
		tick.Reset(max(0, time.Until(next)))
	}
}

// timedEcho calls tool once and times it; a tool error is an error, with the tool's text.
func timedEcho(s *mcp.ClientSession, tool string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"text": "x"}})
	d := time.Since(start)
	if err == nil && res.IsError {
		msg := ""
		if len(res.Content) > 0 {
			if tc, ok := res.Content[0].(*mcp.TextContent); ok {
				msg = tc.Text
			}
		}
		err = fmt.Errorf("%s: tool error: %s", tool, msg)
	}
	return d, err
}

// editPatch is a merge patch of a project's servers with server c's tools filter denying
// crash (deny) or not.
func editPatch(b *testing.B, spec v1alpha1.ProjectMCPSpec, deny bool) []byte {
	servers := append([]v1alpha1.MCPServer(nil), spec.Servers...)
	for i := range servers {
		if servers[i].Name == "c" && deny {
			servers[i].Tools = &v1alpha1.ToolFilter{Deny: []string{"crash"}}
		}
	}
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"servers": servers}})
	if err != nil {
		b.Fatal(err)
	}
	return patch
}
