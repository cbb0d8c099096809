package controllers

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/metrics"
)

// FieldManager is the reconciler's field manager for status (server-side apply). The mirror
// applies spec and the ConfigSynced condition under its own (mirror.FieldManager).
const FieldManager = "projectmcp-controller"

// writeStatus applies the reconciler's part of status when it changed, then records events for
// servers that failed, were reclaimed or were rebuilt at a mount since the last write.
//
// Status has two writers, the reconciler and the mirror (ConfigSynced), and each applies only
// the fields it owns, by server-side apply under its own field manager. status.conditions
// merges by type, so neither write can drop the other's condition, whatever either had read;
// and no write names a resourceVersion, so there is no conflict to retry. A write that fails
// is returned and the reconcile runs again with backoff; what the reconcile did before is not
// done twice (handledReconnects), and the events wait for a write that succeeds.
func (r *Reconciler) writeStatus(ctx context.Context, obj *v1alpha1.ProjectMCP, status v1alpha1.ProjectMCPStatus) error {
	if equality.Semantic.DeepEqual(ownStatus(obj.Status), status) {
		return nil
	}
	if err := r.adoptUpdatedStatus(ctx, obj); err != nil {
		return err
	}
	ac, err := v1alpha1.ApplyConfiguration(client.ObjectKeyFromObject(obj), "status", status)
	if err != nil {
		return err
	}
	if err := metrics.StatusWrite(obj.Namespace, obj.Name, r.Client.Status().Apply(ctx, ac, client.FieldOwner(FieldManager), client.ForceOwnership)); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	r.statusEvents(obj, status)
	log.FromContext(ctx).V(1).Info("Updated status", "ready", status.ReadyServers, "tools", status.ToolCount, "sessions", status.SessionCount)
	return nil
}

// statusEvents records an event for each server that failed, was reclaimed or was rebuilt at a
// mount between obj's status and the one just written.
func (r *Reconciler) statusEvents(obj *v1alpha1.ProjectMCP, status v1alpha1.ProjectMCPStatus) {
	before := map[string]v1alpha1.ServerStatus{}
	for _, s := range obj.Status.Servers {
		before[s.Name] = s
	}
	for _, s := range status.Servers {
		old, seen := before[s.Name]
		switch {
		case s.Phase == v1alpha1.PhaseFailed && (!seen || old.Phase != v1alpha1.PhaseFailed || old.Connection != s.Connection):
			r.event(obj, corev1.EventTypeWarning, v1alpha1.EventConnectFailed, "Connect", "Server %q failed: %s", s.Name, s.LastError)
		case s.Phase == v1alpha1.PhaseIdle && seen && old.Phase != v1alpha1.PhaseIdle:
			r.event(obj, corev1.EventTypeNormal, v1alpha1.EventIdleReclaimed, "Reclaim", "Reclaimed idle connection of server %q", s.Name)
		}
		if rb := s.LastRebuild; rb != nil && (old.LastRebuild == nil || old.LastRebuild.Connection != rb.Connection) {
			r.event(obj, corev1.EventTypeNormal, v1alpha1.EventRebuilt, rb.Reason, "Rebuilt server %q as connection %s: %s: a session's mount found it dead (%s)",
				s.Name, rb.Connection, rb.Reason, rb.Message)
		}
	}
}

// adoptUpdatedStatus makes the reconciler's field manager the owner of the status fields that
// updates wrote (rather than applies: a controller from before server-side apply, a person's
// kubectl edit), except other writers' conditions. Server-side apply removes only fields the
// applier owned: a server since removed from spec, or a session long gone, left to an update's
// manager would stay in status for ever. It patches managedFields alone, once per such update,
// and only if the object is still the one read (else the next reconcile tries again).
func (r *Reconciler) adoptUpdatedStatus(ctx context.Context, obj *v1alpha1.ProjectMCP) error {
	fields, ok, err := adoptStatusFields(obj.ManagedFields, v1alpha1.GroupVersion.String())
	if err != nil || !ok {
		return err
	}
	patch, err := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/resourceVersion", "value": obj.ResourceVersion},
		{"op": "replace", "path": "/metadata/managedFields", "value": fields},
	})
	if err != nil {
		return err
	}
	if err := r.Client.Patch(ctx, obj.DeepCopy(), client.RawPatch(types.JSONPatchType, patch)); err != nil {
		return err
	}
	log.FromContext(ctx).Info("Took over the status fields written by updates", "fieldManager", FieldManager)
	return nil
}

// adoptStatusFields returns entries with every status entry of an update operation merged into
// the reconciler's apply entry (created if needed), but for conditions of other types than the
// reconciler's, which are left without an owner until their writer applies them again. ok is
// false when there is no such entry. It is pure.
func adoptStatusFields(entries []metav1.ManagedFieldsEntry, apiVersion string) (_ []metav1.ManagedFieldsEntry, ok bool, _ error) {
	adopted := fieldpath.NewSet()
	var kept []metav1.ManagedFieldsEntry
	own := -1
	for _, e := range entries {
		if e.Subresource == "status" && e.APIVersion == apiVersion {
			switch {
			case e.Operation == metav1.ManagedFieldsOperationUpdate:
				set, err := fieldSet(e)
				if err != nil {
					return nil, false, err
				}
				adopted, ok = adopted.Union(set), true
				continue
			case e.Operation == metav1.ManagedFieldsOperationApply && e.Manager == FieldManager:
				own = len(kept)
			}
		}
		kept = append(kept, e)
	}
	if !ok {
		return entries, false, nil
	}
	adopted = adopted.RecursiveDifference(othersConditions(adopted))
	if own < 0 {
		if adopted.Empty() {
			return kept, true, nil
		}
		kept = append(kept, metav1.ManagedFieldsEntry{Manager: FieldManager, Operation: metav1.ManagedFieldsOperationApply,
			APIVersion: apiVersion, FieldsType: "FieldsV1", Subresource: "status"})
		own = len(kept) - 1
	}
	set, err := fieldSet(kept[own])
	if err != nil {
		return nil, false, err
	}
	data, err := set.Union(adopted).ToJSON()
	if err != nil {
		return nil, false, err
	}
	kept[own].FieldsV1 = metav1.NewFieldsV1(string(data))
	return kept, true, nil
}

// fieldSet is the set of fields a managedFields entry owns.
func fieldSet(e metav1.ManagedFieldsEntry) (*fieldpath.Set, error) {
	set := fieldpath.NewSet()
	if e.FieldsV1 == nil {
		return set, nil
	}
	if err := set.FromJSON(bytes.NewReader(e.FieldsV1.GetRawBytes())); err != nil {
		return nil, err
	}
	return set, nil
}

// othersConditions are the items of status.conditions in set whose type is not the
// reconciler's.
func othersConditions(set *fieldpath.Set) *fieldpath.Set {
	others := fieldpath.NewSet()
	for p := range set.All() {
		if len(p) < 3 || !isField(p[0], "status") || !isField(p[1], "conditions") || p[2].Key == nil {
			continue
		}
		for _, f := range *p[2].Key {
			if f.Name == "type" && f.Value.IsString() && !slices.Contains(reconcilerConditions, f.Value.AsString()) {
				others.Insert(p[:3].Copy())
			}
		}
	}
	return others
}

func isField(pe fieldpath.PathElement, name string) bool {
	return pe.FieldName != nil && *pe.FieldName == name
}
