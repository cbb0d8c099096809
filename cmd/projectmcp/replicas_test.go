package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/buckets"
	"github.com/dsh-dev/projectmcp/internal/testenv"
	"github.com/dsh-dev/projectmcp/internal/testutil"
	"github.com/dsh-dev/projectmcp/test/fixture"
)

// failedResponses notes, with the time, the body of every response of 400 and over its agents
// get: what the SDK's error leaves out.
type failedResponses struct {
	mu     sync.Mutex
	bodies []string
}

func (fr *failedResponses) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil || resp.StatusCode < 400 {
		return resp, err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fr.mu.Lock()
	fr.bodies = append(fr.bodies, fmt.Sprintf("%s %s %s: %d %s", time.Now().Format("15:04:05.000"), req.Method, req.URL.Path, resp.StatusCode, strings.TrimSpace(string(body))))
	fr.mu.Unlock()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp, nil
}

func (fr *failedResponses) String() string {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	return strings.Join(fr.bodies, "\n")
}

// bucketFleet is the replicas of the bucket test and what it knows of them.
type bucketFleet struct {
	failures *failedResponses
	t        *testing.T
	env      *testenv.Env
	leaseNS  string
	ns       string
	replicas []*replica
	svc      *service
	args     []string
}

const (
	fleetBuckets = 6
	fleetLease   = 4 * time.Second
)

func (f *bucketFleet) start(name string) *replica {
	r := startReplica(f.t, name, f.env.Kubeconfig, f.leaseNS, f.svc.srv.URL, f.args...)
	f.replicas = append(f.replicas, r)
	f.svc.add(r)
	return r
}

// project is p<k>, pinned to bucket k.
func (f *bucketFleet) project(k int) types.NamespacedName {
	return types.NamespacedName{Namespace: f.ns, Name: "p" + strconv.Itoa(k)}
}

func (f *bucketFleet) get(k int) *v1alpha1.ProjectMCP {
	obj := &v1alpha1.ProjectMCP{}
	if err := f.env.Client.Get(context.Background(), f.project(k), obj); err != nil {
		f.t.Fatal(err)
	}
	return obj
}

// owner is the replica serving project k by its bucket Lease (the address its holder wrote),
// when status says the same holder serves it and its server is Ready.
func (f *bucketFleet) owner(k int) (*replica, string, error) {
	obj := f.get(k)
	if obj.Status.Owner == nil || obj.Status.ReadyServers != "1/1" || len(obj.Status.Servers) != 1 {
		return nil, "", fmt.Errorf("p%d: status %+v", k, obj.Status)
	}
	var l coordinationv1.Lease
	if err := f.env.Client.Get(context.Background(), types.NamespacedName{Namespace: f.leaseNS, Name: buckets.LeaseName(int(obj.Status.Owner.Bucket))}, &l); err != nil {
		return nil, "", err
	}
	if int(obj.Status.Owner.Bucket) != k || ptr.Deref(l.Spec.HolderIdentity, "") != obj.Status.Owner.Replica {
		return nil, "", fmt.Errorf("p%d: status.owner %+v, the Lease's holder %q", k, obj.Status.Owner, ptr.Deref(l.Spec.HolderIdentity, ""))
	}
	for _, r := range f.replicas {
		if l.Annotations[buckets.AnnotationAddress] == r.gateway {
			return r, obj.Status.Servers[0].Connection, nil
		}
	}
	return nil, "", fmt.Errorf("p%d: the holder's address %q is no replica's", k, l.Annotations[buckets.AnnotationAddress])
}

