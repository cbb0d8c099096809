package mirror

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/testenv"
	"github.com/dsh-dev/projectmcp/internal/testutil"
)

var shared testenv.Lazy

func TestMain(m *testing.M) {
	code := m.Run()
	shared.Stop()
	os.Exit(code)
}

// writeConfig writes dir/.dsh/mcp.json with one stdio server per name.
func writeConfig(t *testing.T, dir string, names ...string) {
	t.Helper()
	servers := map[string]any{}
	for _, n := range names {
		servers[n] = map[string]any{"command": "server-" + n}
	}
	data, _ := json.Marshal(map[string]any{"mcpServers": servers})
	if err := os.MkdirAll(filepath.Join(dir, ".dsh"), 0o755); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, ".dsh", ".mcp.json.tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, ".dsh", "mcp.json")); err != nil {
		t.Fatal(err)
	}
}

// run runs the mirror until the test ends.
func run(t *testing.T, m *Mirror) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// newKey is a ProjectMCP name of its own for each test, deleted when it ends.
func newKey(t *testing.T, env *testenv.Env) types.NamespacedName {
	key := types.NamespacedName{Namespace: "default", Name: strings.ToLower(strings.ReplaceAll(t.Name(), "_", "-"))}
	// Registered before the mirror's own cleanup, so it runs after the mirror has stopped.
	env.DeleteOnCleanup(t, &v1alpha1.ProjectMCP{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace}})
	return key
}

// waitServers waits until the object's spec lists exactly these servers (and ConfigSynced is
// True).
func waitServers(t *testing.T, c client.Client, key types.NamespacedName, timeout time.Duration, want ...string) {
	t.Helper()
	testutil.EventuallyOK(t, timeout, fmt.Sprintf("ProjectMCP %s with servers %v", key, want), func() error {
		obj := &v1alpha1.ProjectMCP{}
		if err := c.Get(context.Background(), key, obj); err != nil {
			return err
		}
		var got []string
		for _, s := range obj.Spec.Servers {
			got = append(got, s.Name)
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			return fmt.Errorf("servers %v", got)
		}
		if c := meta.FindStatusCondition(obj.Status.Conditions, v1alpha1.ConditionConfigSynced); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("ConfigSynced %+v", c)
		}
		return nil
	})
}

// lateProxy is an address where nothing listens until start: then it forwards TCP
// connections to target, as an API server that comes up after the mirror.
type lateProxy struct {
	addr, target string
	ln           net.Listener
	wg           sync.WaitGroup
	mu           sync.Mutex
	conns        []net.Conn // closed at cleanup: the client keeps idle connections open
}

func newLateProxy(t *testing.T, target string) *lateProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &lateProxy{addr: ln.Addr().String(), target: target}
	ln.Close() // connection refused from now on
	t.Cleanup(func() {
		if p.ln != nil {
			p.ln.Close()
		}
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *lateProxy) start(t *testing.T) {
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		t.Fatalf("listening again on %s: %v", p.addr, err)
	}
	p.ln = ln
	p.wg.Go(func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", p.target)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			p.wg.Go(func() { _, _ = io.Copy(out, in); out.Close() })
			p.wg.Go(func() { _, _ = io.Copy(in, out); in.Close() })
		}
	})
}

