package controllers

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/metrics"
	"github.com/dsh-dev/projectmcp/internal/registry"
)

// ConnDefaults are the connection timings the controller's flags set.
type ConnDefaults struct {
	// AllowCommands restricts stdio commands (globs); nil allows every command.
	AllowCommands []string
	// Isolation is what stdio server processes get from the controller.
	Isolation      conn.Isolation
	ConnectTimeout time.Duration
	HealthInterval time.Duration
	RelistInterval time.Duration
}

// Reconciler makes the registry's connections match each ProjectMCP's spec. It is the only
// code that creates, repoints, retires or rebuilds connections.
type Reconciler struct {
	Client    client.Client
	APIReader client.Reader // uncached: Secrets are read at connect time, never cached
	Registry  *registry.Registry
	Recorder  events.EventRecorder
	Clock     clock.PassiveClock
	Conn      ConnDefaults
	// Endpoint returns the gateway URL of a project, or "" when no gateway runs.
	Endpoint func(types.NamespacedName) string
}

// maxConcurrentReconciles is how many projects are reconciled at once. A reconcile spends most
// of its time waiting for the API server (the finalizer, the status patch), so this bounds
// the rate at which projects come up: with 4, 1,000 new projects took minutes on a loaded API
// server (the scale benchmark); the work of one reconcile is that project's alone.
const maxConcurrentReconciles = 16

// SetupWithManager registers the reconciler and the registry with a manager. The registry's
// wake-ups (connection state changes, mounts, releases, idle reclaims) arrive through a
// source.Channel.
func (r *Reconciler) SetupWithManager(mgr manager.Manager) error {
	return r.setupWithManager(mgr, r)
}

// setupWithManager registers rec, which is r or (in tests) a wrapper around it.
func (r *Reconciler) setupWithManager(mgr manager.Manager, rec reconcile.Reconciler) error {
	if err := mgr.Add(r.Registry); err != nil {
		return err
	}
	return builder.ControllerManagedBy(mgr).
		For(&v1alpha1.ProjectMCP{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		WatchesRawSource(source.Channel(r.Registry.Events(), &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: maxConcurrentReconciles}).
		Named("projectmcp").
		Complete(rec)
}

// Reconcile follows the usual shape: get, finalize, ensure the finalizer, then observe → plan →
// apply → status.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	obj := &v1alpha1.ProjectMCP{}
	if err := r.Client.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			r.Registry.Forget(req.NamespacedName) // deleted without our finalizer
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, err
	}
	if !obj.DeletionTimestamp.IsZero() {
		r.Registry.Forget(req.NamespacedName)
		if controllerutil.RemoveFinalizer(obj, v1alpha1.Finalizer) {
			return reconcile.Result{}, r.Client.Update(ctx, obj)
		}
		return reconcile.Result{}, nil
	}
	if controllerutil.AddFinalizer(obj, v1alpha1.Finalizer) {
		if err := r.Client.Update(ctx, obj); err != nil {
			return reconcile.Result{}, err
		}
	}

	desired := desiredOf(obj)
	r.Registry.SetDesired(req.NamespacedName, registry.Desired{
		Servers:      sortedKeys(desired.Servers),
		IdleTimeout:  durationOr(obj.Spec.IdleTimeout, v1alpha1.DefaultIdleTimeout),
		ReadyTimeout: durationOr(obj.Spec.ReadyTimeout, v1alpha1.DefaultReadyTimeout),
	})
	actions := Plan(desired, r.Registry.ObserveServers(req.NamespacedName).Servers)
	r.apply(ctx, obj, desired.Servers, actions)

	obs, now := r.Registry.Observe(req.NamespacedName), r.Clock.Now()
	for attempt := 0; ; attempt++ {
		status := buildStatus(obj, obs, r.endpoint(req.NamespacedName), now)
		if desired.Reconnect != nil {
			status.LastHandledReconnectAt = obj.Annotations[v1alpha1.AnnotationReconnectRequestedAt]
		}
		err := r.writeStatus(ctx, obj, status)
		if errors.Is(err, errRequeue) && attempt == 0 {
			// Mostly the cache has not yet seen this controller's own last status write (the
			// registry's wake-ups come faster than the watch when the API server is busy: a
			// third of the writes at 1,000 projects under load). Read the object live and write
			// once more, unless what was planned from is stale too; requeueing instead read the
			// same stale object again 50 ms later.
			if fresh := r.unchangedLive(ctx, obj); fresh != nil {
				obj = fresh
				continue
			}
		}
		if errors.Is(err, errRequeue) {
			return reconcile.Result{RequeueAfter: 50 * time.Millisecond}, nil
		} else if err != nil {
			return reconcile.Result{}, err
		}
		break
	}
	// A server without tools turns dead by time alone: reconcile then, so status says so.
	if next := nextDeadline(obs, now); next > 0 {
		return reconcile.Result{RequeueAfter: next + 100*time.Millisecond}, nil
	}
	return reconcile.Result{}, nil
}

