package controllers

import (
	"context"
	"fmt"
	"maps"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/config"
	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/registry"
	"github.com/dsh-dev/projectmcp/internal/share"
)

// ConnDefaults are the connection settings the controller's flags set: conn's own, passed to
// every connection whole, and the project root's confinement, which the controller applies.
type ConnDefaults struct {
	conn.Settings
	// ProjectRootBase confines the project's root a 2025-11-25 server is given (spec.project)
	// to this directory; a project outside it gives its servers no roots. "" allows any.
	ProjectRootBase string
	// RemoteSessions is true when sessions come from other machines (--gateway-auth
	// kubernetes): their folders are not this machine's, so a server shared per worktree is
	// refused (config.WorktreeRefusal).
	RemoteSessions bool
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
	// MaxToolName is the gateway's (gateway.Options.MaxToolName), so that status names tools
	// as sessions see them (zero: toolname.DefaultBudget).
	MaxToolName int
	// Owners says which projects this replica serves (buckets.go); nil: all of them.
	Owners Owners
	// Lifetime, when set, is the context the registry runs in, made from the manager's: with
	// buckets it outlives the manager's until every bucket is handed off, so that the
	// handoffs, not the registry's shutdown, stop the projects' servers.
	Lifetime func(context.Context) context.Context

	reconnects handledReconnects
	taken      chan event.GenericEvent // projects of buckets this replica took (BucketTaken)
	gates      sync.Map                // bucket → *sync.RWMutex (buckets.go)
	consents   *consentWatch           // Secrets' consent annotations; nil: not watched (consent checked at connect only)
	grants     grantKeepers            // the servers' OAuth grants (credentials.go)
	// credentialWake carries the projects whose grant changed (credentials.go)
	credentialWake chan event.GenericEvent
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
	var registryRun manager.Runnable = r.Registry
	if r.Lifetime != nil {
		registryRun = manager.RunnableFunc(func(ctx context.Context) error { return r.Registry.Start(r.Lifetime(ctx)) })
	}
	if err := mgr.Add(registryRun); err != nil {
		return err
	}
	consents, err := newConsentWatch(mgr)
	if err != nil {
		return err
	}
	r.consents = consents
	grants, err := newGrantWatch(mgr)
	if err != nil {
		return err
	}
	r.taken = make(chan event.GenericEvent, takenBuffer)
	r.credentialWake = make(chan event.GenericEvent, credentialWakeBuffer)
	return builder.ControllerManagedBy(mgr).
		For(&v1alpha1.ProjectMCP{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{},
			predicate.LabelChangedPredicate{}))). // the bucket pin
		WatchesRawSource(source.Channel(r.Registry.Events(), wakeUps())).
		WatchesRawSource(source.Channel(r.taken, &handler.EnqueueRequestForObject{})).
		WatchesRawSource(consents.source(r.projectsNaming)).
		WatchesRawSource(grants.source(r)).
		WatchesRawSource(source.Channel(r.credentialWake, wakeUps())).
		WithOptions(controller.Options{MaxConcurrentReconciles: maxConcurrentReconciles, RateLimiter: retryLimiter()}).
		Named("projectmcp").
		Complete(rec)
}

// takenBuffer is how many projects of buckets taken wait to be enqueued before BucketTaken
// blocks: a bucket's projects, times a few buckets taken at once.
const takenBuffer = 1024

// wakeUpPriority is the queue priority of the registry's wake-ups: below a change of spec or
// of the reconnect request (0, controller-runtime's default for an event that changed the
// object) and above resyncs and the initial list (handler.LowPriority). A wake-up only asks
// for status to catch up with the connections (a server became Ready, a session mounted);
// an edit changes what sessions are offered. At 1,000 projects the scale benchmark found the
// queue 30 to 60 deep with wake-ups while edits waited behind them in arrival order, seconds
// before any connection was repointed.
const wakeUpPriority = -1

