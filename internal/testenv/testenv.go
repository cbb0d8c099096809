// Package testenv starts a real kube-apiserver and etcd (controller-runtime's envtest) with the
// project's CRDs installed, for integration tests. The binaries are found by the controlplane
// package.
package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/controlplane"
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

// Start starts a control plane with the generated CRDs installed.
func Start() (*Env, error) {
	root, err := controlplane.RepoRoot()
	if err != nil {
		return nil, err
	}
	assets, err := controlplane.Assets(root)
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

// RepoRoot finds the repository root (see controlplane.RepoRoot).
func RepoRoot() (string, error) { return controlplane.RepoRoot() }
