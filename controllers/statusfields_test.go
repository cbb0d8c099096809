package controllers

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/dsh-dev/projectmcp/internal/mirror"
)

// adoptStatusFields moves what updates own in status to the reconciler's apply entry, but other
// writers' conditions; it leaves every other entry alone.
func TestAdoptStatusFields(t *testing.T) {
	const gv = "mcp.dsh.dev/v1alpha1"
	entry := func(manager string, op metav1.ManagedFieldsOperationType, subresource, fields string) metav1.ManagedFieldsEntry {
		return metav1.ManagedFieldsEntry{Manager: manager, Operation: op, APIVersion: gv, FieldsType: "FieldsV1",
			FieldsV1: metav1.NewFieldsV1(fields), Subresource: subresource}
	}
	spec := entry("kubectl", metav1.ManagedFieldsOperationUpdate, "", `{"f:spec":{"f:project":{}}}`)
	mirrored := entry(mirror.FieldManager, metav1.ManagedFieldsOperationApply, "status", `{"f:status":{"f:conditions":{"k:{\"type\":\"ConfigSynced\"}":{".":{},"f:type":{}}}}}`)
	updated := entry("projectmcp", metav1.ManagedFieldsOperationUpdate, "status", `{"f:status":{".":{},"f:endpoint":{},`+
		`"f:conditions":{".":{},"k:{\"type\":\"ConfigSynced\"}":{".":{},"f:message":{},"f:type":{}},"k:{\"type\":\"Ready\"}":{".":{},"f:status":{},"f:type":{}}},`+
		`"f:servers":{".":{},"k:{\"name\":\"gone\"}":{".":{},"f:name":{}}}}}`)
	own := entry(FieldManager, metav1.ManagedFieldsOperationApply, "status", `{"f:status":{"f:toolCount":{}}}`)

	if got, ok, err := adoptStatusFields([]metav1.ManagedFieldsEntry{spec, mirrored, own}, gv); err != nil || ok || len(got) != 3 {
		t.Fatalf("nothing to adopt: ok %v, err %v, %d entries", ok, err, len(got))
	}
	for name, in := range map[string][]metav1.ManagedFieldsEntry{
		"the reconciler has applied before": {spec, updated, mirrored, own},
		"the reconciler never applied":      {spec, updated, mirrored},
	} {
		t.Run(name, func(t *testing.T) {
			got, ok, err := adoptStatusFields(in, gv)
			if err != nil || !ok {
				t.Fatalf("ok %v, err %v", ok, err)
			}
			if len(got) != 3 || got[0].Manager != spec.Manager || got[1].Manager != mirror.FieldManager || got[2].Manager != FieldManager {
				t.Fatalf("entries: %+v", got)
			}
			if got[0].FieldsV1.GetRawString() != spec.FieldsV1.GetRawString() || got[1].FieldsV1.GetRawString() != mirrored.FieldsV1.GetRawString() {
				t.Fatal("other entries must stay as they were")
			}
			fields, err := fieldSet(got[2])
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range []fieldpath.Path{
				fieldpath.MakePathOrDie("status", "endpoint"),
				fieldpath.MakePathOrDie("status", "conditions", fieldpath.KeyByFields("type", "Ready"), "status"),
				fieldpath.MakePathOrDie("status", "servers", fieldpath.KeyByFields("name", "gone")),
			} {
				if !fields.Has(p) {
					t.Errorf("%s not adopted: %s", p, got[2].FieldsV1.GetRawString())
				}
			}
			if strings.Contains(got[2].FieldsV1.GetRawString(), "ConfigSynced") {
				t.Errorf("the mirror's condition adopted: %s", got[2].FieldsV1.GetRawString())
			}
			if applied := len(in) == 4; applied && !fields.Has(fieldpath.MakePathOrDie("status", "toolCount")) {
				t.Errorf("what the reconciler owned before is lost: %s", got[2].FieldsV1.GetRawString())
			}
		})
	}
}