// A mirror started while the API server cannot be reached keeps retrying with backoff and
// applies the file once it can; nothing waits for the file to change again.
func TestMirrorRetriesUntilTheAPIServerAnswers(t *testing.T) {
	env := shared.Get(t)
	key := newKey(t, env)
	api, err := url.Parse(env.Config.Host)
	if err != nil {
		t.Fatal(err)
	}
	proxy := newLateProxy(t, api.Host)
	cfg := rest.CopyConfig(env.Config)
	cfg.Host = "https://" + proxy.addr
	cfg.Timeout = 5 * time.Second
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeConfig(t, dir, "a")
	var log testutil.LogLines
	run(t, &Mirror{Client: c, Dir: dir, Key: key, Log: log.Logger()})
	defer func() {
		if t.Failed() {
			t.Logf("mirror log:\n%s", strings.Join(log.Lines(), "\n"))
		}
	}()

	testutil.Eventually(t, 30*time.Second, "two failed attempts", func() bool { return len(log.Matching("retrying")) >= 2 })
	if err := env.Client.Get(context.Background(), key, &v1alpha1.ProjectMCP{}); err == nil {
		t.Fatal("the object exists although the API server was unreachable")
	}
	proxy.start(t)
	waitServers(t, env.Client, key, 30*time.Second, "a")
	// The object can be seen before the mirror, whose apply returned, has logged it.
	testutil.Eventually(t, 10*time.Second, "the recovery to be logged", func() bool { return len(log.Matching("succeeded after retries")) > 0 })
	if len(log.Matching("succeeded after retries")) != 1 {
		t.Errorf("the recovery is logged more than once: %q", log.Lines())
	}
}

// A project folder that is a symlink swapped atomically, as git-sync does (a new link moved
// over the old one, the old checkout deleted), is followed: the new checkout's file is
// applied, and edits in it are seen.
func TestMirrorFollowsSwappedSymlink(t *testing.T) {
	env := shared.Get(t)
	key := newKey(t, env)
	root := t.TempDir()
	rev1, rev2 := filepath.Join(root, "rev-1"), filepath.Join(root, "rev-2")
	writeConfig(t, rev1, "a")
	link := filepath.Join(root, "project")
	if err := os.Symlink("rev-1", link); err != nil {
		t.Fatal(err)
	}
	run(t, &Mirror{Client: env.Client, Dir: link, Key: key, Log: logr.Discard()})
	waitServers(t, env.Client, key, 30*time.Second, "a")

	// git-sync: check out the new revision beside the old, swap the link, delete the old.
	writeConfig(t, rev2, "a", "b")
	tmp := filepath.Join(root, "tmp-link")
	if err := os.Symlink("rev-2", tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, link); err != nil {
		t.Fatal(err)
	}
	waitServers(t, env.Client, key, 10*time.Second, "a", "b")
	if err := os.RemoveAll(rev1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * debounce) // the deletion's events settle
	writeConfig(t, rev2, "c")
	waitServers(t, env.Client, key, 10*time.Second, "c")
}

// The file is applied again every Resync although nothing changed: an object deleted behind
// the mirror's back comes back.
func TestMirrorResyncsPeriodically(t *testing.T) {
	env := shared.Get(t)
	key := newKey(t, env)
	dir := t.TempDir()
	writeConfig(t, dir, "a")
	run(t, &Mirror{Client: env.Client, Dir: dir, Key: key, Log: logr.Discard(), Resync: 300 * time.Millisecond})
	waitServers(t, env.Client, key, 30*time.Second, "a")
	obj := &v1alpha1.ProjectMCP{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace}}
	if err := env.Client.Delete(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
	waitServers(t, env.Client, key, 10*time.Second, "a")
}

