//go:build faults

package faults

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/testutil"
	"github.com/dsh-dev/projectmcp/test/deploy"
	"github.com/dsh-dev/projectmcp/test/fixture"
)

// serverUID is the uid the chart runs stdio servers as.
const serverUID = "65532"

// chartCapabilities are the capabilities the chart's controller keeps, as setpriv's
// --bounding-set names them: all others dropped.
func chartCapabilities() string {
	names := []string{"-all"}
	for _, c := range deploy.ServerCapabilities {
		names = append(names, "+"+strings.ToLower(string(c)))
	}
	return strings.Join(names, ",")
}

// tokenRead runs a stdio server that tries to read the controller's ServiceAccount token (a
// root-owned 0400 file standing for the projected token) and the controller's
// /proc/<pid>/environ: first under the suite's controller, which runs its servers as its own
// user (as the chart did before it set --server-uid), where both are readable; then under a
// controller run as the chart runs it, where neither is, and the server's environment holds
// nothing of the pod's.
func (s *suite) tokenRead(t *testing.T) {
	s.fault(t, row{fault: "token read: a stdio server reads the controller's token and environment",
		sees:             "nothing: the server, as --server-uid, gets permission denied on the token and on the controller's /proc/<pid>/environ, and sees no KUBERNETES_* variable",
		guaranteed:       "the controller keeps CAP_SETUID, CAP_SETGID, CAP_KILL and CAP_CHOWN alone; servers run as another uid with no capability; their HOME is removed after them",
		bystanderMayFail: true, // the controller is restarted twice
	}, func(t *testing.T, r *row) {
		setpriv, err := exec.LookPath("setpriv")
		if err != nil || os.Geteuid() != 0 {
			t.Fatal("this fault needs root and setpriv (util-linux) to run the controller as the chart does")
		}
		token := standInToken(t)
		s.openToServers(t)

		before, oldEnviron := s.tryRead(t, "tokenold", token), environOf(s.ctl)
		if before.Paths[token] != fixture.Readable || before.Paths[oldEnviron] != fixture.Readable {
			t.Errorf("as the controller's own user, the server should read the token and the environ (else this check proves nothing): %+v", before)
		}

		// As the chart's container runs it: uid 0 with its capabilities alone, and
		// allowPrivilegeEscalation: false (no_new_privs).
		s.restartController(t, controllerRun{wrap: []string{setpriv, "--no-new-privs", "--bounding-set", chartCapabilities(), "--"},
			env:  []string{"KUBERNETES_SERVICE_HOST=127.0.0.1", "KUBERNETES_SERVICE_PORT=443"},
			args: []string{"--server-uid", serverUID, "--server-gid", serverUID, "--allow-command", s.fixture}})
		after, environ := s.tryRead(t, "tokenapart", token), environOf(s.ctl)
		if fmt.Sprint(after.UID) != serverUID || fmt.Sprint(after.GID) != serverUID {
			t.Errorf("the server runs as %d:%d, want %s:%s", after.UID, after.GID, serverUID, serverUID)
		}
		for _, path := range []string{token, environ} {
			if got := after.Paths[path]; !strings.Contains(got, "permission denied") {
				t.Errorf("as --server-uid, reading %s gave %q, want permission denied", path, got)
			}
		}
		r.figure("as the controller's uid: token %s, environ %s; as uid %s: token %s, environ %s", outcome(before.Paths[token]),
			outcome(before.Paths[oldEnviron]), serverUID, outcome(after.Paths[token]), outcome(after.Paths[environ]))
		testutil.Eventually(t, 30*time.Second, "the servers' HOMEs removed", func() bool { return len(homes(t, "tokenapart")) == 0 })
		s.restartController(t, controllerRun{})
		s.warm(t)
	})
}

