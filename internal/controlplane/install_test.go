package controlplane_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/dsh-dev/projectmcp/internal/controlplane"
)

// InstallTestEnv, set to 1, runs TestInstalledBinaryGetsItsControlPlane (make test-install).
// It is not part of `make test`: it builds kube-apiserver and etcd for real, which takes about a
// minute while Go's build cache holds their packages, but 6–20 minutes once the cache has
// dropped them (go trims entries unused for days, and a cached control plane never uses them).
const InstallTestEnv = "PROJECTMCP_INSTALL_TEST"

// What a user gets from `go install`: the projectmcp binary, run in a folder outside any
// checkout, with an empty data directory and KUBEBUILDER_ASSETS unset, gets working binaries
// by itself; two first runs at once both succeed and leave one cache; a later run is instant.
func TestInstalledBinaryGetsItsControlPlane(t *testing.T) {
	if os.Getenv(InstallTestEnv) != "1" {
		t.Skipf("builds kube-apiserver and etcd from the Go module proxy: run with %s=1 (make test-install)", InstallTestEnv)
	}
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	want, err := controlplane.VersionFromGoMod(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	// Built as `go install` builds it, so that its build info records k8s.io/api.
	bin := filepath.Join(t.TempDir(), "projectmcp")
	build := exec.Command("go", "build", "-o", bin, "./cmd/projectmcp")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	data := t.TempDir() // XDG_DATA_HOME, empty
	work := t.TempDir() // the user's project folder, outside the checkout
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "KUBEBUILDER_ASSETS=") || strings.HasPrefix(kv, "XDG_DATA_HOME=")
	})
	env = append(env, "XDG_DATA_HOME="+data)
	run := func() (dir, progress string, took time.Duration, err error) {
		cmd := exec.Command(bin, "envtest", "--print-path")
		cmd.Dir, cmd.Env = work, env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		start := time.Now()
		err = cmd.Run()
		return strings.TrimSpace(stdout.String()), stderr.String(), time.Since(start), err
	}

	// Two first runs at once.
	type result struct {
		dir, progress string
		took          time.Duration
		err           error
	}
	var results [2]result
	var wg sync.WaitGroup
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &results[i]
			r.dir, r.progress, r.took, r.err = run()
		}()
	}
	wg.Wait()
	cache := filepath.Join(data, "projectmcp", "envtest", want)
	filled := 0
	for i, r := range results {
		t.Logf("first run %d took %s:\n%s", i, r.took.Round(time.Second), r.progress)
		if r.err != nil {
			t.Fatalf("first run %d: %v", i, r.err)
		}
		if r.dir != cache {
			t.Errorf("first run %d printed %q, want %q", i, r.dir, cache)
		}
		filled += strings.Count(r.progress, "control plane: cached kube-apiserver and etcd")
	}
	if filled != 1 {
		t.Errorf("%d runs filled the cache, want exactly 1", filled)
	}
	list, err := os.ReadDir(filepath.Dir(cache))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range list {
		names = append(names, e.Name())
	}
	if wantNames := []string{"." + want + ".lock", want}; !slices.Equal(names, wantNames) {
		t.Errorf("the cache holds %q, want %q", names, wantNames)
	}

	// A later run is instant.
	dir, progress, took, err := run()
	t.Logf("second run took %s: %s", took, progress)
	if err != nil || dir != cache {
		t.Fatalf("second run = %q, %v\n%s", dir, err, progress)
	}
	if took > 3*time.Second {
		t.Errorf("second run took %s, want it instant (the cache found)", took)
	}

	// The binaries work: the right version, and a control plane that serves.
	out, err := exec.Command(filepath.Join(cache, "kube-apiserver"), "--version").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "Kubernetes "+want {
		t.Errorf("kube-apiserver --version = %q, %v; want Kubernetes %s", out, err, want)
	}
	logf.SetLogger(logr.Discard()) // envtest logs its start; the test reports what matters
	e := &envtest.Environment{BinaryAssetsDirectory: cache, ControlPlaneStartTimeout: 2 * time.Minute}
	cfg, err := e.Start()
	if err != nil {
		t.Fatalf("starting the built control plane: %v", err)
	}
	defer func() {
		if err := e.Stop(); err != nil {
			t.Errorf("stopping the control plane: %v", err)
		}
	}()
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	v, err := dc.ServerVersion()
	if err != nil || v.GitVersion != want {
		t.Errorf("the built kube-apiserver serves version %v, %v; want %s", v, err, want)
	}
}
