// Package testenv starts a real kube-apiserver and etcd (controller-runtime's envtest) with the
// project's CRDs installed, for integration tests. The binaries come from the controlplane
// package (KUBEBUILDER_ASSETS, else its cache, filled on first use).
//
// A package whose tests do not all need the API server shares one control plane through a Lazy,
// started by the first test that asks for it. `make unit` runs with PROJECTMCP_UNIT=1 and
// without KUBEBUILDER_ASSETS (see UnitMode): then tests that need the API server are skipped
// (Require, Lazy.Get) and Start refuses to run one.
package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
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

// UnitEnvVar, set to 1, marks a run of the tests that need no API server (`make unit`).
const UnitEnvVar = "PROJECTMCP_UNIT"

// UnitMode reports whether this is a run without an API server: PROJECTMCP_UNIT=1 and
// KUBEBUILDER_ASSETS unset. `make test` always sets KUBEBUILDER_ASSETS, so a PROJECTMCP_UNIT
// left in the environment can never make it skip anything.
func UnitMode() bool {
	return os.Getenv(UnitEnvVar) == "1" && os.Getenv("KUBEBUILDER_ASSETS") == ""
}

// Require marks a test that needs a kube-apiserver: in unit mode (make unit) it skips the test,
// otherwise it does nothing and the test goes on to start or share a control plane, failing if
// there is none.
func Require(t testing.TB) {
	t.Helper()
	if UnitMode() {
		t.Skipf("needs a kube-apiserver: skipped because %s=1 and KUBEBUILDER_ASSETS is unset (make unit)", UnitEnvVar)
	}
}

// errUnitMode is Start's answer in unit mode.
var errUnitMode = errors.New("testenv: not starting a kube-apiserver: " + UnitEnvVar +
	"=1 and KUBEBUILDER_ASSETS is unset (make unit); a test that needs one must call testenv.Require or use a testenv.Lazy")

// Start starts a control plane with the generated CRDs installed. In unit mode it fails at
// once, so that a test which needs the API server but does not say so (Require) fails loudly
// in `make unit` instead of starting one.
func Start() (*Env, error) {
	if UnitMode() {
		return nil, errUnitMode
	}
	root, err := controlplane.RepoRoot()
	if err != nil {
		return nil, err
	}
	assets, err := controlplane.Ensure(context.Background(), controlplane.Options{Progress: os.Stderr})
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

// Lazy is one control plane shared by the tests of a package, started by the first test that
// calls Get: tests that do not need it (or a `-run` that selects none of those that do) start
// no kube-apiserver. Declare it as a package variable and call Stop in TestMain after m.Run.
type Lazy struct {
	once sync.Once
	env  *Env
	err  error
}

// Get returns the shared control plane, starting it on first use. It skips the test in unit
// mode (Require) and fails it when the control plane cannot start.
func (l *Lazy) Get(t testing.TB) *Env {
	t.Helper()
	Require(t)
	l.once.Do(func() { l.env, l.err = Start() })
	if l.err != nil {
		t.Fatalf("shared control plane: %v", l.err)
	}
	return l.env
}

// Stop stops the control plane if a test started it; a Get after Stop fails.
func (l *Lazy) Stop() {
	l.once.Do(func() {}) // from now on nothing starts one
	if l.env != nil {
		l.env.Stop()
	}
	l.env, l.err = nil, errors.New("testenv: Lazy.Get after Stop")
}

// DeleteOnCleanup removes objects when the test ends (after its deferred calls, so after the
// controllers it started have stopped), so that the next test on a shared control plane sees
// none of them: each is deleted, its finalizers are dropped (nobody may be left to honour
// them) and it is waited for until gone. Objects already gone are fine. Do not pass
// Namespaces: envtest runs no namespace controller, so a deleted namespace stays Terminating.
func (e *Env) DeleteOnCleanup(t testing.TB, objs ...client.Object) {
	t.Helper()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, obj := range objs {
			if err := e.remove(ctx, obj); err != nil {
				t.Errorf("testenv: removing %T %s: %v", obj, client.ObjectKeyFromObject(obj), err)
			}
		}
	})
}

// dropFinalizers is a merge patch that empties metadata.finalizers.
var dropFinalizers = client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))

func (e *Env) remove(ctx context.Context, obj client.Object) error {
	// Delete first: an object being deleted cannot gain finalizers, so one dropped below stays
	// dropped even if a controller is still running.
	if err := e.Client.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	key := client.ObjectKeyFromObject(obj)
	cur, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		return fmt.Errorf("%T is not a client.Object", obj)
	}
	for {
		err := e.Client.Get(ctx, key, cur)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err == nil && len(cur.GetFinalizers()) > 0 {
			err = e.Client.Patch(ctx, cur, dropFinalizers)
			if apierrors.IsNotFound(err) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("still present: %w (last error: %v)", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// RepoRoot finds the repository root (see controlplane.RepoRoot).
func RepoRoot() (string, error) { return controlplane.RepoRoot() }