// unchangedLive reads the object from the API server, and returns it when its spec (the
// generation), its reconnect request and its deletion are still what obj says, so that only
// status and metadata may differ: nil otherwise, or when it cannot be read.
func (r *Reconciler) unchangedLive(ctx context.Context, obj *v1alpha1.ProjectMCP) *v1alpha1.ProjectMCP {
	if r.APIReader == nil {
		return nil
	}
	fresh := &v1alpha1.ProjectMCP{}
	if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: obj.Namespace, Name: obj.Name}, fresh); err != nil {
		return nil
	}
	key := v1alpha1.AnnotationReconnectRequestedAt
	if fresh.Generation != obj.Generation || fresh.Annotations[key] != obj.Annotations[key] || !fresh.DeletionTimestamp.IsZero() {
		return nil
	}
	return fresh
}

// desiredOf is the planner's view of a ProjectMCP's spec.
func desiredOf(obj *v1alpha1.ProjectMCP) Desired {
	d := Desired{
		Servers:        map[string]string{},
		AlwaysDemanded: durationOr(obj.Spec.IdleTimeout, v1alpha1.DefaultIdleTimeout) == 0,
	}
	for _, s := range obj.Spec.Servers {
		if !s.Disabled {
			d.Servers[s.Name] = ConfigHash(s)
		}
	}
	d.Reconnect = reconnectRequest(obj, d.Servers)
	return d
}

// apply carries out the plan, one goroutine per action (each touches a different server), and
// records one event per kind of action naming every server it touched: a new project with
// three servers costs the API server one event write, not three.
// hashes are the planner's config hashes of the enabled servers.
func (r *Reconciler) apply(ctx context.Context, obj *v1alpha1.ProjectMCP, hashes map[string]string, actions []Action) {
	key := types.NamespacedName{Namespace: obj.Namespace, Name: obj.Name}
	servers := map[string]v1alpha1.MCPServer{}
	for _, s := range obj.Spec.Servers {
		servers[s.Name] = s
	}
	var mu sync.Mutex
	done := map[ActionKind][]string{} // what each kind of action did, a clause per server
	note := func(kind ActionKind, clause string) {
		mu.Lock()
		defer mu.Unlock()
		done[kind] = append(done[kind], clause)
	}
	var wg sync.WaitGroup
	for _, a := range actions {
		wg.Go(func() {
			switch a.Kind {
			case ActionRetire:
				r.Registry.Retire(key, a.Server)
				note(a.Kind, fmt.Sprintf("server %q: %s", a.Server, a.Reason))
			case ActionCreate, ActionRepoint, ActionRebuild:
				// Tears the old connection down first; its tools stay listed until the new
				// one is up.
				c := r.Registry.Connect(key, hashes[a.Server], r.connOptions(obj, servers[a.Server]))
				if c == nil {
					return // the registry is shutting down
				}
				note(a.Kind, fmt.Sprintf("server %q as connection %s: %s", a.Server, c.ID(), a.Reason))
			}
		})
	}
	wg.Wait()
	for _, kind := range []ActionKind{ActionCreate, ActionRepoint, ActionRebuild, ActionRetire} {
		if clauses := done[kind]; len(clauses) > 0 {
			slices.Sort(clauses) // by server name
			reason := eventReasons[kind]
			r.event(obj, corev1.EventTypeNormal, reason, string(kind), "%s %s", reason, strings.Join(clauses, "; "))
		}
	}
}

// errRequeue asks for another reconcile after a status write conflict; it is expected and not
// logged as a failure by callers that check for it.
var errRequeue = errors.New("status changed concurrently; reconciling again")

// eventReasons names the event each action records.
var eventReasons = map[ActionKind]string{
	ActionCreate:  v1alpha1.EventCreated,
	ActionRepoint: v1alpha1.EventRepointed,
	ActionRebuild: v1alpha1.EventRebuilt,
	ActionRetire:  v1alpha1.EventRetired,
}