// ConfigSynced is applied alone, under the mirror's field manager: another manager's condition
// stays, a sync of an unchanged file writes nothing (the periodic resync costs no write), and
// the transition time moves only when the condition's status does.
func TestMirrorAppliesItsConditionAlone(t *testing.T) {
	env := shared.Get(t)
	key := newKey(t, env)
	dir := t.TempDir()
	writeConfig(t, dir, "a")
	m := &Mirror{Client: env.Client, Dir: dir, Key: key, Log: logr.Discard()}
	ctx := context.Background()
	if err := m.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	// Another writer's condition, applied under its own manager.
	other := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Other", Message: "other's",
		LastTransitionTime: metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))}
	ac, err := v1alpha1.ApplyConfiguration(m.Key, "status", map[string]any{"conditions": []metav1.Condition{other}})
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Status().Apply(ctx, ac, client.FieldOwner("other-writer"), client.ForceOwnership); err != nil {
		t.Fatal(err)
	}
	get := func() *v1alpha1.ProjectMCP {
		t.Helper()
		obj := &v1alpha1.ProjectMCP{}
		if err := env.Client.Get(ctx, key, obj); err != nil {
			t.Fatal(err)
		}
		return obj
	}
	before := get()
	synced := meta.FindStatusCondition(before.Status.Conditions, v1alpha1.ConditionConfigSynced)
	time.Sleep(1100 * time.Millisecond) // a new transition time would differ by a second
	if err := m.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if after := get(); after.ResourceVersion != before.ResourceVersion {
		t.Fatalf("a sync of an unchanged file wrote the object: %s → %s", before.ResourceVersion, after.ResourceVersion)
	}

	writeConfig(t, dir, "a", "b") // a new message, the same status
	if err := m.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	obj := get()
	c := meta.FindStatusCondition(obj.Status.Conditions, v1alpha1.ConditionConfigSynced)
	if c == nil || !strings.Contains(c.Message, "2 servers") || !c.LastTransitionTime.Equal(&synced.LastTransitionTime) {
		t.Fatalf("ConfigSynced %+v; the transition time was %s", c, synced.LastTransitionTime)
	}
	if o := meta.FindStatusCondition(obj.Status.Conditions, v1alpha1.ConditionReady); o == nil || o.Status != other.Status ||
		o.Reason != other.Reason || o.Message != other.Message || !o.LastTransitionTime.Equal(&other.LastTransitionTime) {
		t.Fatalf("the other writer's condition changed: %+v", o)
	}

	// An invalid file: the status changes, and so does the transition time.
	if err := os.WriteFile(m.Path(), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := m.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	c = meta.FindStatusCondition(get().Status.Conditions, v1alpha1.ConditionConfigSynced)
	if c == nil || c.Status != metav1.ConditionFalse || c.LastTransitionTime.Equal(&synced.LastTransitionTime) {
		t.Fatalf("ConfigSynced after an invalid file: %+v", c)
	}
}

// When the watcher overflows (changes were lost), the file is read and applied again at once.
func TestMirrorResyncsOnOverflow(t *testing.T) {
	env := shared.Get(t)
	key := newKey(t, env)
	dir := t.TempDir()
	writeConfig(t, dir, "a")
	w, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ws := &watches{w: w, dir: dir}
	if err := ws.update(); err != nil {
		t.Fatal(err)
	}
	// The loop sees no file events at all: only the overflow can tell it to look again.
	events, errs := make(chan fsnotify.Event), make(chan error, 1)
	m := &Mirror{Client: env.Client, Dir: dir, Key: key, Log: logr.Discard(), Resync: time.Hour}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.loop(ctx, ws, events, errs) }()
	defer func() { cancel(); <-done }()
	waitServers(t, env.Client, key, 30*time.Second, "a")

	writeConfig(t, dir, "b")
	time.Sleep(3 * debounce)
	waitServers(t, env.Client, key, time.Second, "a") // unseen so far
	errs <- fsnotify.ErrEventOverflow
	waitServers(t, env.Client, key, 10*time.Second, "b")
}

func TestRetryDelay(t *testing.T) {
	for n, want := range map[int]time.Duration{1: retryInitial, 2: 2 * retryInitial, 3: 4 * retryInitial, 20: retryMax} {
		got := retryDelay(n)
		if got < want*8/10 || got > want*12/10 {
			t.Errorf("retryDelay(%d) = %s, want %s ± 20%%", n, got, want)
		}
	}
}

// getProject reads the mirror's object.
func getProject(t *testing.T, c client.Client, key types.NamespacedName) *v1alpha1.ProjectMCP {
	t.Helper()
	obj := &v1alpha1.ProjectMCP{}
	if err := c.Get(context.Background(), key, obj); err != nil {
		t.Fatal(err)
	}
	return obj
}

