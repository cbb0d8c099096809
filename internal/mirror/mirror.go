// Package mirror keeps a ProjectMCP in step with a project's .dsh/mcp.json.
//
// The file is the single source of truth, but a file being edited is often briefly invalid: an
// invalid file never replaces the last good spec. The mirror reports it in the ConfigSynced
// condition (with the parser's file, line and column) and a Warning event, and the running
// connections stay as they are until the file is fixed.
package mirror

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/config"
	"github.com/dsh-dev/projectmcp/internal/projectfs"
)

// FieldManager owns what the mirror applies (server-side apply): the spec fields from the file,
// and the ConfigSynced condition in status.
const FieldManager = "projectmcp-mirror"

// debounce lets a burst of writes (editors write, rename and chmod) settle into one sync.
const debounce = 150 * time.Millisecond

// Retries of a failed sync (the API server down, unreachable or refusing a write) back off
// exponentially between these bounds, with jitter, until one succeeds.
const (
	retryInitial = 500 * time.Millisecond
	retryMax     = 30 * time.Second
)

// syncTimeout bounds one sync, so that an API server that accepts connections and never
// answers delays the next attempt rather than stopping the mirror.
const syncTimeout = time.Minute

// DefaultResync is how often the file is applied again when nothing changed.
const DefaultResync = 5 * time.Minute

// Mirror mirrors one project directory into one ProjectMCP.
type Mirror struct {
	Client client.Client
	Dir    string // the project directory (holding .dsh/); may be, or lie under, a symlink
	Key    types.NamespacedName
	Log    logr.Logger
	// Resync is how often the file is applied again although no change was seen (default
	// DefaultResync): it repairs an object edited or deleted behind the mirror's back, and a
	// change the watcher missed.
	Resync time.Duration
	// PublishPath writes Dir into spec.project. A controller on this machine gives that folder
	// to the servers as their root (projectmcp dev, whose controller is the same process); to
	// any other controller it is a path on a machine it cannot see, which only tells everyone
	// who reads the object the user's name and directory layout, so spec.project stays empty.
	PublishPath bool
	// MissingGrace is how long a file that was there must stay missing before the project's
	// servers go (default DefaultMissingGrace).
	MissingGrace time.Duration
	// OnRead, when set, is called with the ConfigSynced condition of every read of the file,
	// from Run's goroutine, before it is applied: projectmcp dev prints a refused file's
	// errors where its user looks, the moment it is read.
	OnRead func(metav1.Condition)

	seen bool // the last read found the file (Run's goroutine alone)
}

// DefaultMissingGrace is how long a file that disappears must stay gone before it counts as
// removed: an editor's unlink-then-write, a branch switch or a remounting volume leave it
// missing for a moment, and taking that for "no servers" would retire every connection (and
// end every session's calls) only to make them all again.
const DefaultMissingGrace = 2 * time.Second

// Path is the config file the mirror reads.
func (m *Mirror) Path() string { return filepath.Join(m.Dir, config.DefaultPath) }

// Run syncs once, then again after every change of the file, until ctx ends. It watches the
// directories rather than the file, so that editors that save by renaming a new file over
// the old one, and a .dsh directory created later, are seen. A sync that fails is retried with
// backoff until it succeeds; every Resync, and when the watcher overflows, the file is applied
// again anyway. When the directory is reached through a symlink that is swapped (git-sync moves
// a new link over the old one), the watches move to the new target.
func (m *Mirror) Run(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer w.Close()
	ws := &watches{w: w, dir: m.Dir}
	if err := ws.update(); err != nil {
		return err
	}
	return m.loop(ctx, ws, w.Events, w.Errors)
}

// loop is Run's event loop, over the watcher's channels.
func (m *Mirror) loop(ctx context.Context, ws *watches, events <-chan fsnotify.Event, errs <-chan error) error {
	resyncEvery := m.Resync
	if resyncEvery <= 0 {
		resyncEvery = DefaultResync
	}
	resync := time.NewTicker(resyncEvery)
	defer resync.Stop()
	// timer fires the next sync: after a debounce, or a failed sync's backoff.
	timer := time.NewTimer(0)
	defer timer.Stop()
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-events:
			if !ok {
				return nil
			}
			if ws.relevant(ev) {
				timer.Reset(debounce)
			}
		case err, ok := <-errs:
			if !ok {
				return nil
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				// Changes were lost: read everything again.
				m.Log.Info("File watcher overflowed; syncing again", "file", m.Path())
				timer.Reset(debounce)
				continue
			}
			m.Log.Error(err, "Watching the project directory")
		case <-resync.C:
			timer.Reset(0)
		case <-timer.C:
			if err := ws.update(); err != nil {
				m.Log.Error(err, "Watching the project directory again")
			}
			sctx, cancel := context.WithTimeout(ctx, syncTimeout)
			err := m.Sync(sctx)
			cancel()
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				failures++
				wait := retryDelay(failures)
				m.Log.Error(err, "Mirroring the config; retrying", "file", m.Path(), "attempt", failures, "retryIn", wait.Round(time.Millisecond).String())
				timer.Reset(wait)
				continue
			}
			if failures > 0 {
				m.Log.Info("Mirroring the config succeeded after retries", "file", m.Path(), "attempts", failures+1)
			}
			failures = 0
		}
	}
}

