// Package mirror keeps a ProjectMCP in step with a project's .dsh/mcp.json.
//
// The file is the single source of truth, but a file being edited is often briefly invalid: an
// invalid file never replaces the last good spec. The mirror reports it in the ConfigSynced
// condition (with the parser's file, line and column) and a Warning event, and the running
// connections stay as they are until the file is fixed.
package mirror

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/config"
)

// FieldManager owns the spec fields the mirror applies (server-side apply).
const FieldManager = "projectmcp-mirror"

// debounce lets a burst of writes (editors write, rename and chmod) settle into one sync.
const debounce = 150 * time.Millisecond

// Mirror mirrors one project directory into one ProjectMCP.
type Mirror struct {
	Client client.Client
	Dir    string // the project directory (holding .dsh/)
	Key    types.NamespacedName
	Log    logr.Logger
}

// Path is the config file the mirror reads.
func (m *Mirror) Path() string { return filepath.Join(m.Dir, config.DefaultPath) }

// Run syncs once, then again after every change of the file, until ctx ends. It watches the
// directories rather than the file, so that editors that save by renaming a new file over
// the old one, and a .dsh directory created later, are seen.
func (m *Mirror) Run(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer w.Close()
	if err := w.Add(m.Dir); err != nil {
		return fmt.Errorf("watching %s: %w", m.Dir, err)
	}
	dsh := filepath.Dir(m.Path())
	_ = w.Add(dsh) // may not exist yet; added when it appears

	m.syncLogged(ctx)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if ev.Name == dsh && ev.Has(fsnotify.Create) {
				_ = w.Add(dsh)
			}
			if ev.Name == dsh || ev.Name == m.Path() {
				timer.Reset(debounce)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			m.Log.Error(err, "Watching the project directory")
		case <-timer.C:
			m.syncLogged(ctx)
		}
	}
}

func (m *Mirror) syncLogged(ctx context.Context) {
	if err := m.Sync(ctx); err != nil {
		m.Log.Error(err, "Mirroring the config", "file", m.Path())
	}
}

// Sync reads the file once and applies it: a valid file becomes the spec, a missing file an
// empty server list, an invalid file only a ConfigSynced=False condition.
func (m *Mirror) Sync(ctx context.Context) error {
	spec, cond, err := m.read()
	if err != nil {
		return err
	}
	if spec != nil {
		if err := m.apply(ctx, spec); err != nil {
			return err
		}
	}
	return m.setCondition(ctx, cond)
}

// read turns the file into a spec (nil when invalid) and the condition to report.
func (m *Mirror) read() (*v1alpha1.ProjectMCPSpec, metav1.Condition, error) {
	cond := metav1.Condition{Type: v1alpha1.ConditionConfigSynced}
	data, err := readBounded(m.Path())
	switch {
	case errors.Is(err, os.ErrNotExist):
		cond.Status, cond.Reason = metav1.ConditionTrue, v1alpha1.ReasonConfigMissing
		cond.Message = fmt.Sprintf("%s does not exist: the project has no servers", config.DefaultPath)
		return &v1alpha1.ProjectMCPSpec{Project: m.Dir}, cond, nil
	case err != nil:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, v1alpha1.ReasonConfigInvalid, err.Error()
		return nil, cond, nil
	}
	spec, err := config.Parse(config.DefaultPath, data)
	if err != nil {
		cond.Status, cond.Reason = metav1.ConditionFalse, v1alpha1.ReasonConfigInvalid
		cond.Message = truncate(err.Error()+" (the last valid configuration stays in effect)", 32768)
		return nil, cond, nil
	}
	spec.Project = m.Dir
	cond.Status, cond.Reason = metav1.ConditionTrue, v1alpha1.ReasonConfigApplied
	cond.Message = fmt.Sprintf("%s applied: %d servers", config.DefaultPath, len(spec.Servers))
	return spec, cond, nil
}

func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, config.MaxFileSize+1))
}

// apply server-side-applies the spec; fields the file no longer sets are dropped from the
// object because the mirror owned them.
func (m *Mirror) apply(ctx context.Context, spec *v1alpha1.ProjectMCPSpec) error {
	raw, err := json.Marshal(map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(),
		"kind":       "ProjectMCP",
		"metadata":   map[string]any{"name": m.Key.Name, "namespace": m.Key.Namespace},
		"spec":       spec,
	})
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(raw); err != nil {
		return err
	}
	return m.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldManager), client.ForceOwnership)
}

// setCondition records ConfigSynced with an optimistic-lock update (the reconciler writes the
// other conditions the same way, so neither overwrites the other), and a Warning event when
// the file is invalid.
func (m *Mirror) setCondition(ctx context.Context, cond metav1.Condition) error {
	for attempt := 0; ; attempt++ {
		obj := &v1alpha1.ProjectMCP{}
		if err := m.Client.Get(ctx, m.Key, obj); err != nil {
			if apierrors.IsNotFound(err) && cond.Status == metav1.ConditionFalse {
				// An invalid file and no object yet: nothing to keep, nothing to mark.
				m.Log.Info("Config file invalid; no ProjectMCP yet", "error", cond.Message)
				return nil
			}
			return err
		}
		cond.ObservedGeneration = obj.Generation
		oldMessage := ""
		if old := meta.FindStatusCondition(obj.Status.Conditions, cond.Type); old != nil {
			oldMessage = old.Message // copied: SetStatusCondition updates the element in place
		}
		changed := meta.SetStatusCondition(&obj.Status.Conditions, cond)
		if !changed {
			return nil
		}
		err := m.Client.Status().Update(ctx, obj)
		if apierrors.IsConflict(err) && attempt < 5 {
			continue
		}
		if err == nil && cond.Status == metav1.ConditionFalse && oldMessage != cond.Message {
			m.warn(ctx, obj, cond.Message)
		}
		return err
	}
}

// warn records a Warning event on the object. The mirror writes events itself: it runs without
// a manager and emits one only when the file's error changes.
func (m *Mirror) warn(ctx context.Context, obj *v1alpha1.ProjectMCP, msg string) {
	host, _ := os.Hostname()
	ev := &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: obj.Name + "-", Namespace: obj.Namespace},
		EventTime:  metav1.NewMicroTime(time.Now()),
		Regarding: corev1.ObjectReference{
			APIVersion: v1alpha1.GroupVersion.String(), Kind: "ProjectMCP",
			Namespace: obj.Namespace, Name: obj.Name, UID: obj.UID, ResourceVersion: obj.ResourceVersion,
		},
		Type: corev1.EventTypeWarning, Reason: v1alpha1.ReasonConfigInvalid, Action: "Mirror",
		Note:                truncate(msg, 1024),
		ReportingController: "mcp.dsh.dev/" + FieldManager,
		ReportingInstance:   truncate(FieldManager+"-"+host, 128),
	}
	if err := m.Client.Create(ctx, ev); err != nil {
		m.Log.Error(err, "Recording the invalid-config event")
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
