package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"golang.org/x/time/rate"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
)

// lookupTimeout bounds reading a ProjectMCP when deciding between 404 and waiting.
const lookupTimeout = 5 * time.Second

// awaitProject serves a request for a project the registry does not know yet. A ProjectMCP
// that exists is only waiting for its first reconcile (it was just created, or the controller
// has just started), so the request waits for that, bounded by the project's readyTimeout (the
// default when readyTimeout is 0: 0 means "do not wait for servers", not "refuse sessions"),
// and is then served as a normal mount, which waits for readiness as usual. Only a project
// that does not exist (or is being deleted) gets 404, at once; a project still not set up
// when the budget ends gets 503 with Retry-After.
//
// A request that names a session (Mcp-Session-Id) gets 404 at once: sessions live in the
// registry's project, so an unknown project has none, and the spec tells the client to
// re-initialize, which is the request that waits.
//
// Confirming a miss against the API server is bounded (see lookup): past a principal's budget
// of confirmations the request gets 429 without one.
func (g *Gateway) awaitProject(r *http.Request, principal string, key types.NamespacedName) (*project, int, string) {
	notFound := fmt.Sprintf("no ProjectMCP %s", key)
	if g.opts.Objects == nil {
		return nil, http.StatusNotFound, notFound
	}
	if r.Header.Get("Mcp-Session-Id") != "" {
		return nil, http.StatusNotFound, "session not found"
	}
	obj, err := g.lookup(r.Context(), principal, key)
	switch {
	case apierrors.IsNotFound(err):
		return nil, http.StatusNotFound, notFound
	case errors.Is(err, errTooManyConfirmations):
		return nil, http.StatusTooManyRequests, fmt.Sprintf("ProjectMCP %s is not in the gateway's cache, and the gateway confirms no more missing projects against the API server now (this caller's budget, or all callers', is spent); retry", key)
	case err != nil:
		g.opts.Log.Info("Reading a ProjectMCP for a session failed", "projectmcp", key.String(), "error", err.Error())
		return nil, http.StatusServiceUnavailable, fmt.Sprintf("ProjectMCP %s could not be read; retry", key)
	case !obj.DeletionTimestamp.IsZero():
		return nil, http.StatusNotFound, notFound
	}
	budget := v1alpha1.DefaultReadyTimeout
	if rt := obj.Spec.ReadyTimeout; rt != nil && rt.Duration > 0 {
		budget = rt.Duration
	}
	ctx, cancel := context.WithTimeout(r.Context(), budget)
	defer cancel()
	if !g.waitKnown(ctx, key) {
		if g.moved(key) {
			return nil, statusMoved, ""
		}
		return nil, http.StatusServiceUnavailable, fmt.Sprintf("ProjectMCP %s is not set up yet; retry", key)
	}
	if p := g.project(key); p != nil {
		return p, 0, ""
	}
	return nil, http.StatusNotFound, notFound // deleted while the request waited
}

// statusMoved is awaitProject's answer for a project this replica stopped serving while the
// request waited: serveProject answers it moved.
const statusMoved = -1

// waitKnown waits within ctx for the reconciler to set the project up, and reports whether it
// did; it stops waiting as soon as this replica no longer serves the project.
func (g *Gateway) waitKnown(ctx context.Context, key types.NamespacedName) bool {
	if g.opts.Serving == nil {
		return g.opts.Registry.WaitKnown(ctx, key) != 0
	}
	for ctx.Err() == nil && !g.moved(key) {
		step, cancel := context.WithTimeout(ctx, servingPoll)
		known := g.opts.Registry.WaitKnown(step, key) != 0
		cancel()
		if known {
			return true
		}
	}
	return false
}

// servingPoll is how often a request waiting for its project looks whether the project is
// still this replica's.
const servingPoll = 50 * time.Millisecond

// lookup reads a ProjectMCP from the cache, and confirms a miss against the API server: an
// object created a moment ago may not have reached the cache yet. A confirmed miss is
// remembered for missTTL, so a project that does not exist costs one live read per missTTL
// however often it is asked for; each principal may cause confirmRate live reads a second
// (burst confirmBurst), and all principals together confirmAllRate (burst confirmAllBurst):
// past either, errTooManyConfirmations and no read.
func (g *Gateway) lookup(ctx context.Context, principal string, key types.NamespacedName) (*v1alpha1.ProjectMCP, error) {
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	obj := &v1alpha1.ProjectMCP{}
	err := g.opts.Objects.Get(ctx, key, obj)
	if !apierrors.IsNotFound(err) || g.opts.Live == nil {
		return obj, err
	}
	if _, ok := g.misses.Get(key); ok {
		return obj, err
	}
	now := g.opts.Clock.Now()
	if !g.confirmations(principal).AllowN(now, 1) || !g.confirmAll.AllowN(now, 1) {
		return obj, errTooManyConfirmations
	}
	err = g.opts.Live.Get(ctx, key, obj)
	if apierrors.IsNotFound(err) {
		g.misses.Add(key, struct{}{}, missTTL)
	}
	return obj, err
}

// missTTL is how long a miss confirmed against the API server answers for its project. An
// object created meanwhile is still found as soon as the cache has it.
const missTTL = 3 * time.Second

// confirmRate and confirmBurst bound the live reads one principal may cause: a few projects
// created a moment ago, not a loop over names that do not exist. confirmAllRate and
// confirmAllBurst bound those of every principal together, so that many identities do not
// multiply them: the controller's client does not throttle itself, and these reads share the
// API server's fairness with its reconciles and status writes. Ten principals at their full
// rate fill it; a team creating 50 projects at once is confirmed at once.
const (
	confirmRate     = 2
	confirmBurst    = 10
	confirmAllRate  = 20
	confirmAllBurst = 50
)

// maxConfirmEntries bounds the confirmed misses remembered and the principals' budgets.
const maxConfirmEntries = 4096

var errTooManyConfirmations = errors.New("too many confirmations of missing projects")

// confirmations is the principal's budget of live reads.
func (g *Gateway) confirmations(principal string) *rate.Limiter {
	g.confirmMu.Lock()
	defer g.confirmMu.Unlock()
	if v, ok := g.confirmers.Get(principal); ok {
		return v.(*rate.Limiter)
	}
	l := rate.NewLimiter(confirmRate, confirmBurst)
	g.confirmers.Add(principal, l, time.Hour)
	return l
}
