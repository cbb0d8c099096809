package conn

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/policy"
	"github.com/dsh-dev/projectmcp/internal/proctest"
	"github.com/dsh-dev/projectmcp/test/fixture"
)

// serverEnviron is the whole environment of a connected fixture, by name.
func serverEnviron(t *testing.T, c *Conn) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, kv := range strings.Split(call(t, c, "getenv", map[string]any{"name": ""}), "\n") {
		name, value, _ := strings.Cut(kv, "=")
		env[name] = value
	}
	return env
}

// A stdio server gets the configured env, PATH, LANG, TMPDIR, the --server-env names and a
// HOME of its own; nothing else of the controller's environment (its secrets, its
// ServiceAccount's address, its KUBECONFIG). Its HOME is removed when it ends.
func TestStdioServerEnvironmentIsClean(t *testing.T) {
	t.Setenv("PROJECTMCP_TEST_CONTROLLER_SECRET", "controller-only")
	t.Setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
	t.Setenv("LANG", "C.UTF-8")
	t.Setenv("TMPDIR", t.TempDir())
	t.Setenv("PROJECTMCP_TEST_PASSED", "passed")
	t.Setenv("PROJECTMCP_TEST_OVERRIDDEN", "controller's")
	controllerHome, _ := os.UserHomeDir()

	srv := stdioServer("env")
	srv.Stdio.Env = append(srv.Stdio.Env, v1alpha1.NameValue{Name: "CONFIGURED", Value: "yes"},
		v1alpha1.NameValue{Name: "PROJECTMCP_TEST_OVERRIDDEN", Value: "configured"})
	c := start(t, Options{Server: srv, Settings: Settings{Isolation: policy.Isolation{PassEnv: []string{"PROJECTMCP_TEST_PASSED", "PROJECTMCP_TEST_OVERRIDDEN", "UNSET_IN_CONTROLLER"}}}})
	waitPhase(t, c, v1alpha1.PhaseReady)
	env := serverEnviron(t, c)

	want := map[string]string{
		"PATH": os.Getenv("PATH"), "LANG": "C.UTF-8", "TMPDIR": os.Getenv("TMPDIR"),
		"PROJECTMCP_TEST_PASSED": "passed", "PROJECTMCP_TEST_OVERRIDDEN": "configured",
		"CONFIGURED": "yes", fixture.EnvVar: "1",
	}
	for name, value := range want {
		if env[name] != value {
			t.Errorf("the server's %s = %q, want %q", name, env[name], value)
		}
	}
	home := env["HOME"]
	for name := range env {
		if _, ok := want[name]; !ok && name != "HOME" {
			t.Errorf("the server sees %s, which is the controller's own (its whole environment: %v)", name, slices.Sorted(maps.Keys(env)))
		}
	}
	if home == "" || home == controllerHome || !filepath.IsAbs(home) {
		t.Fatalf("the server's HOME = %q, want a directory of its own (the controller's is %q)", home, controllerHome)
	}
	if fi, err := os.Stat(home); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Fatalf("the server's HOME %s: %v %v, want a directory with mode 0700", home, fi, err)
	}
	c.Destroy()
	if _, err := os.Stat(home); !os.IsNotExist(err) {
		t.Fatalf("the server's HOME %s outlives it: %v", home, err)
	}
}

// Each server process (each connect) gets its own HOME; a fixed Home is shared and kept.
func TestStdioServerHomes(t *testing.T) {
	a := start(t, Options{Server: stdioServer("a")})
	b := start(t, Options{Server: stdioServer("b")})
	waitPhase(t, a, v1alpha1.PhaseReady)
	waitPhase(t, b, v1alpha1.PhaseReady)
	if ha, hb := call(t, a, "getenv", map[string]any{"name": "HOME"}), call(t, b, "getenv", map[string]any{"name": "HOME"}); ha == hb {
		t.Fatalf("two servers share HOME %s", ha)
	}

	shared := t.TempDir()
	s := start(t, Options{Server: stdioServer("s"), Settings: Settings{Isolation: policy.Isolation{Home: shared}}})
	waitPhase(t, s, v1alpha1.PhaseReady)
	if got := call(t, s, "getenv", map[string]any{"name": "HOME"}); got != shared {
		t.Fatalf("HOME = %q, want the configured %q", got, shared)
	}
	s.Destroy()
	if _, err := os.Stat(shared); err != nil {
		t.Fatalf("a configured Home was removed: %v", err)
	}
}

// With a Credential the server runs as that user and group, and its HOME belongs to it.
// Needs root (as the controller does for it).
func TestStdioServerCredential(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running a server as another user needs root")
	}
	// The fixture is this test binary, in a directory only root may enter: the other user
	// runs a copy of it.
	exe := copyExecutable(t)
	const nobody = 65534
	srv := stdioServer("cred")
	srv.Stdio.Command = exe
	c := start(t, Options{Server: srv, Settings: Settings{Isolation: policy.Isolation{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}}})
	s := waitPhase(t, c, v1alpha1.PhaseReady)
	uid, gid := proctest.IDs(s.PID)
	if uid != nobody || gid != nobody {
		t.Fatalf("the server runs as uid %d gid %d, want %d", uid, gid, nobody)
	}
	home := call(t, c, "getenv", map[string]any{"name": "HOME"})
	var st syscall.Stat_t
	if err := syscall.Stat(home, &st); err != nil || st.Uid != nobody {
		t.Fatalf("HOME %s: owner %d (%v), want %d", home, st.Uid, err, nobody)
	}
}

// copyExecutable copies the test binary into a directory any user may enter and run it from.
func copyExecutable(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "projectmcp-exe-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "fixture")
	if err := os.WriteFile(exe, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return exe
}