// spec.project is the folder's path only when the mirror is told to publish it (dev, whose
// controller gives it to the servers as their root); otherwise it is empty, and a mirror that
// stops publishing it takes it away again (it owned the field).
func TestMirrorPublishesThePathOnlyWhenAsked(t *testing.T) {
	env := shared.Get(t)
	key := newKey(t, env)
	dir := t.TempDir()
	writeConfig(t, dir, "a")
	ctx := context.Background()
	for _, c := range []struct {
		publish bool
		missing bool // .dsh/mcp.json deleted: the empty spec the mirror applies then
		want    string
	}{
		{publish: false, want: ""},
		{publish: true, want: dir},
		{publish: false, want: ""},
		{publish: true, missing: true, want: dir},
		{publish: false, missing: true, want: ""},
	} {
		if c.missing {
			if err := os.RemoveAll(filepath.Join(dir, ".dsh")); err != nil {
				t.Fatal(err)
			}
		}
		m := &Mirror{Client: env.Client, Dir: dir, Key: key, Log: logr.Discard(), PublishPath: c.publish}
		if err := m.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		obj := getProject(t, env.Client, key)
		if obj.Spec.Project != c.want {
			t.Errorf("PublishPath %v (file missing: %v): spec.project %q, want %q", c.publish, c.missing, obj.Spec.Project, c.want)
		}
		if data, _ := json.Marshal(obj); !c.publish && strings.Contains(string(data), dir) {
			t.Errorf("the object names the folder without PublishPath: %s", obj.Spec.Project)
		}
	}
}

// mirrorEvents are the notes of the Warning events on the object.
func mirrorEvents(t *testing.T, c client.Client, key types.NamespacedName) []string {
	t.Helper()
	list := &eventsv1.EventList{}
	if err := c.List(context.Background(), list, client.InNamespace(key.Namespace)); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ev := range list.Items {
		if ev.Regarding.Name == key.Name {
			out = append(out, ev.Note)
		}
	}
	return out
}

// A .dsh/mcp.json, or a .dsh, that is a symlink out of the project folder is not read: the
// last good spec stays, ConfigSynced turns False and a Warning event names the link, neither
// saying where it points (a path of the user's machine); a link that stays in the folder is
// followed.
func TestMirrorRefusesSymlinksOutOfTheProject(t *testing.T) {
	env := shared.Get(t)
	key := newKey(t, env)
	base := t.TempDir()
	dir := filepath.Join(base, "repo")
	outside := filepath.Join(base, "private")
	writeConfig(t, dir, "a")
	writeConfig(t, outside, "stolen")
	m := &Mirror{Client: env.Client, Dir: dir, Key: key, Log: logr.Discard()}
	ctx := context.Background()
	if err := m.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	waitServers(t, env.Client, key, time.Second, "a")

	file := filepath.Join(dir, ".dsh", "mcp.json")
	refused := func(link string) {
		t.Helper()
		if err := m.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		obj := getProject(t, env.Client, key)
		if len(obj.Spec.Servers) != 1 || obj.Spec.Servers[0].Name != "a" {
			t.Fatalf("the last good spec was replaced: %+v", obj.Spec.Servers)
		}
		want := link + " is a symlink that leads out of the project folder, so .dsh/mcp.json is not read"
		c := meta.FindStatusCondition(obj.Status.Conditions, v1alpha1.ConditionConfigSynced)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonConfigInvalid || !strings.Contains(c.Message, want) {
			t.Fatalf("ConfigSynced %+v, want False with %q", c, want)
		}
		notes := mirrorEvents(t, env.Client, key)
		if !slices.ContainsFunc(notes, func(n string) bool { return strings.Contains(n, want) }) {
			t.Fatalf("no event with %q: %q", want, notes)
		}
		if data, _ := json.Marshal(obj); strings.Contains(string(data), base) || strings.Contains(strings.Join(notes, "\n"), base) {
			t.Fatalf("the object or an event names a path of this machine: %s %q", data, notes)
		}
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, ".dsh", "mcp.json"), file); err != nil {
		t.Fatal(err)
	}
	refused(".dsh/mcp.json")

	if err := os.RemoveAll(filepath.Join(dir, ".dsh")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join("..", "private", ".dsh"), filepath.Join(dir, ".dsh")); err != nil {
		t.Fatal(err)
	}
	refused(".dsh")

	// A link inside the folder (a ConfigMap's ..data, a file shared by two tools) is followed.
	if err := os.Remove(filepath.Join(dir, ".dsh")); err != nil {
		t.Fatal(err)
	}
	writeConfig(t, filepath.Join(dir, "config"), "b")
	if err := os.Symlink(filepath.Join("config", ".dsh"), filepath.Join(dir, ".dsh")); err != nil {
		t.Fatal(err)
	}
	if err := m.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	waitServers(t, env.Client, key, time.Second, "b")
}