// servedBy is who serves every project and on which connection, when each is Ready on a
// replica that serves it, none of them excluded.
func (f *bucketFleet) servedBy(excluded ...*replica) (map[int]*replica, map[int]string, error) {
	owners, conns := map[int]*replica{}, map[int]string{}
	for k := range fleetBuckets {
		r, conn, err := f.owner(k)
		if err != nil {
			return nil, nil, err
		}
		if slices.Contains(excluded, r) {
			return nil, nil, fmt.Errorf("p%d is still served by %s", k, r.name)
		}
		owners[k], conns[k] = r, conn
	}
	// Settled too: no replica holds more than its fair share, which it would still give up
	// (a handoff later would move a project the test takes as staying).
	share := buckets.FairShare(fleetBuckets, len(f.live(excluded...)))
	held := map[*replica]int{}
	for _, r := range owners {
		if held[r]++; held[r] > share {
			return nil, nil, fmt.Errorf("%s serves more than its share of %d projects", r.name, share)
		}
	}
	return owners, conns, nil
}

// owners waits for servedBy.
func (f *bucketFleet) owners(within time.Duration, what string, excluded ...*replica) (owners map[int]*replica, conns map[int]string) {
	f.t.Helper()
	testutil.EventuallyOK(f.t, within, what, func() (err error) {
		owners, conns, err = f.servedBy(excluded...)
		return err
	})
	return owners, conns
}

// live is the replicas but the ones named.
func (f *bucketFleet) live(gone ...*replica) []*replica {
	var out []*replica
	for _, r := range f.replicas {
		if !slices.Contains(gone, r) {
			out = append(out, r)
		}
	}
	return out
}

// agent is a session of project k through the given replica's own gateway address.
func (f *bucketFleet) agent(ctx context.Context, via *replica, k int, version string, changed chan<- struct{}) *mcp.ClientSession {
	f.t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "agent-" + version, Version: "1"}, &mcp.ClientOptions{
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": "yes to " + req.Params.Message}}, nil
		},
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			if changed != nil {
				select {
				case changed <- struct{}{}:
				default:
				}
			}
		},
	})
	url := "http://" + via.gateway + "/projects/" + f.ns + "/p" + strconv.Itoa(k) + "/mcp"
	s, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1, HTTPClient: &http.Client{Transport: f.failures}},
		&mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		f.t.Fatalf("connecting to p%d through %s (%s): %v", k, via.name, version, err)
	}
	f.t.Cleanup(func() { _ = s.Close() })
	return s
}

func echoed(ctx context.Context, s *mcp.ClientSession, text string) error {
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "a__echo", Arguments: map[string]any{"text": text}})
	if err != nil {
		return err
	}
	if len(res.Content) == 0 || res.IsError {
		text := ""
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				text += tc.Text
			}
		}
		return fmt.Errorf("echo failed (isError %v): %q", res.IsError, text)
	}
	if got, _ := res.Content[0].(*mcp.TextContent); got == nil || got.Text != text {
		return fmt.Errorf("echo: %+v", res.Content[0])
	}
	return nil
}

