package config

import (
	"fmt"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
)

// manifest is the shape `projectmcp render` prints: a ProjectMCP without status or server-set
// metadata, so that committing it to a GitOps repository records only what the file says.
type manifest struct {
	APIVersion string                  `json:"apiVersion"`
	Kind       string                  `json:"kind"`
	Metadata   manifestMeta            `json:"metadata"`
	Spec       v1alpha1.ProjectMCPSpec `json:"spec"`
}

type manifestMeta struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace,omitempty"`
}

// Render prints a ProjectMCP manifest for a spec as YAML. The name must be a valid object name;
// an empty namespace is left out so that the applier (kubectl, Flux, Argo CD) chooses it.
func Render(spec *v1alpha1.ProjectMCPSpec, name, namespace string) ([]byte, error) {
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return nil, fmt.Errorf("invalid name %q: %s", name, strings.Join(errs, "; "))
	}
	if namespace != "" {
		if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
			return nil, fmt.Errorf("invalid namespace %q: %s", namespace, strings.Join(errs, "; "))
		}
	}
	return yaml.Marshal(manifest{
		APIVersion: v1alpha1.GroupVersion.String(),
		Kind:       "ProjectMCP",
		Metadata:   manifestMeta{Name: name, Namespace: namespace},
		Spec:       *spec,
	})
}

// NameFor derives an object name from a config file's path: the project directory's name (the
// directory holding .dsh/), lowercased and reduced to the characters an object name allows.
func NameFor(path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		abs = path
	}
	dir := filepath.Dir(abs)
	if filepath.Base(dir) == ".dsh" {
		dir = filepath.Dir(dir)
	}
	var b strings.Builder
	for _, c := range strings.ToLower(filepath.Base(dir)) {
		switch {
		case (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'):
			b.WriteRune(c)
		case b.Len() > 0 && !strings.HasSuffix(b.String(), "-"):
			b.WriteByte('-')
		}
	}
	name := strings.Trim(b.String(), "-")
	if len(name) > validation.DNS1123LabelMaxLength {
		name = strings.Trim(name[:validation.DNS1123LabelMaxLength], "-")
	}
	if name == "" {
		return "project"
	}
	return name
}
