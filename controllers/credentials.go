package controllers

import (
	"context"

	"fmt"
	"net/http"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/oauth"
	"github.com/dsh-dev/projectmcp/internal/policy"
)

// The controller is the custodian of each server's OAuth grant: `projectmcp login` writes the
// grant's Secret with its user's RBAC, and from then on one oauth.Keeper per (project, server)
// on the replica serving the project reads it, hands its token to the server's connections,
// refreshes it (once, however many sessions call), and writes rotated refresh tokens back. A
// grant that needs a new login withdraws the server's tools (its connection is rebuilt and
// fails naming the command); a new grant Secret brings them back.

// grantKey names one grant: a project's server.
type grantKey struct {
	project types.NamespacedName
	server  string
}

// grantKeepers are the keepers of the grants of the projects this replica serves.
type grantKeepers struct {
	mu sync.Mutex
	m  map[grantKey]*oauth.Keeper
}

// keeper is the keeper of a project's server's grant, made on first use.
func (r *Reconciler) keeper(obj *v1alpha1.ProjectMCP, server string) *oauth.Keeper {
	key := grantKey{project: client.ObjectKeyFromObject(obj), server: server}
	r.grants.mu.Lock()
	defer r.grants.mu.Unlock()
	if k, ok := r.grants.m[key]; ok {
		return k
	}
	if r.grants.m == nil {
		r.grants.m = map[grantKey]*oauth.Keeper{}
	}
	store := &secretStore{reader: r.APIReader, writer: r.Client, project: obj.Name, server: server,
		key: types.NamespacedName{Namespace: obj.Namespace, Name: oauth.SecretName(obj.Name, server)}}
	ref := &v1alpha1.ProjectMCP{ObjectMeta: metav1.ObjectMeta{Name: obj.Name, Namespace: obj.Namespace, UID: obj.UID}}
	signIn := fmt.Sprintf("projectmcp login %s %s -n %s", obj.Name, server, obj.Namespace)
	k := oauth.NewKeeper(store, r.tokenClient(), signIn, func(st oauth.Status) { r.credentialChanged(ref, server, st) })
	r.grants.m[key] = k
	return k
}

// credentialChanged records a grant's change as an Event and wakes the project's reconcile,
// which writes its status (and rebuilds the server's connection when only a login helps now,
// or helps no longer).
func (r *Reconciler) credentialChanged(ref *v1alpha1.ProjectMCP, server string, st oauth.Status) {
	switch st.State {
	case oauth.StateReady:
		if !st.Refreshed.IsZero() {
			r.event(ref, corev1.EventTypeNormal, v1alpha1.EventCredentialRefreshed, "Refresh", "server %q: token refreshed, until %s", server, st.Expiry.UTC().Format(time.RFC3339))
		}
	default:
		r.event(ref, corev1.EventTypeWarning, v1alpha1.EventCredentialRefreshFailed, "Refresh", "server %q: %s", server, st.Message)
	}
	if r.credentialWake != nil {
		select {
		case r.credentialWake <- event.GenericEvent{Object: ref}:
		default: // the queue has a wake of its own pending: status catches up with it
		}
	}
}

// credentialWakeBuffer is how many grant changes wait to be enqueued.
const credentialWakeBuffer = 1024

// reloadGrant makes the keeper of a project's server read its Secret again (it changed).
func (r *Reconciler) reloadGrant(project types.NamespacedName, server string) {
	r.grants.mu.Lock()
	k := r.grants.m[grantKey{project: project, server: server}]
	r.grants.mu.Unlock()
	if k != nil {
		k.Reload()
	}
}

// pruneGrants drops the keepers of a project's servers that no longer have oauth (keep: the
// servers that do; nil drops them all).
func (r *Reconciler) pruneGrants(project types.NamespacedName, keep map[string]bool) {
	r.grants.mu.Lock()
	defer r.grants.mu.Unlock()
	for key := range r.grants.m {
		if key.project == project && !keep[key.server] {
			delete(r.grants.m, key)
		}
	}
}

// oauthServers are a project's enabled remote servers with oauth.
func oauthServers(obj *v1alpha1.ProjectMCP) map[string]bool {
	out := map[string]bool{}
	for _, s := range obj.Spec.Servers {
		if !s.Disabled && s.HTTP != nil && s.HTTP.OAuth != nil {
			out[s.Name] = true
		}
	}
	return out
}

// signInSuffix marks the planned hash of a server whose grant needs a login: its connection
// is rebuilt when that changes, and fails naming the command.
const signInSuffix = "/needs-login"

// grantHashes reads the grants of a project's servers with oauth (keeping the keepers of those
// alone) and marks the hashes of those that need a login.
func (r *Reconciler) grantHashes(ctx context.Context, obj *v1alpha1.ProjectMCP, hashes map[string]string) {
	servers := oauthServers(obj)
	r.pruneGrants(client.ObjectKeyFromObject(obj), servers)
	for name := range servers {
		if _, ok := hashes[name]; ok && r.keeper(obj, name).Load(ctx).NeedsSignIn() {
			hashes[name] += signInSuffix
		}
	}
}

