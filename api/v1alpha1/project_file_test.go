package v1alpha1

import (
	"os"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// PROJECT, the kubebuilder project file, declares every kind this API group registers (and no
// other), with the group, version and Go package they have here: kubebuilder's plugins read it.
func TestProjectFileDeclaresEveryKind(t *testing.T) {
	data, err := os.ReadFile("../../PROJECT")
	if err != nil {
		t.Fatal(err)
	}
	var project struct {
		Domain    string `json:"domain"`
		Repo      string `json:"repo"`
		Resources []struct {
			Group   string `json:"group"`
			Version string `json:"version"`
			Kind    string `json:"kind"`
			Path    string `json:"path"`
			Domain  string `json:"domain"`
			API     *struct {
				Namespaced bool `json:"namespaced"`
			} `json:"api"`
		} `json:"resources"`
	}
	if err := yaml.Unmarshal(data, &project); err != nil {
		t.Fatalf("PROJECT: %v", err)
	}
	const path = "github.com/dsh-dev/projectmcp/api/v1alpha1"
	var declared []string
	for _, r := range project.Resources {
		if r.Group+"."+r.Domain != GroupVersion.Group || r.Version != GroupVersion.Version || r.Path != path {
			t.Errorf("PROJECT resource %s: group %s.%s, version %s, path %s; want %s, %s, %s",
				r.Kind, r.Group, r.Domain, r.Version, r.Path, GroupVersion.Group, GroupVersion.Version, path)
		}
		if r.API == nil || !r.API.Namespaced {
			t.Errorf("PROJECT resource %s: want a namespaced API", r.Kind)
		}
		declared = append(declared, r.Kind)
	}
	scheme := runtime.NewScheme()
	if err := AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	var registered []string
	for kind, typ := range scheme.KnownTypes(GroupVersion) {
		if typ.PkgPath() == path && !strings.HasSuffix(kind, "List") {
			registered = append(registered, kind)
		}
	}
	slices.Sort(declared)
	slices.Sort(registered)
	if !slices.Equal(declared, registered) {
		t.Fatalf("PROJECT declares %v; the API group registers %v", declared, registered)
	}
}
