package policy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// removeHomeEnv makes the test binary remove the HOME it names, as a controller does when the
// server ends: "reclaim" with the HOME's removal function, "plain" with os.RemoveAll alone.
const removeHomeEnv = "PROJECTMCP_TEST_REMOVE_HOME"

// TestMain runs the test binary as removeHomeMain when removeHomeEnv is set.
func TestMain(m *testing.M) {
	if how := os.Getenv(removeHomeEnv); how != "" {
		removeHomeMain(how)
	}
	os.Exit(m.Run())
}

// removeHomeMain is the test binary run with removeHomeEnv: it exits 0 once the HOME is gone.
func removeHomeMain(how string) {
	mode, dir, _ := strings.Cut(how, ":")
	root, err := os.OpenRoot(filepath.Dir(dir))
	if err != nil {
		os.Exit(2)
	}
	if mode == "reclaim" {
		_ = reclaim(root, filepath.Base(dir))
	}
	_ = root.RemoveAll(filepath.Base(dir))
	if _, err := os.Lstat(dir); err == nil {
		os.Exit(1)
	}
	os.Exit(0)
}

// A server run as another user leaves directories in its HOME that only it may write to (a
// package cache, some of it read-only); the controller, which has CAP_CHOWN but not
// CAP_DAC_OVERRIDE, removes them all once the server ended. The HOME lies in a directory of the
// controller's (mode 0711), so the server cannot swap its HOME's entry for a link while the
// controller works on it. Plain removal, under the same capabilities, fails: the test does take
// CAP_DAC_OVERRIDE away.
func TestServerHomeRemovedWithoutDACOverride(t *testing.T) {
	setpriv, err := exec.LookPath("setpriv")
	if err != nil || os.Geteuid() != 0 {
		t.Skip("needs root and setpriv to remove a HOME with fewer capabilities")
	}
	const nobody = 65534
	iso := &Isolation{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	for _, tc := range []struct {
		how    string
		remove bool
	}{{"reclaim", true}, {"plain", false}} {
		home, remove, err := iso.MakeHome("cache")
		if err != nil {
			t.Fatal(err)
		}
		parent, err := os.Stat(filepath.Dir(home))
		if err != nil || parent.Mode().Perm() != 0o711 || parent.Sys().(*syscall.Stat_t).Uid != 0 {
			t.Fatalf("the HOME's parent %s: %v %v, want the controller's, mode 0711", filepath.Dir(home), parent, err)
		}
		fillAs(t, home, nobody)
		cmd := exec.Command(setpriv, "--bounding-set", "-all,+chown", "--", os.Args[0])
		cmd.Env = append(os.Environ(), removeHomeEnv+"="+tc.how+":"+home)
		out, err := cmd.CombinedOutput()
		if removed := err == nil; removed != tc.remove {
			t.Errorf("%s: HOME removed %v (%v %s), want %v", tc.how, removed, err, out, tc.remove)
		}
		remove() // what the plain removal left, and the HOMEs' directory once empty
		if _, err := os.Lstat(filepath.Dir(home)); !os.IsNotExist(err) {
			t.Errorf("%s: the HOMEs' directory outlives its last HOME: %v", tc.how, err)
		}
	}
}

// fillAs leaves in home what a package runner's cache would, owned by uid: directories of mode
// 0700 and an innermost one made read-only.
func fillAs(t *testing.T, home string, uid int) {
	t.Helper()
	inner := filepath.Join(home, ".cache", "pkg", "v1")
	if err := os.MkdirAll(inner, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(inner, "blob"), []byte("x"), 0o400); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{inner, filepath.Join(inner, "blob"), filepath.Dir(inner), filepath.Join(home, ".cache")} {
		if err := os.Lchown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(inner, 0o500); err != nil {
		t.Fatal(err)
	}
}

// A server run as another user may replace the entry of the HOMEs' directory in a temporary
// directory that every user may write to (a Kubernetes emptyDir has no sticky bit) with a link
// to a directory of its own, holding a link named as its HOME that points anywhere. Taking the
// HOME back and removing it then touches nothing outside the directory the controller made:
// the victim keeps its mode and its entries, and the real HOME goes.
func TestServerHomeSwapLeadsNowhere(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to hand a HOME to another user")
	}
	const nobody = 65534
	iso := &Isolation{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	home, remove, err := iso.MakeHome("swap")
	if err != nil {
		t.Fatal(err)
	}
	victim := t.TempDir()
	if err := os.Mkdir(filepath.Join(victim, "keep"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(victim, 0o755); err != nil {
		t.Fatal(err)
	}
	// The server's moves: the HOMEs' directory aside, a link in its place to a directory of
	// its own, in which its HOME's name links to the victim.
	homes, moved, own := filepath.Dir(home), filepath.Dir(home)+"-moved", t.TempDir()
	if err := os.Rename(homes, moved); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(homes); _ = os.RemoveAll(moved) })
	if err := os.Symlink(own, homes); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(own, filepath.Base(home))); err != nil {
		t.Fatal(err)
	}
	remove()
	for _, p := range []string{victim, filepath.Join(victim, "keep")} {
		st, err := os.Stat(p)
		if err != nil || st.Mode().Perm() != 0o755 {
			t.Errorf("%s after the HOME's removal: %v %v, want it untouched (0755)", p, st, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(moved, filepath.Base(home))); !os.IsNotExist(err) {
		t.Errorf("the real HOME outlived its removal: %v", err)
	}
}
