package controllers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/controllers"
	"github.com/dsh-dev/projectmcp/internal/config"
	"github.com/dsh-dev/projectmcp/internal/mirror"
	"github.com/dsh-dev/projectmcp/internal/share"
	"github.com/dsh-dev/projectmcp/internal/testenv/harness"
)

// statusFaults are the projects whose next status writes fail (failStatusWrites).
var statusFaults sync.Map // types.NamespacedName → *statusFault

// statusFault counts the failures still to inject for one project, and those injected.
type statusFault struct {
	left, injected atomic.Int32
}

// failStatusWrites makes the test controller's next n status writes of a project fail, as a
// status write fails against a real API server: alternately a conflict and an internal error.
// The faults are injected into the real client (faultyClient); the returned counter tells how
// many were.
func failStatusWrites(t testing.TB, key types.NamespacedName, n int32) *statusFault {
	f := &statusFault{}
	f.left.Store(n)
	statusFaults.Store(key, f)
	t.Cleanup(func() { statusFaults.Delete(key) })
	return f
}

// fault returns the error to inject into a status write of key, or nil.
func fault(key types.NamespacedName) error {
	v, ok := statusFaults.Load(key)
	if !ok {
		return nil
	}
	f := v.(*statusFault)
	for {
		left := f.left.Load()
		if left <= 0 {
			return nil
		}
		if f.left.CompareAndSwap(left, left-1) {
			break
		}
	}
	n := f.injected.Add(1)
	gr := schema.GroupResource{Group: v1alpha1.GroupVersion.Group, Resource: "projectmcps"}
	if n%2 == 1 {
		return apierrors.NewConflict(gr, key.Name, fmt.Errorf("injected fault %d", n))
	}
	return apierrors.NewInternalError(fmt.Errorf("injected fault %d", n))
}

// faultyClient is the manager's client, with the status writes of the projects in statusFaults
// failing before they reach the API server.
type faultyClient struct{ client.Client }

func (c faultyClient) Status() client.SubResourceWriter { return faultyStatus{c.Client.Status()} }

type faultyStatus struct{ client.SubResourceWriter }

func (s faultyStatus) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	if err := fault(client.ObjectKeyFromObject(obj)); err != nil {
		return err
	}
	return s.SubResourceWriter.Update(ctx, obj, opts...)
}

func (s faultyStatus) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	if err := fault(client.ObjectKeyFromObject(obj)); err != nil {
		return err
	}
	return s.SubResourceWriter.Patch(ctx, obj, patch, opts...)
}

func (s faultyStatus) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
	var named struct {
		Metadata struct{ Name, Namespace string }
	}
	data, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, &named); err != nil {
		return err
	}
	if err := fault(types.NamespacedName{Namespace: named.Metadata.Namespace, Name: named.Metadata.Name}); err != nil {
		return err
	}
	return s.SubResourceWriter.Apply(ctx, obj, opts...)
}

// starts counts the lines of a fixture's --start-log: how many times the server was started.
func starts(t testing.TB, path string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(data), "\n")
}

// requestReconnect sets the reconnect annotation to token.
func requestReconnect(t testing.TB, key types.NamespacedName, token string) {
	t.Helper()
	harness.Update(t, key, func(o *v1alpha1.ProjectMCP) {
		if o.Annotations == nil {
			o.Annotations = map[string]string{}
		}
		o.Annotations[v1alpha1.AnnotationReconnectRequestedAt] = token
	})
}

// A reconnect request is carried out once although the status writes that record it as handled
// fail (conflicts, server errors) several times: the server is started once more, not once per
// failed write, and status shows the token handled once a write succeeds. A new token is
// carried out again.
func TestReconnectOnceDespiteFailedStatusWrites(t *testing.T) {
	ns := harness.NewNamespace(t)
	startLog := filepath.Join(t.TempDir(), "starts")
	key := harness.Create(t, ns, "flaky-status", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{
		harness.FixtureServer(t, "a", "--start-log", startLog)}})
	ready := harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	first, _ := harness.ServerStatusOf(ready, "a")
	if n := starts(t, startLog); n != 1 {
		t.Fatalf("the server started %d times before any reconnect", n)
	}

	for i, token := range []string{"first-request", "second-request"} {
		const failures = 6
		injected := failStatusWrites(t, key, failures)
		requestReconnect(t, key, token)
		handled := harness.WaitStatus(t, key, 30*time.Second, "the request "+token+" handled in status", func(o *v1alpha1.ProjectMCP) bool {
			s, _ := harness.ServerStatusOf(o, "a")
			return o.Status.LastHandledReconnectAt == token && s.Phase == v1alpha1.PhaseReady
		})
		if n := injected.injected.Load(); n != failures {
			t.Fatalf("%s: %d status writes failed, want %d", token, n, failures)
		}
		rebuilt, _ := harness.ServerStatusOf(handled, "a")
		if rebuilt.Connection == first.Connection || rebuilt.Connection == "" {
			t.Fatalf("%s: the connection was not rebuilt: %q", token, rebuilt.Connection)
		}
		// Time for any further reconcile to rebuild again, had the request been carried out
		// once per failed write.
		time.Sleep(time.Second)
		if n := starts(t, startLog); n != 2+i {
			t.Fatalf("%s: the server started %d times, want %d: the request was carried out %d times",
				token, n, 2+i, n-1-i)
		}
		now, _ := harness.ServerStatusOf(harness.Get(t, key), "a")
		if live := harness.Ctl.Registry.Observe(key).Servers["a"].Conn.ID; now.Connection != rebuilt.Connection || live != rebuilt.Connection {
			t.Fatalf("%s: connection %s in status, then %s, live %s: rebuilt again", token, rebuilt.Connection, now.Connection, live)
		}
		first = rebuilt
	}
}

