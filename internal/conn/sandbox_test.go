package conn

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/policy"
	"github.com/dsh-dev/projectmcp/internal/proctest"
	"github.com/dsh-dev/projectmcp/internal/sandbox"
	"github.com/dsh-dev/projectmcp/internal/testutil"
	"github.com/dsh-dev/projectmcp/test/fixture"
)

// sandboxed is an Isolation with the sandbox this kernel allows, uids from r, hiding hide;
// the test skips, naming what is missing, where the namespaces' layers cannot be had.
func sandboxed(t *testing.T, r *sandbox.Range, hide ...string) policy.Isolation {
	return sandboxedWith(t, r, sandbox.Limits{}, hide...)
}

// sandboxedWith is sandboxed, each server held to limits.
func sandboxedWith(t *testing.T, r *sandbox.Range, limits sandbox.Limits, hide ...string) policy.Isolation {
	t.Helper()
	f := sandbox.Probe(true, r != nil)
	layers := sandbox.Decide(f)
	for _, l := range []sandbox.Layer{sandbox.LayerPID, sandbox.LayerMount} {
		if !sandbox.InForce(layers, l) {
			t.Skipf("the sandbox's %s layer is not in force here: %s", l, sandbox.Summary(layers))
		}
	}
	if r != nil && !sandbox.InForce(layers, sandbox.LayerUID) {
		t.Skipf("no uid per project here: %s", sandbox.Summary(layers))
	}
	return policy.Isolation{Sandbox: sandbox.New(f, r, nil, hide, limits)}
}

