package oauth

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// Store is where a grant lives (its Secret): Load reads it with its version, Save writes it
// only over that version.
type Store interface {
	// Load returns the grant and its version; ErrNoGrant when there is none.
	Load(ctx context.Context) (*Grant, string, error)
	// Save writes g over version and returns the new version; ErrConflict when the stored
	// grant is no longer at version.
	Save(ctx context.Context, g *Grant, version string) (string, error)
}

var (
	// ErrNoGrant: the store holds no grant.
	ErrNoGrant = errors.New("no grant")
	// ErrConflict: the stored grant changed since it was read.
	ErrConflict = errors.New("the grant changed since it was read")
)

// The states of a kept grant.
const (
	// StateReady: a token is held and, when it nears its expiry, is refreshed.
	StateReady = "Ready"
	// StateExpiring: the token nears its expiry and the last refresh failed (the token is
	// still sent until it expires).
	StateExpiring = "Expiring"
	// StateRefreshFailed: the last refresh failed and the token has expired; refreshes are
	// retried with backoff.
	StateRefreshFailed = "RefreshFailed"
	// StateMissing: there is no grant; someone must sign in.
	StateMissing = "Missing"
	// StateInvalid: the authorization server refused the grant (invalid_grant), or it cannot
	// be renewed; someone must sign in again.
	StateInvalid = "Invalid"
)

// Status is a kept grant's state as status shows it: never a token.
type Status struct {
	State   string
	Expiry  time.Time
	Scopes  []string
	Message string // why, for the states other than Ready
	// Refreshed is when the token was last refreshed by the keeper (zero: never).
	Refreshed time.Time
}

// NeedsSignIn reports whether only a new sign-in gives a token: there is no grant, or the
// authorization server refused it.
func (s Status) NeedsSignIn() bool { return s.State == StateMissing || s.State == StateInvalid }

// CredentialError is why a keeper gives no token; Permanent when only a new sign-in helps
// (retrying the connection cannot).
type CredentialError struct {
	Msg       string
	permanent bool
}

func (e *CredentialError) Error() string   { return e.Msg }
func (e *CredentialError) Permanent() bool { return e.permanent }

// Keeper is the custodian of one grant: it hands out its access token, refreshes it before
// it expires (one refresh at a time however many callers ask: the first starts it, the others
// wait for it), writes a rotated refresh token back over the version it read, and refreshes
// at once when the server refuses the token it holds. A refresh runs detached from the
// callers' contexts (bounded by refreshTimeout), so a caller giving up does not fail it for
// the others.
type Keeper struct {
	store Store
	http  *http.Client
	// SignIn is what the error of a grant that needs a new sign-in tells the user to run.
	signIn   string
	onChange func(Status)
	now      func() time.Time

	mu      sync.Mutex
	grant   *Grant
	version string
	loaded  bool
	refused string // the access token the server refused: it is refreshed, whatever its expiry
	status  Status
	flight  chan struct{} // closed when the refresh in progress ends
	retryAt time.Time     // after a failed refresh, the next is not before
	backoff time.Duration
	// calmUntil: a token the keeper renewed that lives less than twice refreshLead is not
	// renewed again before half its life (else each request would renew it)
	calmUntil time.Time
}

const (
	// refreshLead is how long before its expiry a token is refreshed.
	refreshLead = 2 * time.Minute
	// refreshTimeout bounds one refresh (load, token request, write-back).
	refreshTimeout = 30 * time.Second
	// minBackoff and maxBackoff bound the wait between failed refreshes.
	minBackoff = 2 * time.Second
	maxBackoff = 5 * time.Minute
)

// NewKeeper keeps the grant of store; signIn is the command that makes a new one (for the
// errors), onChange hears every change of its Status (it must not block).
func NewKeeper(store Store, hc *http.Client, signIn string, onChange func(Status)) *Keeper {
	if onChange == nil {
		onChange = func(Status) {}
	}
	return &Keeper{store: store, http: hc, signIn: signIn, onChange: onChange, now: time.Now}
}

// Status is the grant's state now.
func (k *Keeper) Status() Status {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.status
}

