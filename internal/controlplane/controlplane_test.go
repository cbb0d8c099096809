package controlplane

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// The locking, atomic installation and cleanup around a fill, with a fake fill that writes two
// small scripts in place of the real binaries: fast enough for every `make test`. The real
// download-or-build is exercised by install_test.go (make test-install).

const testVersion = "v1.37.2"

// Child processes of TestConcurrentFirstRuns run Ensure with the fake fill (see TestMain).
const (
	childEnv   = "CONTROLPLANE_TEST_CHILD" // the cache directory
	countEnv   = "CONTROLPLANE_TEST_COUNT" // a file each fill appends a line to
	fillDelay  = 500 * time.Millisecond
	childCount = 3
)

func TestMain(m *testing.M) {
	if root := os.Getenv(childEnv); root != "" {
		dir, err := Ensure(context.Background(), Options{CacheDir: root, KubernetesVersion: testVersion, Progress: os.Stderr,
			fill: fakeFill(os.Getenv(countEnv), fillDelay, testVersion)})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(dir)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// fakeFill writes kube-apiserver and etcd scripts that answer --version as the real ones do
// (saying `says` as the Kubernetes version), after a delay that keeps the lock held long
// enough for rivals to queue; each call appends a line to count.
func fakeFill(count string, delay time.Duration, says string) func(context.Context, string, string, *reporter) error {
	return func(ctx context.Context, version, dir string, r *reporter) error {
		if count != "" {
			f, err := os.OpenFile(count, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				return err
			}
			fmt.Fprintf(f, "fill %d\n", os.Getpid())
			f.Close()
		}
		r.begin("faking a build")
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return ctx.Err()
		}
		return writeFakes(dir, says)
	}
}

func writeFakes(dir, version string) error {
	scripts := map[string]string{
		"kube-apiserver": "#!/bin/sh\necho 'Kubernetes " + version + "'\n",
		"etcd":           "#!/bin/sh\necho 'etcd Version: 3.7.0'\n",
	}
	for name, script := range scripts {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
			return err
		}
	}
	return nil
}

// noAssets clears KUBEBUILDER_ASSETS, which `make test` sets, so that Ensure goes to the cache.
func noAssets(t *testing.T) {
	t.Setenv("KUBEBUILDER_ASSETS", "")
}

// withoutAssets is the environment for a child process, without KUBEBUILDER_ASSETS.
func withoutAssets() []string {
	return slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "KUBEBUILDER_ASSETS=") })
}

// entries lists a directory's names, sorted.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	list, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range list {
		names = append(names, e.Name())
	}
	return names
}

// The cache holds the version's directory and its lock file, nothing half-done.
func wantOnlyCache(t *testing.T, root string) {
	t.Helper()
	if got, want := entries(t, root), []string{"." + testVersion + ".lock", testVersion}; !slices.Equal(got, want) {
		t.Errorf("cache %s holds %q, want %q", root, got, want)
	}
	if !complete(filepath.Join(root, testVersion)) {
		t.Errorf("%s lacks kube-apiserver or etcd", filepath.Join(root, testVersion))
	}
}

// Several processes starting at once on an empty cache: one fills it, the others wait for the
// lock and use its result; all print the same directory and nothing else is left behind.
func TestConcurrentFirstRuns(t *testing.T) {
	root := filepath.Join(t.TempDir(), "envtest")
	count := filepath.Join(t.TempDir(), "fills")
	type result struct {
		stdout, stderr string
		err            error
	}
	results := make([]result, childCount)
	var wg sync.WaitGroup
	for i := range childCount {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(withoutAssets(), childEnv+"="+root, countEnv+"="+count)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			results[i] = result{stdout.String(), stderr.String(), err}
		}()
	}
	wg.Wait()

	final := filepath.Join(root, testVersion)
	waited := 0
	for i, r := range results {
		if r.err != nil {
			t.Fatalf("run %d: %v\n%s", i, r.err, r.stderr)
		}
		if got := strings.TrimSpace(r.stdout); got != final {
			t.Errorf("run %d printed %q, want %q", i, got, final)
		}
		if strings.Contains(r.stderr, "another projectmcp is getting kube-apiserver and etcd") {
			waited++
		}
	}
	fills, err := os.ReadFile(count)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(fills), "\n"); n != 1 {
		t.Errorf("%d fills ran, want 1:\n%s", n, fills)
	}
	if waited == 0 {
		t.Errorf("no run reported waiting for the one filling the cache")
	}
	wantOnlyCache(t, root)
}