// warm waits, after the controller was restarted, until the bystander's calls go through again
// on both its servers and the controller's goroutines hold still: the next fault's baseline is
// then that of a controller at work, not of one still starting.
func (s *suite) warm(t *testing.T) {
	t.Helper()
	s.load.mu.Lock()
	from := s.load.w.ok
	s.load.mu.Unlock()
	testutil.Eventually(t, 30*time.Second, "the bystander calling again", func() bool {
		s.load.mu.Lock()
		defer s.load.mu.Unlock()
		return s.load.w.ok >= from+4 // each of its two tools twice
	})
	last := s.ctl.usage(t, false).goroutines
	testutil.Eventually(t, 30*time.Second, "the controller's goroutines steady", func() bool {
		time.Sleep(time.Second)
		now := s.ctl.usage(t, false).goroutines
		steady := now-last <= 2 && last-now <= 2
		last = now
		return steady
	})
}

// tryRead runs a project whose one stdio server tries to read token and the controller's
// environ, checks the server's environment holds nothing of the pod's, and removes the project.
func (s *suite) tryRead(t *testing.T, name, token string) fixture.TryReadReport {
	t.Helper()
	key := s.project(t, name, v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{
		s.stdio(name, "--try-read", token+","+environOf(s.ctl), "--fill-home")}}, true)
	cs := s.mustConnect(t, key, "2025-11-25", nil)
	var report fixture.TryReadReport
	out, err := call(cs, 10*time.Second, name+"__try_read", nil)
	if err == nil {
		err = json.Unmarshal([]byte(out), &report)
	}
	if err != nil {
		t.Fatalf("try_read: %v (%q)", err, out)
	}
	env, err := call(cs, 10*time.Second, name+"__getenv", map[string]any{"name": ""})
	if err != nil {
		t.Fatal(err)
	}
	home := ""
	for _, kv := range strings.Split(env, "\n") {
		key, value, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(key, "KUBERNETES_") || strings.Contains(strings.ToUpper(key), "TOKEN") {
			t.Errorf("the server's environment holds %s", kv)
		}
		if key == "HOME" {
			home = value
		}
	}
	if !slices.Contains(homes(t, name), home) {
		t.Errorf("the server's HOME %q is not among the HOMEs the fault looks for: %q", home, homes(t, name))
	}
	_ = cs.Close()
	s.remove(t, key)
	return report
}

// restartController replaces the suite's controller with one run so.
func (s *suite) restartController(t *testing.T, run controllerRun) {
	t.Helper()
	s.ctl.stop(t)
	s.ctl = s.startControllerAs(t, run)
}

// standInToken is a root-owned 0400 file holding a token, in a directory any user may enter:
// what the kubelet mounts as the controller's projected ServiceAccount token.
func standInToken(t *testing.T) string {
	t.Helper()
	dir := openDir(t)
	path := filepath.Join(dir, "token")
	if err := os.WriteFile(path, []byte("stand-in ServiceAccount token"), 0o400); err != nil {
		t.Fatal(err)
	}
	return path
}

// openDir is a directory of the machine's temporary one that every user may enter and list.
func openDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "projectmcp-faults-token-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// openToServers lets another user run the suite's fixture binary (and the bystander's servers
// go on under --server-uid): the directories down to it become searchable, not listable, for
// the fault's duration.
func (s *suite) openToServers(t *testing.T) {
	t.Helper()
	for _, dir := range []string{filepath.Dir(s.dir), s.dir} {
		info, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, info.Mode().Perm()|0o711); err != nil {
			t.Fatal(err)
		}
		mode := info.Mode().Perm()
		s.undo = append(s.undo, func() { _ = os.Chmod(dir, mode) })
	}
}

// environOf is the controller's /proc/<pid>/environ (setpriv execs the controller in place).
func environOf(c *controller) string {
	return fmt.Sprintf("/proc/%d/environ", c.cmd.Process.Pid)
}

// homes are the HOME directories left of the server name.
func homes(t *testing.T, server string) []string {
	t.Helper()
	var found []string
	for _, pattern := range []string{"projectmcp-home-" + server + "-*", filepath.Join("projectmcp-homes-*", "projectmcp-home-"+server+"-*")} {
		matches, err := filepath.Glob(filepath.Join(os.TempDir(), pattern))
		if err != nil {
			t.Fatal(err)
		}
		found = append(found, matches...)
	}
	return found
}

// outcome is a try_read value without the path: "readable" or the error's cause.
func outcome(v string) string {
	if i := strings.LastIndex(v, ": "); i >= 0 {
		return v[i+2:]
	}
	return v
}