// statusManagers are the field managers of obj's status, each with the fields it owns (JSON).
func statusManagers(t testing.TB, obj *v1alpha1.ProjectMCP) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, e := range obj.ManagedFields {
		if e.Subresource != "status" {
			continue
		}
		name := e.Manager + "/" + string(e.Operation)
		if _, dup := out[name]; dup {
			t.Fatalf("two status entries of %s", name)
		}
		out[name] = e.FieldsV1.GetRawString()
	}
	return out
}

// conditionKey is how managedFields names the condition of a type.
func conditionKey(typ string) string { return fmt.Sprintf(`"k:{\"type\":\"%s\"}"`, typ) }

// The two writers of status, the mirror (ConfigSynced) and the reconciler (everything else),
// each apply their own fields under their own field manager: whatever the order of their
// writes, and when they write at the same time, neither drops the other's conditions.
func TestStatusWritersKeepEachOthersFields(t *testing.T) {
	ns := harness.NewNamespace(t)
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, ".dsh"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeConfig(t, dir, map[string]any{"a": fixtureEntry("a")})
	key := types.NamespacedName{Namespace: ns, Name: "writers"}
	m := &mirror.Mirror{Client: harness.Env.Client, Dir: dir, Key: key, Log: ctrl.Log.WithName("mirror")}
	t.Cleanup(func() { harness.DeleteAndWait(t, key) })
	ctx := context.Background()
	syncMirror := func() {
		t.Helper()
		if err := m.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	condition := func(o *v1alpha1.ProjectMCP, typ string) metav1.Condition {
		t.Helper()
		c := meta.FindStatusCondition(o.Status.Conditions, typ)
		if c == nil {
			t.Fatalf("no %s condition: %+v", typ, o.Status.Conditions)
		}
		return *c
	}

	// The mirror writes first (it creates the object), then the reconciler.
	syncMirror()
	obj := harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	if c := condition(obj, v1alpha1.ConditionConfigSynced); c.Status != metav1.ConditionTrue {
		t.Fatalf("the reconciler's write dropped or changed ConfigSynced: %+v", c)
	}
	ready := condition(obj, v1alpha1.ConditionReady)

	// The mirror again: an invalid file; the reconciler's conditions stay as they were.
	writeRaw(t, dir, `{"mcpServers": {},}`)
	syncMirror()
	obj = harness.Get(t, key)
	if c := condition(obj, v1alpha1.ConditionConfigSynced); c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonConfigInvalid {
		t.Fatalf("ConfigSynced after an invalid file: %+v", c)
	}
	if c := condition(obj, v1alpha1.ConditionReady); c != ready {
		t.Fatalf("the mirror's write changed Ready: %+v, was %+v", c, ready)
	}
	condition(obj, v1alpha1.ConditionDegraded)

	// The reconciler again (a session mounts); ConfigSynced stays False with its message.
	synced := condition(obj, v1alpha1.ConditionConfigSynced)
	mount(t, key, "s1")
	obj = harness.WaitStatus(t, key, 10*time.Second, "the session in status", func(o *v1alpha1.ProjectMCP) bool { return o.Status.SessionCount == 1 })
	if c := condition(obj, v1alpha1.ConditionConfigSynced); c != synced {
		t.Fatalf("the reconciler's write changed ConfigSynced: %+v, was %+v", c, synced)
	}

	// Both at once: the mirror syncs a valid and an invalid file in turn while sessions mount
	// and leave; afterwards each condition is its writer's last word.
	valid, _ := json.Marshal(map[string]any{"mcpServers": map[string]any{"a": fixtureEntry("a")}})
	files := []string{string(valid), `mcpServers: []`}
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 10 {
			if err := os.WriteFile(m.Path(), []byte(files[i%2]), 0o644); err != nil {
				t.Error(err)
				return
			}
			if err := m.Sync(ctx); err != nil {
				t.Error(err)
			}
		}
	})
	for i := range 10 {
		id := fmt.Sprintf("burst-%d", i)
		if _, err := harness.Ctl.Registry.Mount(ctx, key, share.Who{Session: id}, "test/1.0"); err != nil {
			t.Fatal(err)
		}
		harness.Ctl.Registry.Release(key, id)
	}
	wg.Wait()
	obj = harness.WaitStatus(t, key, 10*time.Second, "one session and Ready", func(o *v1alpha1.ProjectMCP) bool {
		return o.Status.SessionCount == 1 && harness.IsReady(o)
	})
	if c := condition(obj, v1alpha1.ConditionConfigSynced); c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, config.DefaultPath+":1:") {
		t.Fatalf("the mirror's last write (an invalid file) is not in ConfigSynced: %+v", c)
	}
	condition(obj, v1alpha1.ConditionDegraded)

	// Each writer owns its own fields, by apply; nobody else owns any of status.
	managers := statusManagers(t, obj)
	own, mirrored := managers[controllers.FieldManager+"/Apply"], managers[mirror.FieldManager+"/Apply"]
	if len(managers) != 2 || own == "" || mirrored == "" {
		t.Fatalf("status managers: %v", managers)
	}
	for _, want := range []string{conditionKey(v1alpha1.ConditionReady), conditionKey(v1alpha1.ConditionDegraded), `"f:servers"`, `"f:sessions"`} {
		if !strings.Contains(own, want) {
			t.Errorf("the reconciler does not own %s: %s", want, own)
		}
	}
	if strings.Contains(own, conditionKey(v1alpha1.ConditionConfigSynced)) {
		t.Errorf("the reconciler owns ConfigSynced: %s", own)
	}
	if !strings.Contains(mirrored, conditionKey(v1alpha1.ConditionConfigSynced)) || strings.Contains(mirrored, conditionKey(v1alpha1.ConditionReady)) ||
		strings.Contains(mirrored, `"f:servers"`) {
		t.Errorf("the mirror must own ConfigSynced alone: %s", mirrored)
	}
}