// retryDelay is the wait before retry n (from 1): exponential from retryInitial, capped at
// retryMax, with ±20% jitter so that the mirrors of many projects do not retry in lockstep.
func retryDelay(n int) time.Duration {
	d := retryInitial
	for i := 1; i < n && d < retryMax; i++ {
		d *= 2
	}
	d = min(d, retryMax)
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// watches are the directories the mirror watches: the project directory, its .dsh, and the
// directory holding each symlink on the way to it, where a swap of that link shows. inotify
// watches the directory a path resolves to when it is added, so when a link is swapped the
// watches are added again.
type watches struct {
	w        *fsnotify.Watcher
	dir      string
	resolved string          // dir with every symlink resolved, when last watched
	links    map[string]bool // the symlinks on the way to dir
	added    []string
}

// update (re)adds the watches when the project directory resolves elsewhere than when they
// were added (and the first time).
func (ws *watches) update() error {
	resolved, err := filepath.EvalSymlinks(ws.dir)
	if err != nil {
		return fmt.Errorf("watching %s: %w", ws.dir, err)
	}
	if resolved == ws.resolved {
		return nil
	}
	for _, p := range ws.added {
		_ = ws.w.Remove(p) // fails for a directory already deleted; nothing to remove then
	}
	ws.added, ws.links, ws.resolved = nil, map[string]bool{}, ""
	if err := ws.w.Add(ws.dir); err != nil {
		return fmt.Errorf("watching %s: %w", ws.dir, err)
	}
	ws.added = append(ws.added, ws.dir)
	if ws.w.Add(ws.dsh()) == nil { // may not exist yet; added when it appears
		ws.added = append(ws.added, ws.dsh())
	}
	for p := filepath.Clean(ws.dir); filepath.Dir(p) != p; p = filepath.Dir(p) {
		if fi, err := os.Lstat(p); err != nil || fi.Mode()&os.ModeSymlink == 0 {
			continue
		}
		ws.links[p] = true
		if parent := filepath.Dir(p); !slices.Contains(ws.added, parent) {
			if err := ws.w.Add(parent); err != nil {
				return fmt.Errorf("watching %s for swaps of the link %s: %w", parent, p, err)
			}
			ws.added = append(ws.added, parent)
		}
	}
	ws.resolved = resolved // only now: a failed update is tried again at the next sync
	return nil
}

func (ws *watches) dsh() string { return filepath.Join(ws.dir, filepath.Dir(config.DefaultPath)) }

// relevant reports whether an event may change what the mirror reads: the config file, the
// .dsh directory (watched as soon as it appears), or a symlink on the way to the project.
func (ws *watches) relevant(ev fsnotify.Event) bool {
	dsh := ws.dsh()
	if ev.Name == dsh && ev.Has(fsnotify.Create) && ws.w.Add(dsh) == nil && !slices.Contains(ws.added, dsh) {
		ws.added = append(ws.added, dsh)
	}
	return ev.Name == dsh || ev.Name == filepath.Join(ws.dir, config.DefaultPath) || ws.links[ev.Name]
}

// Sync reads the file once and applies it: a valid file becomes the spec, a missing file an
// empty server list, an invalid file only a ConfigSynced=False condition.
func (m *Mirror) Sync(ctx context.Context) error {
	spec, cond, err := m.read(ctx)
	if err != nil {
		return err
	}
	if m.OnRead != nil {
		m.OnRead(cond)
	}
	if spec != nil {
		if err := m.apply(ctx, spec); err != nil {
			return err
		}
	}
	return m.setCondition(ctx, cond)
}

// read turns the file into a spec (nil when invalid) and the condition to report. The
// condition, and the event made of it, go to everyone who may read the object: they name the
// file by its path in the project, never by its path on this machine.
func (m *Mirror) read(ctx context.Context) (*v1alpha1.ProjectMCPSpec, metav1.Condition, error) {
	cond := metav1.Condition{Type: v1alpha1.ConditionConfigSynced}
	project := ""
	if m.PublishPath {
		project = m.Dir
	}
	data, err := m.readFile()
	if errors.Is(err, os.ErrNotExist) && m.seen {
		if data, err = m.readAgain(ctx); ctx.Err() != nil {
			return nil, cond, ctx.Err()
		}
	}
	m.seen = err == nil
	switch {
	case errors.Is(err, os.ErrNotExist):
		cond.Status, cond.Reason = metav1.ConditionTrue, v1alpha1.ReasonConfigMissing
		cond.Message = fmt.Sprintf("%s does not exist: the project has no servers", config.DefaultPath)
		return &v1alpha1.ProjectMCPSpec{Project: project}, cond, nil
	case err != nil:
		cond.Status, cond.Reason = metav1.ConditionFalse, v1alpha1.ReasonConfigInvalid
		cond.Message = readProblem(err) + " (the last valid configuration stays in effect)"
		return nil, cond, nil
	}
	spec, err := config.Parse(config.DefaultPath, data)
	if err != nil {
		cond.Status, cond.Reason = metav1.ConditionFalse, v1alpha1.ReasonConfigInvalid
		cond.Message = truncate(err.Error()+" (the last valid configuration stays in effect)", 32768)
		return nil, cond, nil //nolint:nilerr // an invalid configuration is reported in the condition; the mirror goes on
	}
	spec.Project = project
	if err := config.ExpandPlace(spec, m.place(project)); err != nil {
		cond.Status, cond.Reason = metav1.ConditionFalse, v1alpha1.ReasonConfigInvalid
		cond.Message = truncate(err.Error()+" (the last valid configuration stays in effect)", 32768)
		return nil, cond, nil //nolint:nilerr // as for a file the reader refuses
	}
	cond.Status, cond.Reason = metav1.ConditionTrue, v1alpha1.ReasonConfigApplied
	cond.Message = fmt.Sprintf("%s applied: %d servers", config.DefaultPath, len(spec.Servers))
	if unacted := config.Unacted(spec); len(unacted) > 0 {
		cond.Message = truncate(cond.Message+"; "+strings.Join(unacted, "; "), 32768)
	}
	return spec, cond, nil
}

// place is where the project's servers run, for config.ExpandPlace: the project folder is
// spec.project; the user's home is known only to a controller on this machine (PublishPath),
// whose servers run as this user beside the sessions' folders.
func (m *Mirror) place(project string) config.Place {
	p := config.Place{ProjectDir: project, Local: m.PublishPath}
	if m.PublishPath {
		p.UserHome, _ = os.UserHomeDir()
	}
	return p
}

// readAgain reads the file once more after the grace, for a file that was there a moment ago.
func (m *Mirror) readAgain(ctx context.Context) ([]byte, error) {
	grace := m.MissingGrace
	if grace <= 0 {
		grace = DefaultMissingGrace
	}
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.C:
	}
	return m.readFile()
}