// wakeUps enqueues the registry's wake-ups at wakeUpPriority (at the default priority when the
// queue is not a priority queue).
func wakeUps() handler.EventHandler {
	return handler.Funcs{GenericFunc: func(_ context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(e.Object)}
		if pq, ok := q.(priorityqueue.PriorityQueue[reconcile.Request]); ok {
			pq.AddWithOpts(priorityqueue.AddOpts{Priority: ptr.To(wakeUpPriority)}, req)
			return
		}
		q.Add(req)
	}}
}

// maxRetryDelay caps the backoff of a failing reconcile. controller-runtime's default grows to
// 16 minutes; a reconcile fails mostly when the API server is away (status writes), and then
// status should catch up within seconds of its return, not minutes.
const maxRetryDelay = 5 * time.Second

// retryLimiter is the per-item exponential backoff, capped at maxRetryDelay, together with an
// overall bucket of 10 retries a second with a burst of 100 (the shape of client-go's default
// controller limiter; controller-runtime's priority queue, which wakeUps needs, would use the
// per-item backoff alone).
func retryLimiter() workqueue.TypedRateLimiter[reconcile.Request] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](5*time.Millisecond, maxRetryDelay),
		&workqueue.TypedBucketRateLimiter[reconcile.Request]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}

// Reconcile follows the usual shape: get, finalize, ensure the finalizer, then observe → plan →
// apply → status.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	obj := &v1alpha1.ProjectMCP{}
	if err := r.Client.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.NamespacedName) // deleted without our finalizer
			if r.Owners != nil {
				r.Owners.Forget(req.NamespacedName)
			}
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, err
	}
	owner, mine, release := r.owns(obj)
	defer release()
	if !mine && r.settling(obj) { // its bucket's renewal is late: neither build nor stop
		return reconcile.Result{RequeueAfter: unsettled}, nil
	}
	if !mine { // another replica serves it, or none yet: hold nothing of it, write nothing
		if r.Registry.Known(req.NamespacedName) {
			r.forget(req.NamespacedName)
		}
		return reconcile.Result{}, nil
	}
	if !obj.DeletionTimestamp.IsZero() {
		r.forget(req.NamespacedName)
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

	consent, err := r.consent(ctx, obj)
	if err != nil {
		return reconcile.Result{}, err
	}
	handled := r.reconnects.handled(obj) // remembered: a failed status write never repeats a rebuild
	desired := desiredOf(obj, handled, consent)
	r.grantHashes(ctx, obj, desired.Servers)
	r.Registry.SetDesired(req.NamespacedName, registry.Desired{
		Servers:      sortedKeys(desired.Servers),
		IdleTimeout:  durationOr(obj.Spec.IdleTimeout, v1alpha1.DefaultIdleTimeout),
		ReadyTimeout: durationOr(obj.Spec.ReadyTimeout, v1alpha1.DefaultReadyTimeout),
		RBAC:         obj.Spec.ToolAuthorization == v1alpha1.ToolAuthorizationRBAC,
		Scopes:       scopesOf(obj),
	})
	actions := Plan(desired, r.Registry.ObserveServers(req.NamespacedName).Servers)
	r.apply(ctx, obj, desired.Servers, actions)
	if !r.stillOwns(obj) {
		if r.settling(obj) { // a renewal is late: what it built stays, status waits
			return reconcile.Result{RequeueAfter: unsettled}, nil
		}
		r.forget(req.NamespacedName) // the bucket was lost while this ran: stop what it built
		return reconcile.Result{}, nil
	}
	if desired.Reconnect != nil {
		handled = r.reconnects.carriedOut(obj)
	}

	obs, now := r.Registry.Observe(req.NamespacedName), r.Clock.Now()
	status := buildStatus(obj, obs, r.endpoint(req.NamespacedName), r.MaxToolName, now)
	status.LastHandledReconnectAt = handled
	r.credentialStatuses(obj, &status, now)
	status.Owner = owner
	if err := r.writeStatus(ctx, obj, status); err != nil {
		return reconcile.Result{}, err
	}
	// A server offering nothing turns dead by time alone: reconcile then, so status says so.
	if next := nextDeadline(obs, now); next > 0 {
		return reconcile.Result{RequeueAfter: next + 100*time.Millisecond}, nil
	}
	return reconcile.Result{}, nil
}

