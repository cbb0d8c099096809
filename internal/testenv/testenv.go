// Package testenv starts a real kube-apiserver and etcd (controller-runtime's envtest) with the
// project's CRDs installed, for integration tests. The binaries come from KUBEBUILDER_ASSETS,
// or from hack/envtest-assets.sh, which builds them from the Go module proxy once and caches
// them outside the repository.
package testenv

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
)

// Env is a running control plane. Stop it when the tests are done; it owns the apiserver and
// etcd processes.
type Env struct {
	Env    *envtest.Environment
	Config *rest.Config
	Client client.Client
	Scheme *runtime.Scheme
	// Kubeconfig is the path of a kubeconfig file for kubectl, removed by Stop.
	Kubeconfig string
	dir        string
}

// RepoRoot finds the repository root: the nearest directory upwards holding go.mod.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}

// Assets returns the directory holding kube-apiserver and etcd.
func Assets(root string) (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, nil
	}
	var out bytes.Buffer
	cmd := exec.Command(filepath.Join(root, "hack", "envtest-assets.sh"))
	cmd.Stdout = &out
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("hack/envtest-assets.sh: %w", err)
	}
	return strings.TrimSpace(out.String()), nil
}

// Start starts a control plane with the generated CRDs installed.
func Start() (*Env, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	assets, err := Assets(root)
	if err != nil {
		return nil, err
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory:    assets,
		CRDDirectoryPaths:        []string{filepath.Join(root, "config", "crd", "bases")},
		ErrorIfCRDPathMissing:    true,
		Scheme:                   scheme,
		ControlPlaneStartTimeout: 2 * time.Minute, // a loaded 2-core machine starts slowly
		ControlPlaneStopTimeout:  time.Minute,
	}
	start := time.Now()
	cfg, err := env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting envtest: %w", err)
	}
	e := &Env{Env: env, Config: cfg, Scheme: scheme}
	fmt.Fprintf(os.Stderr, "testenv: kube-apiserver ready at %s in %s\n", cfg.Host, time.Since(start).Round(time.Millisecond))
	if e.Client, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		e.Stop()
		return nil, err
	}
	if e.dir, err = os.MkdirTemp("", "testenv-"); err != nil {
		e.Stop()
		return nil, err
	}
	e.Kubeconfig = filepath.Join(e.dir, "kubeconfig")
	if err := os.WriteFile(e.Kubeconfig, env.KubeConfig, 0o600); err != nil {
		e.Stop()
		return nil, err
	}
	return e, nil
}

// Stop ends the apiserver and etcd and removes the kubeconfig.
func (e *Env) Stop() {
	if err := e.Env.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "testenv: stopping: %v\n", err)
	}
	if e.dir != "" {
		_ = os.RemoveAll(e.dir)
	}
}

// FindAssets locates kube-apiserver and etcd for a control plane outside the tests
// (`projectmcp dev`): KUBEBUILDER_ASSETS, else the cache hack/envtest-assets.sh fills, else that
// script itself when a projectmcp checkout is found above the working directory.
func FindAssets() (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir, nil
	}
	if v := apiVersion(); v != "" {
		data := os.Getenv("XDG_DATA_HOME")
		if data == "" {
			home, _ := os.UserHomeDir()
			data = filepath.Join(home, ".local", "share")
		}
		dir := filepath.Join(data, "projectmcp", "envtest", "v1."+strings.TrimPrefix(v, "v0."))
		if _, err := os.Stat(filepath.Join(dir, "kube-apiserver")); err == nil {
			return dir, nil
		}
	}
	root, err := RepoRoot()
	if err != nil {
		return "", fmt.Errorf("no kube-apiserver found: set KUBEBUILDER_ASSETS, or run `make envtest` in the projectmcp checkout once")
	}
	return Assets(root)
}

// apiVersion is the k8s.io/api version this binary was built with.
func apiVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, d := range info.Deps {
		if d.Path == "k8s.io/api" {
			return d.Version
		}
	}
	return ""
}