// Three controllers against one API server, as three replicas with --buckets 6 and a project
// pinned to each bucket: the projects spread over all three; a session through a replica that
// does not serve its project gets tools, calls, list_changed and elicitation as if it did; a
// replica killed (SIGKILL: it cannot hand anything off) has its projects Ready on the others
// within the lease duration and 10 s, without any server running twice (each holds a lock
// and has no reconnect budget: a second copy would fail it for good) and without touching the
// others' connections; a fourth replica takes buckets by handoff, and only the moved projects'
// connections change; a replica stopped cleanly moves its projects with no failed call.
func TestReplicasSpreadAndMoveProjects(t *testing.T) {
	env := apiServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	newNS := func(prefix string) string {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}
		if err := env.Client.Create(ctx, ns); err != nil {
			t.Fatal(err)
		}
		return ns.Name
	}
	// The replicas vouch for themselves as the chart has them: with a token of one service
	// account for the replicas' audience.
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "replica-token")
	if err := os.WriteFile(tokenFile, []byte(saToken(t, env, "controller", buckets.ReplicaAudience)), 0o400); err != nil {
		t.Fatal(err)
	}
	f := &bucketFleet{t: t, env: env, failures: &failedResponses{}, leaseNS: newNS("buckets-"), ns: newNS("bucketed-"), svc: newService(t),
		args: []string{"--buckets", strconv.Itoa(fleetBuckets), "--leader-elect-lease-duration", fleetLease.String(),
			"--leader-elect-renew-deadline", "3s", "--leader-elect-retry-period", "500ms", "--replica-token-file", tokenFile}}
	for k := range fleetBuckets {
		obj := &v1alpha1.ProjectMCP{
			ObjectMeta: metav1.ObjectMeta{Name: f.project(k).Name, Namespace: f.ns, Labels: map[string]string{buckets.LabelPin: strconv.Itoa(k)}},
			Spec: v1alpha1.ProjectMCPSpec{
				Reconnect: &v1alpha1.ReconnectPolicy{MaxAttempts: ptr.To[int32](0)},
				Servers: []v1alpha1.MCPServer{{Name: "a", Stdio: &v1alpha1.StdioServer{
					Command: os.Args[0], Args: []string{"--lock", filepath.Join(dir, fmt.Sprintf("p%d.lock", k))},
					Env: []v1alpha1.NameValue{{Name: fixture.EnvVar, Value: "1"}},
				}}},
			},
		}
		env.DeleteOnCleanup(t, obj)
		if err := env.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	r0, r1 := f.start("r0"), f.start("r1")
	f.start("r2")
	owners, conns := f.owners(90*time.Second, "every project Ready on the replica holding its bucket")
	served := map[*replica][]int{}
	for k, r := range owners {
		served[r] = append(served[r], k)
	}
	if len(served) != 3 {
		t.Fatalf("the projects are served by %d replicas, want all three: %v", len(served), served)
	}

	// A session through a replica that does not serve the project.
	victim := owners[0]
	front := r0
	if front == victim {
		front = r1
	}
	changed := make(chan struct{}, 1)
	stateful := f.agent(ctx, front, 0, "2025-11-25", changed)
	stateless := f.agent(ctx, front, 0, "2026-07-28", nil)
	for _, s := range []*mcp.ClientSession{stateful, stateless} {
		tools, err := s.ListTools(ctx, nil)
		if err != nil || !slices.ContainsFunc(tools.Tools, func(tl *mcp.Tool) bool { return tl.Name == "a__elicit" }) {
			t.Fatalf("tools through %s (%s): %v %v\nthe responses:\n%s", front.name, s.InitializeResult().ProtocolVersion, tools, err, f.failures)
		}
		if err := echoed(ctx, s, "through "+front.name); err != nil {
			t.Fatalf("a call through %s: %v", front.name, err)
		}
		res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "a__elicit", Arguments: map[string]any{"text": "proceed?"}})
		if err != nil || res.IsError || !strings.Contains(fmt.Sprint(res.Content[0]), "yes to proceed?") {
			t.Fatalf("elicitation through %s: %+v %v", front.name, res, err)
		}
	}
	if _, err := stateful.CallTool(ctx, &mcp.CallToolParams{Name: "a__add_tool", Arguments: map[string]any{"name": "late"}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-time.After(20 * time.Second):
		t.Fatalf("no tools/list_changed through %s", front.name)
	}

	// The owner of p0 dies without handing anything off.
	killed := time.Now()
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-victim.exited
	victim.waitedForExiting = true
	after, afterConns := f.owners(fleetLease+10*time.Second, "the killed replica's projects Ready on the others", victim)
	t.Logf("the killed replica's %d projects were Ready elsewhere %s after the kill", len(served[victim]), time.Since(killed).Round(time.Millisecond))
	for k := range fleetBuckets {
		moved := owners[k] == victim
		if !moved && (after[k] != owners[k] || afterConns[k] != conns[k]) {
			t.Errorf("p%d was served by %s on %s, now by %s on %s: a project of a live replica was touched", k, owners[k].name, conns[k], after[k].name, afterConns[k])
		}
	}
	if err := echoed(ctx, stateless, "after the kill"); err != nil {
		t.Fatalf("the stateless session after the kill: %v", err)
	}

	// A fourth replica joins: it takes buckets by handoff; only the projects it takes move.
	owners, conns = after, afterConns
	live := f.live(victim)
	var sessions []*mcp.ClientSession
	for k := range fleetBuckets { // a session per project through a replica that stays
		sessions = append(sessions, f.agent(ctx, live[0], k, "2025-11-25", nil))
	}
	r3 := f.start("r3")
	testutil.EventuallyOK(t, 60*time.Second, "the fourth replica serving its share", func() (err error) {
		if after, afterConns, err = f.servedBy(victim); err != nil {
			return err
		}
		n := 0
		for _, r := range after {
			if r == r3 {
				n++
			}
		}
		if n != buckets.FairShare(fleetBuckets, 3) {
			return fmt.Errorf("r3 serves %d projects", n)
		}
		return nil
	})
	for k := range fleetBuckets {
		moved := after[k] != owners[k]
		if moved != (afterConns[k] != conns[k]) {
			t.Errorf("p%d: moved from %s to %s, connection %s → %s", k, owners[k].name, after[k].name, conns[k], afterConns[k])
		}
		err := echoed(ctx, sessions[k], "after the join")
		if moved && err == nil {
			t.Errorf("p%d moved, and its 2025-11-25 session's call still worked: the session cannot have moved", k)
		}
		if !moved && err != nil {
			t.Errorf("p%d did not move, and its session's call failed: %v", k, err)
		}
	}

	// One replica stops cleanly (SIGTERM): its projects move with no failed call of a
	// stateless session calling them throughout, through a replica that stays.
	owners = after
	stopping := r3
	var calling []int
	for k, r := range owners {
		if r == stopping {
			calling = append(calling, k)
		}
	}
	stay := f.live(victim, stopping)[0]
	const callers = 3 // sessions per project, each calling without pause: calls are always in flight
	var failed, calls atomic.Int64
	var firstFailure atomic.Pointer[string]
	callCtx, stopCalls := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, k := range calling {
		for range callers {
			s := f.agent(ctx, stay, k, "2026-07-28", nil)
			wg.Go(func() {
				for i := 0; callCtx.Err() == nil; i++ {
					err := echoed(callCtx, s, fmt.Sprintf("p%d call %d", k, i))
					if callCtx.Err() != nil {
						return
					}
					calls.Add(1)
					if err != nil {
						failed.Add(1)
						msg := fmt.Sprintf("p%d: %v", k, err)
						firstFailure.CompareAndSwap(nil, &msg)
					}
					time.Sleep(5 * time.Millisecond)
				}
			})
		}
	}
	time.Sleep(500 * time.Millisecond)
	if err := stopping.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-stopping.exited:
		stopping.waitedForExiting = true
		if err != nil {
			t.Errorf("the stopped replica exited with %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the replica did not stop on SIGTERM")
	}
	after, _ = f.owners(30*time.Second, "the stopped replica's projects Ready on the others", victim, stopping)
	time.Sleep(time.Second) // calls go on, on the new owners
	stopCalls()
	wg.Wait()
	// A call that reached the stopping replica's gateway just before the handoff is sent on to
	// the next holder (the gateway answers it moved, the Router replays it), and one that
	// reaches the next holder while its servers start waits for them (Registry.AwaitStarted:
	// the three callers of a project are one stateless session, by principal, client name and
	// address).
	n := failed.Load()
	t.Logf("%d calls to the %d projects moving off a stopped replica, %d failed", calls.Load(), len(calling), n)
	if n > 0 {
		t.Fatalf("%d of %d calls failed while their projects moved off a replica stopping cleanly; the first: %s\nthe responses:\n%s", n, calls.Load(), *firstFailure.Load(), f.failures)
	}
	for k := range fleetBuckets {
		if after[k] == stopping {
			t.Fatalf("p%d is still served by the stopped replica", k)
		}
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("the test ran out of time")
	}
}
