package testenv

import (
	"context"
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
)

func TestUnitMode(t *testing.T) {
	for _, tc := range []struct {
		unit, assets string
		want         bool
	}{
		{"1", "", true},
		{"1", "/some/assets", false}, // make test sets KUBEBUILDER_ASSETS: never skip there
		{"", "", false},
		{"0", "", false},
		{"true", "", false},
	} {
		t.Setenv(UnitEnvVar, tc.unit)
		t.Setenv("KUBEBUILDER_ASSETS", tc.assets)
		if got := UnitMode(); got != tc.want {
			t.Errorf("%s=%q KUBEBUILDER_ASSETS=%q: UnitMode %v, want %v", UnitEnvVar, tc.unit, tc.assets, got, tc.want)
		}
	}
}

// In unit mode a test that needs the API server is skipped, and one that starts a control
// plane without saying so fails instead of starting it.
func TestUnitModeStartsNothing(t *testing.T) {
	t.Setenv(UnitEnvVar, "1")
	t.Setenv("KUBEBUILDER_ASSETS", "")
	if env, err := Start(); !errors.Is(err, errUnitMode) {
		if env != nil {
			env.Stop()
		}
		t.Fatalf("Start in unit mode: %v, want %v", err, errUnitMode)
	}
	var l Lazy
	var required, lazy bool
	t.Run("Require", func(t *testing.T) { defer func() { required = t.Skipped() }(); Require(t) })
	t.Run("Lazy", func(t *testing.T) { defer func() { lazy = t.Skipped() }(); l.Get(t) })
	if !required || !lazy {
		t.Fatalf("skipped: Require %v, Lazy.Get %v", required, lazy)
	}
	if l.env != nil || l.err != nil {
		t.Fatalf("the skipped Get must not have tried to start a control plane: %v %v", l.env, l.err)
	}
}

// A Lazy starts one control plane for all callers; DeleteOnCleanup removes an object even when
// a finalizer holds it and no controller is running.
func TestLazySharedAndCleanup(t *testing.T) {
	var l Lazy
	env := l.Get(t)
	defer l.Stop()
	if again := l.Get(t); again != env {
		t.Fatal("a second Get must return the same control plane")
	}
	obj := &v1alpha1.ProjectMCP{ObjectMeta: metav1.ObjectMeta{
		Name: "held", Namespace: "default", Finalizers: []string{v1alpha1.Finalizer},
	}}
	t.Run("create", func(t *testing.T) {
		env.DeleteOnCleanup(t, obj, &v1alpha1.ProjectMCP{ObjectMeta: metav1.ObjectMeta{Name: "never-created", Namespace: "default"}})
		if err := env.Client.Create(context.Background(), obj); err != nil {
			t.Fatal(err)
		}
	})
	err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), &v1alpha1.ProjectMCP{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("the object must be gone after the subtest: %v", err)
	}
	l.Stop()
	if l.env != nil || l.err == nil {
		t.Fatal("after Stop, Get must fail rather than start another control plane")
	}
}