// Reload makes the next Token read the stored grant again: the store changed (a new sign-in,
// or another writer).
func (k *Keeper) Reload() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.loaded, k.retryAt, k.backoff = false, time.Time{}, 0
}

// Load reads the stored grant if it is not read yet, and returns its Status.
func (k *Keeper) Load(ctx context.Context) Status {
	_, _ = k.Token(ctx)
	return k.Status()
}

// Token is the access token to send, refreshed first when it nears its expiry.
func (k *Keeper) Token(ctx context.Context) (string, error) {
	for {
		k.mu.Lock()
		tok, err, done := k.decide()
		if done {
			k.mu.Unlock()
			return tok, err
		}
		flight := k.flight
		if flight == nil {
			flight = make(chan struct{})
			k.flight = flight
			go k.run(flight)
		}
		k.mu.Unlock()
		select {
		case <-flight:
		case <-ctx.Done():
			return "", context.Cause(ctx)
		}
	}
}

// Refused tells the keeper the server refused token (HTTP 401) and returns the token to send
// again: a newer one when another caller has refreshed already, else one refreshed now.
func (k *Keeper) Refused(ctx context.Context, token string) (string, error) {
	k.mu.Lock()
	if k.grant != nil && k.grant.AccessToken == token {
		k.refused = token
		k.retryAt = time.Time{} // a refused token is refreshed now, backoff or not
	}
	k.mu.Unlock()
	return k.Token(ctx)
}

// decide says, under k.mu, whether Token can answer without a refresh (done), and with what.
func (k *Keeper) decide() (string, error, bool) {
	now := k.now()
	if !k.loaded {
		if now.Before(k.retryAt) { // the store could not be read: not again before the backoff
			return "", &CredentialError{Msg: k.status.Message}, true
		}
		return "", nil, false
	}
	if k.status.NeedsSignIn() {
		return "", k.unusable(), true
	}
	g := k.grant
	valid := g.AccessToken != "" && g.AccessToken != k.refused && (g.Expiry.IsZero() || now.Before(g.Expiry))
	due := !valid || (!g.Expiry.IsZero() && !now.Before(g.Expiry.Add(-refreshLead)) && !now.Before(k.calmUntil))
	switch {
	case !due:
		return g.AccessToken, nil, true
	case now.Before(k.retryAt) && valid: // the last refresh failed: the token serves until it expires
		return g.AccessToken, nil, true
	case now.Before(k.retryAt):
		return "", &CredentialError{Msg: k.status.Message}, true
	}
	return "", nil, false
}

// unusable is the error of a grant that gives no token.
func (k *Keeper) unusable() error {
	return &CredentialError{Msg: k.status.Message, permanent: true}
}

// run loads or refreshes the grant, once, for every caller waiting on flight.
func (k *Keeper) run(flight chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), refreshTimeout)
	defer cancel()
	st := k.renew(ctx)
	k.mu.Lock()
	changed := st.State != k.status.State || !st.Expiry.Equal(k.status.Expiry) || st.Message != k.status.Message
	k.status, k.flight = st, nil
	k.mu.Unlock()
	close(flight)
	if changed {
		k.onChange(st)
	}
}

// renew brings the grant up to date: it reads the store (a grant another writer renewed, or a
// new sign-in, is taken as it is), and refreshes the token when it is due.
func (k *Keeper) renew(ctx context.Context) Status {
	g, version, err := k.store.Load(ctx)
	switch {
	case errors.Is(err, ErrNoGrant):
		k.set(nil, "", true)
		return Status{State: StateMissing, Message: err.Error() + ": run " + k.signIn}
	case err != nil:
		return k.failed(fmt.Errorf("reading the grant: %w", err))
	}
	k.mu.Lock()
	refused := k.refused
	k.mu.Unlock()
	k.set(g, version, true)
	now := k.now()
	k.mu.Lock()
	calm := now.Before(k.calmUntil) && k.grant != nil && g.AccessToken == k.grant.AccessToken
	k.mu.Unlock()
	if g.AccessToken != "" && g.AccessToken != refused && (g.Expiry.IsZero() || now.Before(g.Expiry.Add(-refreshLead)) || (calm && now.Before(g.Expiry))) {
		return k.ready(g, time.Time{})
	}
	return k.refresh(ctx, g, version)
}