// A file that disappears for a moment (an editor's unlink-then-write, a branch switch) does not
// retire the project's servers: the spec never goes empty while the file is back within the
// grace, and a file that stays gone does empty it.
func TestMirrorMissingForAMomentKeepsTheServers(t *testing.T) {
	env := shared.Get(t)
	key := newKey(t, env)
	dir := t.TempDir()
	writeConfig(t, dir, "a")
	run(t, &Mirror{Client: env.Client, Dir: dir, Key: key, Log: logr.Discard(), MissingGrace: time.Second})
	waitServers(t, env.Client, key, 30*time.Second, "a")

	emptied := make(chan struct{}, 1)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // every spec the object has meanwhile
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			obj := &v1alpha1.ProjectMCP{}
			if err := env.Client.Get(context.Background(), key, obj); err == nil && len(obj.Spec.Servers) == 0 {
				select {
				case emptied <- struct{}{}:
				default:
				}
			}
		}
	}()
	path := filepath.Join(dir, ".dsh", "mcp.json")
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	writeConfig(t, dir, "a")
	time.Sleep(2 * time.Second) // past the grace and a sync
	close(stop)
	<-done
	select {
	case <-emptied:
		t.Fatal("the spec went empty while the file was missing for 300 ms")
	default:
	}

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	waitServers(t, env.Client, key, 10*time.Second) // gone for good: no servers
}

// A client key the spec carries and the controller does not act on yet (a headersHelper, an
// oauth, a sandbox) is named in ConfigSynced's message, with its server, and the file is
// applied all the same.
func TestMirrorNamesKeysNotActedOn(t *testing.T) {
	env := shared.Get(t)
	key := newKey(t, env)
	dir := t.TempDir()
	file := filepath.Join(dir, ".dsh", "mcp.json")
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	src := `{"mcpServers": {"api": {"url": "https://h/mcp", "headersHelper": "get-headers", "oauth": {"clientId": "c"}}, "box": {"command": "x", "sandboxEnabled": true}}}`
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	var read []metav1.Condition
	m := &Mirror{Client: env.Client, Dir: dir, Key: key, Log: logr.Discard(), OnRead: func(c metav1.Condition) { read = append(read, c) }}
	if err := m.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	cond := meta.FindStatusCondition(getProject(t, env.Client, key).Status.Conditions, v1alpha1.ConditionConfigSynced)
	if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != v1alpha1.ReasonConfigApplied {
		t.Fatalf("ConfigSynced: %+v", cond)
	}
	if strings.Contains(cond.Message, "headersHelper") || strings.Contains(cond.Message, "oauth") || strings.Contains(cond.Message, "sandbox") { // the controller acts on all three
		t.Errorf("ConfigSynced's message names headersHelper, oauth or sandbox: %s", cond.Message)
	}
	if len(read) != 1 || read[0].Message != cond.Message {
		t.Errorf("OnRead saw %+v", read)
	}
}