// desiredOf is the planner's view of a ProjectMCP's spec; handled is the reconnect token
// carried out last, consent what the project's Secret says about each server.
func desiredOf(obj *v1alpha1.ProjectMCP, handled string, consent serverConsent) Desired {
	d := Desired{
		Servers:        map[string]string{},
		AlwaysDemanded: durationOr(obj.Spec.IdleTimeout, v1alpha1.DefaultIdleTimeout) == 0,
	}
	for _, s := range obj.Spec.Servers {
		if !s.Disabled {
			d.Servers[s.Name] = plannedHash(s, consent(s))
		}
	}
	d.Reconnect = reconnectRequest(obj, d.Servers, handled)
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
				made, ok := r.Registry.ConnectAll(key, hashes[a.Server], r.connOptions(obj, servers[a.Server]))
				if !ok {
					return // the registry is shutting down
				}
				countAction(key, a)
				note(a.Kind, fmt.Sprintf("server %q %s: %s", a.Server, connectionsClause(made), a.Reason))
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

// connectionsClause names the connections an action built in its event: one as today, several
// (a keyed server's) by count and first id, none (a keyed server no session is bound to yet)
// as waiting for its sessions.
func connectionsClause(made []*conn.Conn) string {
	switch len(made) {
	case 0:
		return "with no connection until a session mounts"
	case 1:
		return "as connection " + made[0].ID()
	}
	return fmt.Sprintf("as %d connections (%s, ...)", len(made), made[0].ID())
}

// scopesOf are the enabled servers' sharing scopes in force (share.Effective).
func scopesOf(obj *v1alpha1.ProjectMCP) map[string]v1alpha1.Share {
	scopes := map[string]v1alpha1.Share{}
	for _, s := range obj.Spec.Servers {
		if !s.Disabled {
			scopes[s.Name], _ = share.Effective(s)
		}
	}
	return scopes
}

// eventReasons names the event each connection-building action records.
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
		Roots:    projectRoots(obj.Spec.Project, r.Conn.ProjectRootBase),
		Server:   srv,
		Policy:   policy,
		Settings: r.Conn.Settings,
	}
	opts.Variables = r.variablesFunc(obj, srv)
	if err := config.WorktreeRefusal(srv, !r.Conn.RemoteSessions); err != nil {
		opts.Variables = refused(err)
	}
	if srv.HTTP != nil && srv.HTTP.OAuth != nil {
		opts.Bearer = r.keeper(obj, srv.Name)
	}
	return opts
}

// refused is the Variables of a server the controller will not start: every connect attempt
// fails at once, for good, and the server's status says why (a spec written without the
// mirror, which refuses the same file, reaches this).
func refused(err error) func(context.Context) (map[string]string, error) {
	return func(context.Context) (map[string]string, error) { return nil, &specRefusal{err} }
}

// specRefusal is a permanent failure: retrying cannot heal a spec the controller refuses.
type specRefusal struct{ error }

func (specRefusal) Permanent() bool { return true }

// projectRoots is what a server's roots/list gets when no session is involved: the project's
// folder, when spec.project names a local absolute path.
func projectRoots(project, base string) []*mcp.Root {
	if !filepath.IsAbs(project) || !within(project, base) {
		return nil
	}
	return []*mcp.Root{{URI: (&url.URL{Scheme: "file", Path: filepath.ToSlash(project)}).String(), Name: filepath.Base(project)}}
}

// within reports whether path lies in the directory base, by its cleaned name ("" admits
// every path): a root is a name a server opens on its own side, so the controller checks the
// name, not what the name points at on the controller's file system.
func within(path, base string) bool {
	if base == "" {
		return true
	}
	rel, err := filepath.Rel(filepath.Clean(base), filepath.Clean(path))
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// forget drops what the reconciler holds of a deleted project.
func (r *Reconciler) forget(key types.NamespacedName) {
	r.Registry.Forget(key)
	r.reconnects.forget(key)
	r.pruneGrants(key, nil)
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