// Status written by updates (a controller from before server-side apply, or kubectl edit) is
// taken over by the reconciler's field manager at its next write: what the update left that
// the reconciler no longer writes is removed (a server gone from spec, a session gone), while
// the mirror's ConfigSynced stays.
func TestStatusWrittenByUpdatesIsTakenOver(t *testing.T) {
	ns := harness.NewNamespace(t)
	key := types.NamespacedName{Namespace: ns, Name: "updated"}
	release := harness.Hold(t, key)
	harness.Create(t, ns, key.Name, v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "a")}})
	obj := harness.Get(t, key)
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	obj.Status = v1alpha1.ProjectMCPStatus{
		Endpoint:               "http://old.invalid/mcp",
		LastHandledReconnectAt: "handled-before",
		Servers:                []v1alpha1.ServerStatus{{Name: "gone", Phase: v1alpha1.PhaseReady, Connection: "c-old", ToolCount: 1}},
		ToolCount:              1,
		SessionCount:           1,
		Sessions:               []v1alpha1.SessionBinding{{ID: "old-session", BoundAt: now}},
		Conditions: []metav1.Condition{
			{Type: v1alpha1.ConditionConfigSynced, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonConfigApplied, Message: "applied", LastTransitionTime: now},
			{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonServersConnecting, Message: "old", LastTransitionTime: now},
		},
	}
	if err := harness.Env.Client.Status().Update(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
	release()
	obj = harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	if _, ok := harness.ServerStatusOf(obj, "gone"); ok || len(obj.Status.Sessions) != 0 || obj.Status.SessionCount != 0 {
		t.Fatalf("what the update left stayed: servers %+v, sessions %+v", obj.Status.Servers, obj.Status.Sessions)
	}
	if obj.Status.Endpoint != harness.Ctl.Gateway.Endpoint(key) || obj.Status.LastHandledReconnectAt != "handled-before" {
		t.Fatalf("endpoint %q, lastHandledReconnectAt %q", obj.Status.Endpoint, obj.Status.LastHandledReconnectAt)
	}
	if c := meta.FindStatusCondition(obj.Status.Conditions, v1alpha1.ConditionConfigSynced); c == nil || c.Message != "applied" {
		t.Fatalf("the mirror's condition was dropped: %+v", obj.Status.Conditions)
	}
	managers := statusManagers(t, obj)
	if len(managers) != 1 || strings.Contains(managers[controllers.FieldManager+"/Apply"], conditionKey(v1alpha1.ConditionConfigSynced)) {
		t.Fatalf("status managers: %v", managers)
	}
}