// readFile reads the config file, refusing a symlink on the way to it that leads out of the
// project folder (a cloned repository's link to a file of the user's, which the mirror would
// otherwise publish into the cluster). Where such a link points is logged here, on the user's
// machine, and not written into the object.
func (m *Mirror) readFile() ([]byte, error) {
	path, err := projectfs.Resolve(m.Dir, config.DefaultPath)
	var link *projectfs.LinkError
	if errors.As(err, &link) {
		m.Log.Info("Not reading the config through a symlink", "link", filepath.Join(m.Dir, link.Link), "target", link.Target, "dangling", link.Dangling)
	}
	if err != nil {
		return nil, err
	}
	return readBounded(path)
}

// readProblem says why the config file could not be read, naming it by its path in the
// project.
func readProblem(err error) string {
	var link *projectfs.LinkError
	var notRegular *projectfs.NotRegularError
	var pathErr *fs.PathError
	switch {
	case errors.As(err, &link) && link.Dangling:
		return fmt.Sprintf("%s is a symlink to nothing, so %s is not read", link.Link, config.DefaultPath)
	case errors.As(err, &link):
		return fmt.Sprintf("%s is a symlink that leads out of the project folder, so %s is not read (the mirror's log says where it points); "+
			"make it a real file or directory, or a link that stays in the folder", link.Link, config.DefaultPath)
	case errors.As(err, &notRegular):
		return err.Error()
	case errors.As(err, &pathErr):
		return fmt.Sprintf("%s: %s: %v", config.DefaultPath, pathErr.Op, pathErr.Err)
	}
	return fmt.Sprintf("%s could not be read", config.DefaultPath)
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
	ac, err := v1alpha1.ApplyConfiguration(m.Key, "spec", spec)
	if err != nil {
		return err
	}
	return m.Client.Apply(ctx, ac, client.FieldOwner(FieldManager), client.ForceOwnership)
}

// setCondition records ConfigSynced, and a Warning event when the file's error is new.
//
// The condition is server-side-applied alone, under the mirror's field manager: status has
// another writer, the reconciler, which applies its own conditions (Ready, Degraded) and the
// rest of status under its own manager, and status.conditions merges by type, so neither write
// drops the other's fields, whatever either had read. No write names a resourceVersion, so
// there is no conflict to retry. The Get before it gives the generation the condition
// observes, the transition time to keep while the status stays the same, and the message the
// object had.
func (m *Mirror) setCondition(ctx context.Context, cond metav1.Condition) error {
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
	cond.LastTransitionTime = metav1.Now()
	old := meta.FindStatusCondition(obj.Status.Conditions, cond.Type)
	if old != nil && old.Status == cond.Status {
		cond.LastTransitionTime = old.LastTransitionTime
	}
	ac, err := v1alpha1.ApplyConfiguration(m.Key, "status", map[string]any{"conditions": []metav1.Condition{cond}})
	if err != nil {
		return err
	}
	if err := m.Client.Status().Apply(ctx, ac, client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return err
	}
	if cond.Status == metav1.ConditionFalse && (old == nil || old.Message != cond.Message) {
		m.warn(ctx, obj, cond.Message)
	}
	return nil
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