// The same in one process: flock locks belong to open files, so goroutines exclude each other
// as processes do.
func TestConcurrentEnsureInProcess(t *testing.T) {
	noAssets(t)
	root := t.TempDir()
	count := filepath.Join(t.TempDir(), "fills")
	var wg sync.WaitGroup
	dirs := make([]string, 4)
	errs := make([]error, 4)
	for i := range dirs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dirs[i], errs[i] = Ensure(context.Background(), Options{CacheDir: root, KubernetesVersion: testVersion,
				fill: fakeFill(count, 200*time.Millisecond, testVersion)})
		}()
	}
	wg.Wait()
	for i := range dirs {
		if errs[i] != nil || dirs[i] != filepath.Join(root, testVersion) {
			t.Errorf("Ensure %d = %q, %v", i, dirs[i], errs[i])
		}
	}
	fills, _ := os.ReadFile(count)
	if n := strings.Count(string(fills), "\n"); n != 1 {
		t.Errorf("%d fills ran, want 1", n)
	}
	wantOnlyCache(t, root)
}

// A second run finds the cache and fills nothing.
func TestCachedRunFillsNothing(t *testing.T) {
	noAssets(t)
	root := t.TempDir()
	opts := Options{CacheDir: root, KubernetesVersion: testVersion, fill: fakeFill("", 0, testVersion)}
	if _, err := Ensure(context.Background(), opts); err != nil {
		t.Fatal(err)
	}
	var progress bytes.Buffer
	opts.Progress = &progress
	opts.fill = func(context.Context, string, string, *reporter) error { return errors.New("filled again") }
	start := time.Now()
	dir, err := Ensure(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("a cached run took %s", took)
	}
	if want := "kube-apiserver and etcd " + testVersion + " from " + dir; !strings.Contains(progress.String(), want) {
		t.Errorf("progress %q does not say %q", progress.String(), want)
	}
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("cache directory mode: %v, %v; want 0755 (readable by the user's other tools)", fi.Mode(), err)
	}
}

// A failed fill (the network, the toolchain, a Ctrl-C) leaves no cache and no temporary
// directory; the next run tries again.
func TestFailedFillLeavesNothing(t *testing.T) {
	noAssets(t)
	root := t.TempDir()
	_, err := Ensure(context.Background(), Options{CacheDir: root, KubernetesVersion: testVersion,
		fill: func(_ context.Context, _, dir string, _ *reporter) error {
			_ = writeFakes(dir, testVersion) // half done, then failing
			return errors.New("proxy unreachable")
		}})
	if err == nil || !strings.Contains(err.Error(), "proxy unreachable") {
		t.Fatalf("Ensure = %v, want the fill's error", err)
	}
	if got := entries(t, root); !slices.Equal(got, []string{"." + testVersion + ".lock"}) {
		t.Errorf("after a failed fill the cache holds %q", got)
	}
	if _, err := Ensure(context.Background(), Options{CacheDir: root, KubernetesVersion: testVersion, fill: fakeFill("", 0, testVersion)}); err != nil {
		t.Fatal(err)
	}
	wantOnlyCache(t, root)
}

// Binaries that do not work (a bad build, a truncated download) are never cached.
func TestBrokenBinariesAreNotCached(t *testing.T) {
	noAssets(t)
	root := t.TempDir()
	_, err := Ensure(context.Background(), Options{CacheDir: root, KubernetesVersion: testVersion, fill: fakeFill("", 0, "v0.0.0")})
	if err == nil || !strings.Contains(err.Error(), "kube-apiserver just obtained does not work") {
		t.Fatalf("Ensure = %v, want a broken kube-apiserver refused", err)
	}
	if _, err := os.Stat(filepath.Join(root, testVersion)); !os.IsNotExist(err) {
		t.Errorf("a broken build was cached: %v", err)
	}
}

