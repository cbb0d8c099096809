package v1alpha1

import (
	"encoding/json"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ApplyConfiguration is a server-side apply configuration of the ProjectMCP key naming one
// part of it (spec or status) as value: the fields a writer owns there. A field value's JSON
// form leaves out (empty) is removed from the object when that writer applied it before; so is
// a list item no longer listed. The reconciler applies status with it, the mirror the spec and
// its condition.
func ApplyConfiguration(key types.NamespacedName, part string, value any) (runtime.ApplyConfiguration, error) {
	raw, err := json.Marshal(map[string]any{
		"apiVersion": GroupVersion.String(),
		"kind":       "ProjectMCP",
		"metadata":   map[string]any{"name": key.Name, "namespace": key.Namespace},
		part:         value,
	})
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(raw); err != nil {
		return nil, err
	}
	return client.ApplyConfigurationFromUnstructured(u), nil
}