// ${PROJECT_DIR} and ${USER_HOME} take the folder and the user's home when the controller is
// on this machine (PublishPath, as projectmcp dev runs it); for any other controller the
// file naming them is refused, the condition naming the server, the field and the variable,
// never a path of this machine.
func TestMirrorExpandsPlaceVariables(t *testing.T) {
	env := shared.Get(t)
	home := t.TempDir()
	t.Setenv("HOME", home)
	dir := t.TempDir()
	file := filepath.Join(dir, ".dsh", "mcp.json")
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	src := `{"mcpServers": {"fs": {"command": "fs-server", "args": ["${PROJECT_DIR}", "${USER_HOME}/notes", "${TOKEN}"]}}}`
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	t.Run("local", func(t *testing.T) {
		key := placeKey(t, env, "place-local")
		if err := (&Mirror{Client: env.Client, Dir: dir, Key: key, Log: logr.Discard(), PublishPath: true}).Sync(ctx); err != nil {
			t.Fatal(err)
		}
		obj := getProject(t, env.Client, key)
		want := []string{dir, home + "/notes", "${TOKEN}"}
		if len(obj.Spec.Servers) != 1 || !slices.Equal(obj.Spec.Servers[0].Stdio.Args, want) {
			t.Fatalf("spec.servers %+v, want args %q", obj.Spec.Servers, want)
		}
	})
	t.Run("remote", func(t *testing.T) { mirrorRefusesPlace(t, env, dir, home) })
}

// mirrorRefusesPlace checks the place variables refused by a mirror for another machine.
func mirrorRefusesPlace(t *testing.T, env *testenv.Env, dir, home string) {
	var read []metav1.Condition
	m := &Mirror{Client: env.Client, Dir: dir, Key: placeKey(t, env, "place-remote"), Log: logr.Discard(),
		OnRead: func(c metav1.Condition) { read = append(read, c) }}
	if err := m.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(read) != 1 || read[0].Status != metav1.ConditionFalse || read[0].Reason != v1alpha1.ReasonConfigInvalid {
		t.Fatalf("ConfigSynced: %+v", read)
	}
	msg := read[0].Message
	for _, w := range []string{`server "fs": its args[0] refers to ${PROJECT_DIR}`, `server "fs": its args[1] refers to ${USER_HOME}`} {
		if !strings.Contains(msg, w) {
			t.Errorf("ConfigSynced's message lacks %q: %s", w, msg)
		}
	}
	if strings.Contains(msg, dir) || strings.Contains(msg, home) {
		t.Errorf("the condition names a path of this machine: %s", msg)
	}
}

// placeKey is a new object's key, removed when the test ends.
func placeKey(t *testing.T, env *testenv.Env, name string) types.NamespacedName {
	key := types.NamespacedName{Namespace: "default", Name: name}
	env.DeleteOnCleanup(t, &v1alpha1.ProjectMCP{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace}})
	return key
}

// share "worktree" keys connections by the sessions' folders: a mirror for projectmcp dev
// applies it, and one for another machine refuses the file naming the server, its last good
// spec staying in effect.
func TestMirrorRefusesWorktreeForAnotherMachine(t *testing.T) {
	env := shared.Get(t)
	dir := t.TempDir()
	file := filepath.Join(dir, ".dsh", "mcp.json")
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(share string) {
		src := `{"mcpServers": {"build": {"command": "make-mcp", "share": "` + share + `"}}}`
		if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	write("worktree")
	local := placeKey(t, env, "worktree-local")
	if err := (&Mirror{Client: env.Client, Dir: dir, Key: local, Log: logr.Discard(), PublishPath: true}).Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if s := getProject(t, env.Client, local).Spec.Servers; len(s) != 1 || s[0].Share != v1alpha1.ShareWorktree {
		t.Fatalf("dev's mirror: spec.servers %+v, want build shared per worktree", s)
	}

	var read []metav1.Condition
	remote := &Mirror{Client: env.Client, Dir: dir, Key: placeKey(t, env, "worktree-remote"), Log: logr.Discard(),
		OnRead: func(c metav1.Condition) { read = append(read, c) }}
	write("session")
	if err := remote.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	write("worktree")
	if err := remote.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if len(read) != 2 || read[1].Status != metav1.ConditionFalse || !strings.Contains(read[1].Message, `server "build": share "worktree" is for projectmcp dev alone`) {
		t.Fatalf("ConfigSynced: %+v", read)
	}
	if s := getProject(t, env.Client, remote.Key).Spec.Servers; len(s) != 1 || s[0].Share != v1alpha1.ShareSession {
		t.Fatalf("the last good spec is not kept: %+v", s)
	}
}