// What a killed fill leaves (its temporary directory) and what an interrupted older cache
// filler left (a version directory with kube-apiserver only) are cleaned up and replaced.
func TestLeftoversAreReplaced(t *testing.T) {
	noAssets(t)
	root := t.TempDir()
	stale := filepath.Join(root, tmpPrefix(testVersion)+"12345")
	partial := filepath.Join(root, testVersion)
	for _, dir := range []string{stale, partial} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(partial, "kube-apiserver"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	dir, err := Ensure(context.Background(), Options{CacheDir: root, KubernetesVersion: testVersion, fill: fakeFill("", 0, testVersion)})
	if err != nil || dir != partial {
		t.Fatalf("Ensure = %q, %v", dir, err)
	}
	wantOnlyCache(t, root)
}

// A run waiting for another's fill gives up when its context ends (Ctrl-C), saying so.
func TestWaitingRespectsContext(t *testing.T) {
	noAssets(t)
	root := t.TempDir()
	unlock, locked, err := lock(context.Background(), filepath.Join(root, "."+testVersion+".lock"), func() {})
	if err != nil || !locked {
		t.Fatalf("lock: %v, %v", locked, err)
	}
	defer unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	var progress bytes.Buffer
	start := time.Now()
	_, err = Ensure(ctx, Options{CacheDir: root, KubernetesVersion: testVersion, Progress: &progress, fill: fakeFill("", 0, testVersion)})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "waiting for another process") {
		t.Errorf("Ensure = %v, want the wait abandoned", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("gave up after %s", took)
	}
	if !strings.Contains(progress.String(), "another projectmcp is getting kube-apiserver and etcd "+testVersion) {
		t.Errorf("progress %q does not say it waits", progress.String())
	}
}

// KUBEBUILDER_ASSETS wins when it holds both binaries, and is passed over (saying so) when not.
func TestKubebuilderAssets(t *testing.T) {
	assets := t.TempDir()
	if err := writeFakes(assets, testVersion); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBEBUILDER_ASSETS", assets)
	noFill := func(context.Context, string, string, *reporter) error { return errors.New("filled") }
	dir, err := Ensure(context.Background(), Options{CacheDir: t.TempDir(), KubernetesVersion: testVersion, fill: noFill})
	if err != nil || dir != assets {
		t.Errorf("Ensure = %q, %v; want KUBEBUILDER_ASSETS %q", dir, err, assets)
	}

	t.Setenv("KUBEBUILDER_ASSETS", t.TempDir()) // empty
	var progress bytes.Buffer
	root := t.TempDir()
	dir, err = Ensure(context.Background(), Options{CacheDir: root, KubernetesVersion: testVersion, Progress: &progress, fill: fakeFill("", 0, testVersion)})
	if err != nil || dir != filepath.Join(root, testVersion) {
		t.Errorf("Ensure = %q, %v; want the cache", dir, err)
	}
	if !strings.Contains(progress.String(), "lacks kube-apiserver or etcd; looking elsewhere") {
		t.Errorf("progress %q does not say KUBEBUILDER_ASSETS was passed over", progress.String())
	}
}

// No Go toolchain and nothing to download: the error says what to install or set.
func TestNoGoToolchain(t *testing.T) {
	noAssets(t)
	t.Setenv("PATH", t.TempDir())
	_, err := Ensure(context.Background(), Options{CacheDir: t.TempDir(), KubernetesVersion: testVersion, SkipDownload: true})
	if !errors.Is(err, ErrNoGo) {
		t.Fatalf("Ensure = %v, want ErrNoGo", err)
	}
	for _, want := range []string{"no `go` is on PATH", "Install Go (https://go.dev/dl/)", "set KUBEBUILDER_ASSETS"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

func TestKubernetesVersionFor(t *testing.T) {
	for api, want := range map[string]string{
		"v0.37.2": "v1.37.2", "v0.38.0-rc.1": "v1.38.0-rc.1",
		"v0.37": "", "v1.37.2": "", "v0.37.2+meta": "", "v0.0.0-20260101000000-abcdefabcdef": "", "(devel)": "", "": "",
	} {
		got, err := KubernetesVersionFor(api)
		if got != want || (err == nil) != (want != "") {
			t.Errorf("KubernetesVersionFor(%q) = %q, %v; want %q", api, got, err, want)
		}
		if err != nil && !strings.Contains(err.Error(), "KUBEBUILDER_ASSETS") {
			t.Errorf("error %q does not say what to set", err)
		}
	}
}

func TestBadKubernetesVersionOption(t *testing.T) {
	noAssets(t)
	for _, v := range []string{"1.37.2", "v0.37.2", "v1.37", "latest"} {
		_, err := Ensure(context.Background(), Options{CacheDir: t.TempDir(), KubernetesVersion: v})
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%q", v)) {
			t.Errorf("KubernetesVersion %q: %v, want an error naming it", v, err)
		}
	}
}

func TestVersionFromGoMod(t *testing.T) {
	dir := t.TempDir()
	gomod := filepath.Join(dir, "go.mod")
	write := func(s string) {
		if err := os.WriteFile(gomod, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("module example.com/x\n\ngo 1.26\n\nrequire (\n\tk8s.io/api v0.37.2\n\tk8s.io/client-go v0.37.2\n)\n")
	if v, err := VersionFromGoMod(gomod); err != nil || v != "v1.37.2" {
		t.Errorf("VersionFromGoMod = %q, %v", v, err)
	}
	write("module example.com/x\n")
	if _, err := VersionFromGoMod(gomod); err == nil || !strings.Contains(err.Error(), "does not require k8s.io/api") {
		t.Errorf("VersionFromGoMod without k8s.io/api = %v", err)
	}
}

func TestStagingModules(t *testing.T) {
	gomod := filepath.Join(t.TempDir(), "go.mod")
	text := "module k8s.io/kubernetes\n\ngo 1.26.0\n\nrequire k8s.io/api v0.0.0\n\nreplace (\n" +
		"\tk8s.io/api => ./staging/src/k8s.io/api\n\tk8s.io/kms => ./staging/src/k8s.io/kms\n\texample.com/other => example.com/fork v1.0.0\n)\n"
	if err := os.WriteFile(gomod, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := stagingModules(gomod)
	if err != nil || !slices.Equal(got, []string{"k8s.io/api", "k8s.io/kms"}) {
		t.Errorf("stagingModules = %q, %v", got, err)
	}
	if err := os.WriteFile(gomod, []byte("module k8s.io/kubernetes\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := stagingModules(gomod); err == nil {
		t.Error("a go.mod without staging replacements was accepted")
	}
}

// The release archive's layout: controller-tools/envtest/{etcd,kube-apiserver,kubectl}.
func TestUnpack(t *testing.T) {
	archive := func(names ...string) *bytes.Buffer {
		var buf bytes.Buffer
		gz := gzip.NewWriter(&buf)
		tw := tar.NewWriter(gz)
		_ = tw.WriteHeader(&tar.Header{Name: "controller-tools/envtest/", Typeflag: tar.TypeDir, Mode: 0o755})
		for _, name := range names {
			body := "#!/bin/sh\necho " + name + "\n"
			_ = tw.WriteHeader(&tar.Header{Name: "controller-tools/envtest/" + name, Typeflag: tar.TypeReg, Mode: 0o555, Size: int64(len(body))})
			_, _ = tw.Write([]byte(body))
		}
		_ = tw.Close()
		_ = gz.Close()
		return &buf
	}
	dir := t.TempDir()
	if err := unpack(archive("etcd", "kube-apiserver", "kubectl"), dir); err != nil {
		t.Fatal(err)
	}
	if got := entries(t, dir); !slices.Equal(got, []string{"etcd", "kube-apiserver"}) {
		t.Errorf("unpacked %q", got)
	}
	if !complete(dir) {
		t.Error("unpacked binaries are not executable")
	}
	if err := unpack(archive("kube-apiserver"), t.TempDir()); err == nil {
		t.Error("an archive without etcd was accepted")
	}
	if err := unpack(strings.NewReader("not gzip"), t.TempDir()); err == nil {
		t.Error("garbage was accepted as an archive")
	}
}

// A long step says every interval how long it has run, and the ticking ends with the step.
func TestProgressTicks(t *testing.T) {
	var buf testutil.SyncBuffer
	r := newReporter(&buf)
	stop := r.startTicking(20 * time.Millisecond)
	r.begin("compiling kube-apiserver")
	time.Sleep(100 * time.Millisecond)
	stop()
	out := buf.String()
	if !strings.Contains(out, "control plane: compiling kube-apiserver\n") || !strings.Contains(out, "control plane: still compiling kube-apiserver (") {
		t.Errorf("progress:\n%s", out)
	}
	after := buf.String()
	time.Sleep(60 * time.Millisecond)
	if buf.String() != after {
		t.Error("still ticking after stop")
	}
}