// connOptions are a server's connection options: the reconnect budget from spec and the
// project's Secret as the source of ${VAR} values.
func (r *Reconciler) connOptions(obj *v1alpha1.ProjectMCP, srv v1alpha1.MCPServer) conn.Options {
	policy := conn.Policy{
		MaxAttempts:    int(v1alpha1.DefaultMaxAttempts),
		InitialBackoff: v1alpha1.DefaultInitialBackoff,
		MaxBackoff:     v1alpha1.DefaultMaxBackoff,
	}
	if rc := obj.Spec.Reconnect; rc != nil {
		if rc.MaxAttempts != nil {
			policy.MaxAttempts = int(*rc.MaxAttempts)
		}
		policy.InitialBackoff = durationOr(rc.InitialBackoff, policy.InitialBackoff)
		policy.MaxBackoff = durationOr(rc.MaxBackoff, policy.MaxBackoff)
	}
	opts := conn.Options{
		Roots:          projectRoots(obj.Spec.Project),
		Server:         srv,
		Policy:         policy,
		AllowCommands:  r.Conn.AllowCommands,
		Isolation:      r.Conn.Isolation,
		ConnectTimeout: r.Conn.ConnectTimeout,
		HealthInterval: r.Conn.HealthInterval,
		RelistInterval: r.Conn.RelistInterval,
	}
	if ref := obj.Spec.SecretRef; ref != nil && ref.Name != "" {
		key := types.NamespacedName{Namespace: obj.Namespace, Name: ref.Name}
		opts.Variables = func(ctx context.Context) (map[string]string, error) {
			secret := &corev1.Secret{}
			if err := r.APIReader.Get(ctx, key, secret); err != nil {
				return nil, fmt.Errorf("secret %q: %w", ref.Name, err)
			}
			vars := make(map[string]string, len(secret.Data))
			for k, v := range secret.Data {
				vars[k] = string(v)
			}
			return vars, nil
		}
	}
	return opts
}

// projectRoots is what a server's roots/list gets when no session is involved: the project's
// folder, when spec.project names a local absolute path.
func projectRoots(project string) []*mcp.Root {
	if !filepath.IsAbs(project) {
		return nil
	}
	return []*mcp.Root{{URI: (&url.URL{Scheme: "file", Path: filepath.ToSlash(project)}).String(), Name: filepath.Base(project)}}
}

// writeStatus patches status when it changed, and records events for servers that failed or
// were reclaimed since the last write.
func (r *Reconciler) writeStatus(ctx context.Context, obj *v1alpha1.ProjectMCP, status v1alpha1.ProjectMCPStatus) error {
	if equality.Semantic.DeepEqual(obj.Status, status) {
		return nil
	}
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
	// The optimistic lock keeps this write from overwriting a ConfigSynced condition the
	// mirror set since obj was read: on conflict the reconcile runs again with fresh state.
	patch := client.MergeFromWithOptions(obj.DeepCopy(), client.MergeFromWithOptimisticLock{})
	obj.Status = status
	if err := r.Client.Status().Patch(ctx, obj, patch); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		if apierrors.IsConflict(err) {
			metrics.StatusWrites.WithLabelValues("conflict").Inc()
			return errRequeue
		}
		metrics.StatusWrites.WithLabelValues("error").Inc()
		return err
	}
	metrics.StatusWrites.WithLabelValues("ok").Inc()
	log.FromContext(ctx).V(1).Info("Updated status", "ready", status.ReadyServers, "tools", status.ToolCount, "sessions", status.SessionCount)
	return nil
}

func (r *Reconciler) event(obj *v1alpha1.ProjectMCP, kind, reason, action, format string, args ...any) {
	if r.Recorder != nil {
		r.Recorder.Eventf(obj, nil, kind, reason, action, format, args...)
	}
}

func (r *Reconciler) endpoint(key types.NamespacedName) string {
	if r.Endpoint == nil {
		return ""
	}
	return r.Endpoint(key)
}

// durationOr is d, or def when spec leaves it unset (objects admitted before defaulting).
func durationOr(d *metav1.Duration, def time.Duration) time.Duration {
	if d == nil {
		return def
	}
	return d.Duration
}

func sortedKeys(m map[string]string) []string {
	return slices.Sorted(maps.Keys(m))
}
