package oauth

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// memStore is a Store in memory, with a version per write and a conflict to inject.
type memStore struct {
	mu        sync.Mutex
	g         *Grant
	version   int
	saves     int
	conflicts int // the next Saves that fail with ErrConflict (after bumping the version)
}

func (m *memStore) Load(context.Context) (*Grant, string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.g == nil {
		return nil, "", ErrNoGrant
	}
	g := *m.g
	return &g, strconv.Itoa(m.version), nil
}

func (m *memStore) Save(_ context.Context, g *Grant, version string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.conflicts > 0 {
		m.conflicts--
		m.version++
		return "", ErrConflict
	}
	if version != strconv.Itoa(m.version) {
		return "", ErrConflict
	}
	c := *g
	m.g, m.version, m.saves = &c, m.version+1, m.saves+1
	return strconv.Itoa(m.version), nil
}

func (m *memStore) put(g *Grant) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := *g
	m.g, m.version = &c, m.version+1
}

func (m *memStore) get() *Grant {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := *m.g
	return &c
}

// signedIn is a grant of the test authorization server for a protected resource, from a
// real sign-in.
func signedIn(t *testing.T) (*testutil.AuthServer, *Grant) {
	t.Helper()
	as := testutil.NewAuthServer(t)
	ps := as.Protect("/mcp", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	l := &Login{HTTP: http.DefaultClient, ServerURL: ps.URL, Out: io.Discard, Browser: func(u string) error {
		resp, err := http.Get(u) //nolint:gosec,noctx // the test's loopback servers
		if err == nil {
			resp.Body.Close()
		}
		return err
	}}
	g, err := l.Run(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return as, g
}

// manyAsk has n callers ask for a token at once and returns what they got.
func manyAsk(k *Keeper, n int, ask func() (string, error)) ([]string, []error) {
	toks, errs := make([]string, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { toks[i], errs[i] = ask() })
	}
	wg.Wait()
	return toks, errs
}

// 100 callers asking while the token expires get one refresh between them: all get the new
// token, the rotated refresh token is written back, and the status shows the new expiry.
func TestKeeperRefreshesOnce(t *testing.T) {
	as, g := signedIn(t)
	g.Expiry = time.Now().Add(time.Minute) // within the lead: due
	store := &memStore{}
	store.put(g)
	var changes []Status
	var mu sync.Mutex
	k := NewKeeper(store, http.DefaultClient, "projectmcp login p s", func(s Status) { mu.Lock(); changes = append(changes, s); mu.Unlock() })
	toks, errs := manyAsk(k, 100, func() (string, error) { return k.Token(t.Context()) })
	for i := range toks {
		if errs[i] != nil || toks[i] != toks[0] || toks[i] == g.AccessToken {
			t.Fatalf("caller %d: %q, %v (old %q)", i, toks[i], errs[i], g.AccessToken)
		}
	}
	if n := as.Requests(grantRefreshToken); n != 1 {
		t.Errorf("%d refreshes, want 1", n)
	}
	stored := store.get()
	if stored.AccessToken != toks[0] || stored.RefreshToken == g.RefreshToken || store.saves != 1 {
		t.Errorf("written back: token %v, refresh rotated %v, saves %d", stored.AccessToken == toks[0], stored.RefreshToken != g.RefreshToken, store.saves)
	}
	if st := k.Status(); st.State != StateReady || st.Expiry.Before(time.Now().Add(50*time.Minute)) || st.Refreshed.IsZero() {
		t.Errorf("status %+v", st)
	}
	if !as.Valid(toks[0]) {
		t.Error("the refreshed token is not valid")
	}
	// No more refreshes while the token is fresh.
	if tok, _ := k.Token(t.Context()); tok != toks[0] || as.Requests(grantRefreshToken) != 1 {
		t.Error("a fresh token was refreshed again")
	}
}

// A 401 for the held token refreshes once, however many callers report it; a report of an
// older token gets the newer one without a refresh.
func TestKeeperRefusedRefreshesOnce(t *testing.T) {
	as, g := signedIn(t)
	store := &memStore{}
	store.put(g)
	k := NewKeeper(store, http.DefaultClient, "projectmcp login p s", nil)
	first, err := k.Token(t.Context())
	if err != nil || first != g.AccessToken {
		t.Fatalf("first token: %v", err)
	}
	toks, errs := manyAsk(k, 20, func() (string, error) { return k.Refused(t.Context(), first) })
	for i := range toks {
		if errs[i] != nil || toks[i] == first || toks[i] != toks[0] {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
	}
	if n := as.Requests(grantRefreshToken); n != 1 {
		t.Errorf("%d refreshes, want 1", n)
	}
}

// With the authorization server down the token serves until it expires (Expiring, not a
// failure of calls); past it the error is not permanent, and once the server is back the next
// refresh after the backoff succeeds.
func TestKeeperServerDown(t *testing.T) {
	as, g := signedIn(t)
	g.Expiry = time.Now().Add(time.Minute)
	store := &memStore{}
	store.put(g)
	k := NewKeeper(store, http.DefaultClient, "projectmcp login p s", nil)
	as.SetDown(true)
	tok, err := k.Token(t.Context())
	if err != nil || tok != g.AccessToken || k.Status().State != StateExpiring {
		t.Fatalf("with the server down: %v, %+v", err, k.Status())
	}
	now := time.Now()
	k.now = func() time.Time { return now.Add(2 * time.Minute) } // the token has expired; the backoff has not passed
	var ce *CredentialError
	if _, err := k.Token(t.Context()); !errors.As(err, &ce) || ce.Permanent() {
		t.Fatalf("after expiry: %v", err)
	}
	k.now = func() time.Time { return now.Add(3 * time.Minute) } // the backoff has passed: a refresh, failing
	if _, err := k.Token(t.Context()); err == nil || k.Status().State != StateRefreshFailed {
		t.Fatalf("refresh with the server down: %v, %+v", err, k.Status())
	}
	as.SetDown(false)
	k.now = func() time.Time { return now.Add(10 * time.Minute) }
	if tok, err := k.Token(t.Context()); err != nil || tok == g.AccessToken || k.Status().State != StateReady {
		t.Fatalf("with the server back: %v, %+v", err, k.Status())
	}
}

// invalid_grant makes the grant need a new sign-in (a permanent error naming the command);
// a new grant in the store, once reloaded, serves again.
func TestKeeperInvalidGrantThenNewSignIn(t *testing.T) {
	as, g := signedIn(t)
	g.Expiry = time.Now()
	store := &memStore{}
	store.put(g)
	k := NewKeeper(store, http.DefaultClient, "projectmcp login p s", nil)
	as.RevokeAll()
	_, err := k.Token(t.Context())
	var ce *CredentialError
	if !errors.As(err, &ce) || !ce.Permanent() || k.Status().State != StateInvalid || !k.Status().NeedsSignIn() {
		t.Fatalf("after revocation: %v, %+v", err, k.Status())
	}
	if want := "the authorization server refused the grant (invalid_grant): run projectmcp login p s"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	if _, err := k.Token(t.Context()); err == nil || as.Requests(grantRefreshToken) != 0 {
		t.Error("an invalid grant was tried again")
	}
	_, fresh := signedIn(t)
	store.put(fresh)
	k.Reload()
	if tok, err := k.Token(t.Context()); err != nil || tok != fresh.AccessToken || k.Status().State != StateReady {
		t.Fatalf("after a new sign-in: %v, %+v", err, k.Status())
	}
}

// A write-back that conflicts with an unrelated change is written again over the new version;
// one that conflicts with a new sign-in takes the new grant.
func TestKeeperWriteBackConflicts(t *testing.T) {
	_, g := signedIn(t)
	g.Expiry = time.Now()
	store := &memStore{conflicts: 1}
	store.put(g)
	k := NewKeeper(store, http.DefaultClient, "projectmcp login p s", nil)
	tok, err := k.Token(t.Context())
	if err != nil || store.get().AccessToken != tok || store.saves != 1 {
		t.Fatalf("after an unrelated conflict: %v, saves %d", err, store.saves)
	}
	_, other := signedIn(t)
	store.mu.Lock()
	store.g.Expiry = time.Now() // due again
	store.mu.Unlock()
	k.Reload()
	// The keeper reads the due grant, refreshes it, and meets a new sign-in at write-back.
	hooked := &hookStore{memStore: store, beforeSave: func() { store.put(other) }}
	k.store = hooked
	if tok, err := k.Token(t.Context()); err != nil || tok != other.AccessToken {
		t.Fatalf("after a conflicting sign-in: %q, %v; want the new sign-in's token", tok, err)
	}
	if store.get().AccessToken != other.AccessToken {
		t.Error("the keeper wrote over a new sign-in")
	}
}

type hookStore struct {
	*memStore
	beforeSave func()
	once       sync.Once
}

func (h *hookStore) Save(ctx context.Context, g *Grant, version string) (string, error) {
	h.once.Do(h.beforeSave)
	return h.memStore.Save(ctx, g, version)
}

// A missing grant needs a sign-in, and says so.
func TestKeeperMissingGrant(t *testing.T) {
	k := NewKeeper(&memStore{}, http.DefaultClient, "projectmcp login p s", nil)
	_, err := k.Token(t.Context())
	var ce *CredentialError
	if !errors.As(err, &ce) || !ce.Permanent() || err.Error() != "no grant: run projectmcp login p s" || k.Status().State != StateMissing {
		t.Fatalf("%v, %+v", err, k.Status())
	}
}

// A machine grant is renewed by client credentials, not by a refresh token (it has none), and
// written back.
func TestKeeperRenewsClientCredentials(t *testing.T) {
	as := testutil.NewAuthServer(t)
	ps := as.Protect("/mcp", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	as.AddClient("machine", "m-secret")
	l := &Login{HTTP: http.DefaultClient, ServerURL: ps.URL, Out: io.Discard, ClientSecret: "m-secret",
		Settings: Settings{ClientID: "machine", Grant: GrantClientCredentials}}
	g, err := l.Run(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	g.Expiry = time.Now()
	store := &memStore{}
	store.put(g)
	k := NewKeeper(store, http.DefaultClient, "projectmcp login p s", nil)
	tok, err := k.Token(t.Context())
	if err != nil || tok == g.AccessToken || !as.Valid(tok) {
		t.Fatalf("renewed: %v", err)
	}
	if as.Requests(GrantClientCredentials) != 2 || as.Requests(grantRefreshToken) != 0 || store.get().AccessToken != tok {
		t.Errorf("client credentials %d, refreshes %d, written back %v", as.Requests(GrantClientCredentials), as.Requests(grantRefreshToken), store.get().AccessToken == tok)
	}
	if form, basic := as.LastTokenForm(); !basic || form.Get("resource") != ps.URL {
		t.Errorf("renewal: basic %v, resource %q", basic, form.Get("resource"))
	}
}

// A token that lives less than the refresh lead is not renewed at every request: after a
// renewal, the next waits for half its life.
func TestKeeperShortLivedTokens(t *testing.T) {
	as, g := signedIn(t)
	as.SetAccessTTL(30 * time.Second)
	g.Expiry = time.Now()
	store := &memStore{}
	store.put(g)
	k := NewKeeper(store, http.DefaultClient, "projectmcp login p s", nil)
	start := time.Now()
	k.now = func() time.Time { return start }
	first, err := k.Token(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	k.Reload() // the write-back's watch event: the keeper reads its own write again
	for range 5 {
		if tok, err := k.Token(t.Context()); err != nil || tok != first {
			t.Fatalf("a short-lived token renewed again at once: %v", err)
		}
	}
	if n := as.Requests(grantRefreshToken); n != 1 {
		t.Errorf("%d refreshes, want 1", n)
	}
	k.now = func() time.Time { return start.Add(16 * time.Second) } // past half its life
	if tok, err := k.Token(t.Context()); err != nil || tok == first || as.Requests(grantRefreshToken) != 2 {
		t.Errorf("past half its life: renewed %v, %v", tok != first, err)
	}
}