// refresh asks the token endpoint for a new token and writes the grant back.
func (k *Keeper) refresh(ctx context.Context, g *Grant, version string) Status {
	var tok *Token
	var err error
	c := g.Client(k.http)
	switch {
	case g.GrantType == GrantClientCredentials:
		tok, err = c.ClientCredentials(ctx, g.Scopes)
	case g.RefreshToken == "":
		return k.invalid("the token expired and the grant holds no refresh token")
	default:
		tok, err = c.Refresh(ctx, g.RefreshToken, nil)
	}
	if InvalidGrant(err) {
		return k.invalid("the authorization server refused the grant (invalid_grant)")
	}
	if err != nil {
		return k.failed(err)
	}
	renewed := g.Renewed(tok)
	if err := k.save(ctx, g, renewed, version); err != nil {
		return k.failed(err)
	}
	now := k.now()
	k.mu.Lock()
	k.calmUntil = time.Time{}
	if life := renewed.Expiry.Sub(now); !renewed.Expiry.IsZero() && life < 2*refreshLead {
		k.calmUntil = now.Add(life / 2)
	}
	k.mu.Unlock()
	return k.ready(renewed, now)
}

// save writes renewed over version. On a conflict it reads the grant again: when it still
// holds the refresh token refreshed (another field changed), renewed is written over the new
// version; else another writer (a new sign-in) wins and its grant is taken.
func (k *Keeper) save(ctx context.Context, old, renewed *Grant, version string) error {
	v, err := k.store.Save(ctx, renewed, version)
	if errors.Is(err, ErrConflict) {
		stored, sv, lerr := k.store.Load(ctx)
		if lerr != nil {
			return fmt.Errorf("writing the renewed grant back: %w", lerr)
		}
		if stored.RefreshToken != old.RefreshToken || stored.AccessToken != old.AccessToken {
			k.set(stored, sv, true)
			return nil
		}
		v, err = k.store.Save(ctx, renewed, sv)
	}
	if err != nil {
		return fmt.Errorf("writing the renewed grant back: %w", err)
	}
	k.set(renewed, v, true)
	return nil
}

func (k *Keeper) set(g *Grant, version string, loaded bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if g == nil || k.grant == nil || g.AccessToken != k.grant.AccessToken {
		k.refused = ""
	}
	k.grant, k.version, k.loaded = g, version, loaded
}

// ready is the Status of a grant with a good token; refreshed is when the keeper refreshed it.
func (k *Keeper) ready(g *Grant, refreshed time.Time) Status {
	k.mu.Lock()
	k.retryAt, k.backoff = time.Time{}, 0
	if refreshed.IsZero() {
		refreshed = k.status.Refreshed
	}
	k.mu.Unlock()
	return Status{State: StateReady, Expiry: g.Expiry, Scopes: g.Scopes, Refreshed: refreshed}
}

// invalid is the Status of a grant only a new sign-in replaces.
func (k *Keeper) invalid(why string) Status {
	k.mu.Lock()
	defer k.mu.Unlock()
	st := Status{State: StateInvalid, Message: why + ": run " + k.signIn, Refreshed: k.status.Refreshed}
	if k.grant != nil {
		st.Expiry, st.Scopes = k.grant.Expiry, k.grant.Scopes
	}
	return st
}

// failed is the Status after a refresh that failed for a reason a retry may heal (the
// authorization server down): the token still serves until it expires, and the next refresh
// waits a backoff that doubles up to maxBackoff.
func (k *Keeper) failed(err error) Status {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.backoff = min(max(2*k.backoff, minBackoff), maxBackoff)
	now := k.now()
	k.retryAt = now.Add(k.backoff)
	st := Status{State: StateRefreshFailed, Message: "refreshing the token: " + err.Error(), Refreshed: k.status.Refreshed}
	if k.grant != nil {
		st.Expiry, st.Scopes = k.grant.Expiry, k.grant.Scopes
		if k.grant.AccessToken != k.refused && (k.grant.Expiry.IsZero() || now.Before(k.grant.Expiry)) {
			st.State = StateExpiring
		}
	}
	if !k.loaded {
		k.loaded = k.grant != nil
	}
	return st
}