// credentialStatuses puts each grant's state into the servers' status, keeping the
// conditions' transition times of the previous status.
func (r *Reconciler) credentialStatuses(obj *v1alpha1.ProjectMCP, status *v1alpha1.ProjectMCPStatus, now time.Time) {
	servers := oauthServers(obj)
	previous := map[string]*v1alpha1.CredentialStatus{}
	for _, s := range obj.Status.Servers {
		previous[s.Name] = s.Credential
	}
	for i := range status.Servers {
		s := &status.Servers[i]
		if !servers[s.Name] {
			continue
		}
		st := r.keeper(obj, s.Name).Status()
		s.Credential = credentialStatus(oauth.SecretName(obj.Name, s.Name), st, previous[s.Name], now)
	}
}

// credentialStatus is a grant's state as status shows it: the state, expiry and scopes, and
// the three conditions (never a token; the messages are the keeper's, which hold none).
func credentialStatus(secret string, st oauth.Status, previous *v1alpha1.CredentialStatus, now time.Time) *v1alpha1.CredentialStatus {
	cs := &v1alpha1.CredentialStatus{Secret: secret, State: st.State, Scopes: st.Scopes}
	if st.State == "" {
		cs.State = "Unknown" // not read yet
	}
	if !st.Expiry.IsZero() {
		cs.ExpiresAt = &metav1.Time{Time: st.Expiry}
	}
	if !st.Refreshed.IsZero() {
		cs.RefreshedAt = &metav1.Time{Time: st.Refreshed}
	}
	if previous != nil {
		cs.Conditions = append(cs.Conditions, previous.Conditions...)
	}
	set := func(t string, on bool, reason, msg string) {
		status := metav1.ConditionFalse
		if on {
			status = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&cs.Conditions, metav1.Condition{Type: t, Status: status, Reason: reason, Message: msg,
			LastTransitionTime: metav1.Time{Time: now}})
	}
	ready, reason := credentialReady(st.State)
	set(v1alpha1.ConditionCredentialReady, ready, reason, st.Message)
	set(v1alpha1.ConditionCredentialExpiring, st.State == oauth.StateExpiring, reason, expiringMessage(st))
	failed := st.State == oauth.StateExpiring || st.State == oauth.StateRefreshFailed || st.State == oauth.StateInvalid
	set(v1alpha1.ConditionCredentialRefreshFailed, failed, reason, failedMessage(failed, st))
	return cs
}

// credentialReady is CredentialReady's status and reason for a grant's state.
func credentialReady(state string) (bool, string) {
	switch state {
	case oauth.StateReady:
		return true, "TokenHeld"
	case oauth.StateExpiring:
		return true, "RefreshFailing"
	case oauth.StateRefreshFailed:
		return false, "TokenExpired"
	case oauth.StateMissing:
		return false, "NoGrant"
	case oauth.StateInvalid:
		return false, "GrantRefused"
	}
	return false, "NotReadYet"
}

func expiringMessage(st oauth.Status) string {
	if st.State != oauth.StateExpiring {
		return ""
	}
	return fmt.Sprintf("the token expires at %s and the last refresh failed", st.Expiry.UTC().Format(time.RFC3339))
}

func failedMessage(failed bool, st oauth.Status) string {
	if !failed {
		return ""
	}
	return st.Message
}

// secretStore is a grant's Secret as an oauth.Store: read uncached (the controller keeps no
// Secret in its cache), written over the resourceVersion read.
type secretStore struct {
	reader          client.Reader
	writer          client.Client
	key             types.NamespacedName
	project, server string
}

func (s *secretStore) Load(ctx context.Context) (*oauth.Grant, string, error) {
	secret := &corev1.Secret{}
	if err := s.reader.Get(ctx, s.key, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, "", fmt.Errorf("%w (no Secret %s)", oauth.ErrNoGrant, s.key.Name)
		}
		return nil, "", err
	}
	g, err := oauth.GrantOf(secret, s.project, s.server)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %v", oauth.ErrNoGrant, err)
	}
	return g, secret.ResourceVersion, nil
}

func (s *secretStore) Save(ctx context.Context, g *oauth.Grant, version string) (string, error) {
	secret := &corev1.Secret{}
	if err := s.reader.Get(ctx, s.key, secret); err != nil {
		return "", err
	}
	if secret.ResourceVersion != version {
		return "", oauth.ErrConflict
	}
	secret.Data = g.Data()
	if err := s.writer.Update(ctx, secret); err != nil {
		if apierrors.IsConflict(err) {
			return "", oauth.ErrConflict
		}
		return "", err
	}
	return secret.ResourceVersion, nil
}

// tokenClient is the HTTP client of the keepers' token requests: under the controller's
// egress policy, as the servers' own requests are (a grant's token endpoint is written by
// whoever ran the login).
func (r *Reconciler) tokenClient() *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: egressChecked{egress: r.Conn.Isolation.Egress}}
}

// egressChecked sends a request only to where the egress policy allows, dialing through the
// policy's checks; without a policy, as the default transport does.
type egressChecked struct{ egress *policy.Egress }

func (t egressChecked) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.egress == nil {
		return http.DefaultTransport.RoundTrip(req)
	}
	route, err := t.egress.Check(req.URL, "the token endpoint "+policy.OriginOf(req.URL))
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{DialContext: route.Dialer().DialContext, DisableKeepAlives: true,
		TLSHandshakeTimeout: 10 * time.Second, ForceAttemptHTTP2: true}
	return tr.RoundTrip(req)
}