// tryRead calls the fixture's try_read.
func tryRead(t *testing.T, c *Conn) fixture.TryReadReport {
	t.Helper()
	var r fixture.TryReadReport
	if err := json.Unmarshal([]byte(call(t, c, "try_read", nil)), &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// A sandboxed server of one project cannot read another project's server's environment (its
// secrets) nor its HOME, nor the controller's kubeconfig and token, nor write outside its
// HOME and its /tmp; each project's servers run as a uid of their own, and HOME is theirs.
// Fails on the old code: every server ran as the one --server-uid in the controller's /proc
// and filesystem, and read all of it.
func TestSandboxKeepsProjectsApart(t *testing.T) {
	exe := copyExecutable(t) // the mapped uids may not enter the test binary's directory
	// The controller's token (in /var/run/secrets/kubernetes.io/serviceaccount) and its
	// kubeconfig, outside /tmp (which the sandbox replaces whole), readable by all as a
	// projected token is by default.
	secrets := outsideTmp(t)
	token := filepath.Join(secrets, "token")
	kubeconfig := filepath.Join(outsideTmp(t), "kubeconfig")
	for _, f := range []string{token, kubeconfig} {
		if err := os.WriteFile(f, []byte("the controller's"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	shared := outsideTmp(t) // a directory every uid may write, outside any HOME
	if err := os.Chmod(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	r := &sandbox.Range{First: 300000, Last: 300999}
	iso := sandboxed(t, r, secrets, kubeconfig)
	if os.Getuid() != 0 {
		t.Skip("mapping servers to other uids needs root")
	}

	victim := stdioServer("victim", "--fill-home")
	victim.Stdio.Command = exe
	victim.Stdio.Env = append(victim.Stdio.Env, v1alpha1.NameValue{Name: "VICTIM_SECRET", Value: "s3cret"})
	var logs logSink
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(logs.all())
		}
	})
	b := start(t, Options{Project: "team-b/shop", Server: victim, Settings: Settings{Isolation: iso}, Log: logs.logger()})
	vs := waitPhase(t, b, v1alpha1.PhaseReady)
	victimHome := call(t, b, "getenv", map[string]any{"name": "HOME"})

	hostile := stdioServer("hostile", "--try-read", strings.Join([]string{
		fmt.Sprintf("/proc/%d/environ", vs.PID), filepath.Join(victimHome, ".cache/fixture/entry"), token, kubeconfig,
	}, ","), "--try-write", "$HOME,/tmp,"+shared)
	hostile.Stdio.Command = exe
	a := start(t, Options{Project: "team-a/web", Server: hostile, Settings: Settings{Isolation: iso}, Log: logs.logger()})
	as := waitPhase(t, a, v1alpha1.PhaseReady)

	got := tryRead(t, a)
	for path, outcome := range got.Paths {
		if outcome == fixture.Readable {
			t.Errorf("the sandboxed server read %s", path)
		}
	}
	for dir, want := range map[string]bool{"$HOME": true, "/tmp": true, shared: false} {
		if written := got.Writes[dir] == fixture.Written; written != want {
			t.Errorf("writing in %s: %q, want written %v", dir, got.Writes[dir], want)
		}
	}
	if _, err := os.Stat(filepath.Join(shared, "fixture-was-here")); err == nil {
		t.Error("the sandboxed server wrote outside its HOME")
	}

	uidA, _ := proctest.IDs(as.PID)
	uidB, _ := proctest.IDs(vs.PID)
	if uidA == uidB || uint32(uidA) < r.First || uint32(uidA) > r.Last || uint32(uidB) < r.First || uint32(uidB) > r.Last {
		t.Errorf("the projects' servers run as uids %d and %d, want two of %d-%d", uidA, uidB, r.First, r.Last)
	}
	if !strings.Contains(as.Sandbox, fmt.Sprintf("uid %d", uidA)) || !strings.Contains(as.Sandbox, "pid") || !strings.Contains(as.Sandbox, "mount") {
		t.Errorf("the snapshot's sandbox %q, want its uid and the pid and mount layers named", as.Sandbox)
	}
}

// outsideTmp is a directory any user may enter, outside /tmp.
func outsideTmp(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "projectmcp-test-")
	if err != nil {
		t.Skipf("no directory outside /tmp: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// A sandboxed server cannot fork past its process limit, and one allocating past its memory
// limit dies alone: its status says OOMKilled, it is rebuilt within its reconnect budget, and
// a bystander server is untouched. Fails on old code: yes, nothing bounded a server but the
// pod.
func TestSandboxLimits(t *testing.T) {
	const memory = 96 << 20
	iso := sandboxedWith(t, nil, sandbox.Limits{Memory: memory, Pids: 48})
	if !sandbox.InForce(iso.Sandbox.Layers, sandbox.LayerLimits) {
		t.Skipf("no limits here: %s", sandbox.Summary(iso.Sandbox.Layers))
	}
	var logs logSink
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(logs.all())
		}
	})
	bystander := start(t, Options{Project: "ns/b", Server: stdioServer("bystander"), Settings: Settings{Isolation: iso}})
	bs := waitPhase(t, bystander, v1alpha1.PhaseReady)

	hog := start(t, Options{Project: "ns/a", Server: stdioServer("hog", "--try-limits"), Settings: Settings{Isolation: iso}, Log: logs.logger(),
		Policy: Policy{MaxAttempts: 3, InitialBackoff: 100 * time.Millisecond, MaxBackoff: 200 * time.Millisecond}})
	first := waitPhase(t, hog, v1alpha1.PhaseReady)

	if got := call(t, hog, "spawn", map[string]any{"count": 100}); !strings.Contains(got, "resource temporarily unavailable") {
		t.Errorf("forking 100 children under a limit of 48: %q, want refused", got)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if res, err := hog.Call(ctx, &mcp.CallToolParams{Name: "alloc", Arguments: map[string]any{"mib": 4 * memory >> 20}}, nil); err == nil && !res.IsError {
		t.Fatalf("allocating 4 times the memory limit succeeded: %+v", res)
	}
	testutil.Eventually(t, 15*time.Second, "the hog's status to say OOMKilled", func() bool {
		return strings.Contains(hog.Snapshot().LastError, "OOMKilled")
	})
	again := waitPhase(t, hog, v1alpha1.PhaseReady)
	if again.PID == first.PID {
		t.Fatal("the hog was not rebuilt")
	}
	if s := bystander.Snapshot(); s.Phase != v1alpha1.PhaseReady || s.PID != bs.PID {
		t.Fatalf("the bystander was touched: %s, pid %d (was %d)", s.Phase, s.PID, bs.PID)
	}
	call(t, bystander, "echo", map[string]any{"text": "still here"})
}

// A server's own "sandbox" settings hold inside its sandbox: it writes where allowWrite says
// (and nowhere under a denyWrite path there), and reads nothing of a denyRead path; with
// "sandbox": false it runs outside, and its status says so.
func TestSandboxServerSettings(t *testing.T) {
	iso := sandboxed(t, nil)
	open := outsideTmp(t)
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	frozen := filepath.Join(open, "frozen")
	secret := filepath.Join(outsideTmp(t), "secret")
	if err := os.Mkdir(frozen, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(secret, []byte("the user's"), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := stdioServer("own", "--try-read", secret, "--try-write", open+","+frozen)
	srv.Sandbox = &v1alpha1.Sandbox{Filesystem: &v1alpha1.SandboxFilesystem{AllowWrite: []string{open}, DenyWrite: []string{frozen}, DenyRead: []string{secret}}}
	c := start(t, Options{Project: "ns/p", Server: srv, Settings: Settings{Isolation: iso}})
	waitPhase(t, c, v1alpha1.PhaseReady)
	got := tryRead(t, c)
	if got.Paths[secret] == fixture.Readable {
		t.Errorf("the server read %s, which its denyRead names", secret)
	}
	if got.Writes[open] != fixture.Written || got.Writes[frozen] == fixture.Written {
		t.Errorf("writes: %v, want %s written (allowWrite) and not %s (denyWrite)", got.Writes, open, frozen)
	}

	off := stdioServer("off", "--try-write", frozen)
	off.Sandbox = &v1alpha1.Sandbox{Disabled: true}
	o := start(t, Options{Project: "ns/p", Server: off, Settings: Settings{Isolation: iso}})
	s := waitPhase(t, o, v1alpha1.PhaseReady)
	if !strings.HasPrefix(s.Sandbox, "off") || tryRead(t, o).Writes[frozen] != fixture.Written {
		t.Errorf(`a server with "sandbox": false: status %q, writes %v; want it outside the sandbox`, s.Sandbox, tryRead(t, o).Writes)
	}

	bad := stdioServer("bad")
	bad.Sandbox = &v1alpha1.Sandbox{Filesystem: &v1alpha1.SandboxFilesystem{DenyRead: []string{".ssh"}}}
	b := start(t, Options{Project: "ns/p", Server: bad, Settings: Settings{Isolation: iso}})
	if s := waitPhase(t, b, v1alpha1.PhaseFailed); !strings.Contains(s.LastError, `".ssh"`) {
		t.Errorf("a relative denyRead path: %q, want it refused by name", s.LastError)
	}
}

// greeter is a loopback listener of the controller's side that says hello to whoever comes.
func greeter(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("hello\n"))
			_ = c.Close()
		}
	}()
	return ln.Addr().String()
}

// A sandboxed server has a network of its own: it reaches nothing directly, and through the
// controller's proxy (HTTPS_PROXY) only what the egress policy and its own domains admit: the
// loopback port an --allow-url names, not another one. Fails on old code: yes, the server
// reached both ports directly.
func TestSandboxNetwork(t *testing.T) {
	allowed, refused := greeter(t), greeter(t)
	iso := sandboxed(t, nil)
	if !sandbox.InForce(iso.Sandbox.Layers, sandbox.LayerNetwork) {
		t.Skipf("no network namespace here: %s", sandbox.Summary(iso.Sandbox.Layers))
	}
	pattern, err := policy.ParseURLPattern("https://" + allowed)
	if err != nil {
		t.Fatal(err)
	}
	iso.Egress = &policy.Egress{Allow: []policy.URLPattern{pattern}}
	c := start(t, Options{Project: "ns/p", Server: stdioServer("net", "--try-limits"), Settings: Settings{Isolation: iso}})
	waitPhase(t, c, v1alpha1.PhaseReady)

	got := call(t, c, "dial", map[string]any{"addr": allowed})
	if !strings.Contains(got, "proxy: ok hello") || strings.Contains(got, "direct: ok") {
		t.Errorf("the allowed port: %q, want it through the proxy alone", got)
	}
	got = call(t, c, "dial", map[string]any{"addr": refused})
	if !strings.Contains(got, "403") || strings.Contains(got, "ok hello") {
		t.Errorf("a port no --allow-url names: %q, want the proxy's 403 and no way around it", got)
	}

	denied := stdioServer("denied", "--try-limits")
	denied.Sandbox = &v1alpha1.Sandbox{Network: &v1alpha1.SandboxNetwork{DeniedDomains: []string{"127.0.0.1"}}}
	d := start(t, Options{Project: "ns/p", Server: denied, Settings: Settings{Isolation: iso}})
	waitPhase(t, d, v1alpha1.PhaseReady)
	if got := call(t, d, "dial", map[string]any{"addr": allowed}); !strings.Contains(got, "deniedDomains") {
		t.Errorf("a host the server's deniedDomains names: %q, want refused", got)
	}
}
