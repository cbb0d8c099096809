package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/dsh-dev/projectmcp/internal/buckets"
)

// replicaAuth is how replicas know one another with --replica-token-file: each sends a token
// of its service account for buckets.ReplicaAudience with the requests it proxies, and the
// serving replica believes a request's client headers only when a TokenReview names the
// token's user as its own token's. A process in a replica's pod that cannot read the token (a
// stdio server under --server-uid) cannot pass for the replica, whatever address it calls
// from.
type replicaAuth struct {
	file   string
	review func(ctx context.Context, token string) (user string, err error) // "" for a token not valid for the audience
	// fresh bounds the reviews of tokens not seen yet: a process at a replica's address that
	// sends a new token with each request costs the API server this many reviews at most.
	fresh *rate.Limiter

	mu     sync.Mutex
	token  string    // this replica's, as last read
	readAt time.Time // when
	own    string    // this replica's user, once reviewed
	seen   map[[sha256.Size]byte]reviewed
}

// reviewed is a token's review: its user ("" for none) until a time.
type reviewed struct {
	user  string
	until time.Time
}

const (
	// replicaTokenReread is how often the token file is read again: the kubelet renews a
	// projected token well before it expires.
	replicaTokenReread = time.Minute
	// replicaReviewTTL is how long a token's review stands.
	replicaReviewTTL = time.Minute
	// replicaReviewTimeout bounds one review.
	replicaReviewTimeout = 5 * time.Second
	// maxReplicaReviews bounds the reviews kept: a few replicas' tokens, renewed hourly.
	maxReplicaReviews = 256
)

// newReplicaAuth checks that file holds a token and reviews tokens with cs.
func newReplicaAuth(file string, cs kubernetes.Interface) (*replicaAuth, error) {
	a := &replicaAuth{file: file, fresh: rate.NewLimiter(5, 5), seen: map[[sha256.Size]byte]reviewed{},
		review: func(ctx context.Context, token string) (string, error) {
			tr, err := cs.AuthenticationV1().TokenReviews().Create(ctx,
				&authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token, Audiences: []string{buckets.ReplicaAudience}}}, metav1.CreateOptions{})
			if err != nil {
				return "", err
			}
			return reviewedUser(tr.Status), nil
		}}
	if a.credential() == "" {
		return nil, usageErrorf("--replica-token-file %q holds no token", file)
	}
	return a, nil
}

// reviewedUser is the user a TokenReview names for a token valid for the replicas' audience,
// else "".
func reviewedUser(st authnv1.TokenReviewStatus) string {
	for _, aud := range st.Audiences {
		if st.Authenticated && aud == buckets.ReplicaAudience {
			return st.User.Username
		}
	}
	return ""
}

// credential is this replica's token, read again once it is older than replicaTokenReread
// (the last one read while the file cannot be).
func (a *replicaAuth) credential() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.token != "" && time.Since(a.readAt) < replicaTokenReread {
		return a.token
	}
	if b, err := os.ReadFile(a.file); err == nil && strings.TrimSpace(string(b)) != "" {
		a.token, a.readAt = strings.TrimSpace(string(b)), time.Now()
	}
	return a.token
}

// vouched reports whether token is of this replica's own identity.
func (a *replicaAuth) vouched(ctx context.Context, token string) bool {
	if token == "" {
		return false
	}
	return believed(a.self(ctx), a.user(ctx, token))
}

// believed decides whether a proxying replica's word on its client is believed: the user its
// token was reviewed as is this replica's own, known user.
func believed(own, user string) bool { return own != "" && user == own }

// self is this replica's user: its own token's review, kept once known.
func (a *replicaAuth) self(ctx context.Context) string {
	a.mu.Lock()
	own := a.own
	a.mu.Unlock()
	if own != "" {
		return own
	}
	own = a.user(ctx, a.credential())
	a.mu.Lock()
	a.own = own
	a.mu.Unlock()
	return own
}

// user is who token is, by a review kept for replicaReviewTTL; "" for a token not valid, or
// not reviewed now (the API server failed, or the reviews of new tokens are spent).
func (a *replicaAuth) user(ctx context.Context, token string) string {
	key := sha256.Sum256([]byte(token))
	now := time.Now()
	a.mu.Lock()
	r, ok := a.seen[key]
	a.mu.Unlock()
	if ok && now.Before(r.until) {
		return r.user
	}
	if !a.fresh.Allow() {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, replicaReviewTimeout)
	defer cancel()
	user, err := a.review(ctx, token)
	if err != nil {
		return "" // not kept: the next request asks again
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.seen) >= maxReplicaReviews {
		a.forget(now)
	}
	a.seen[key] = reviewed{user: user, until: now.Add(replicaReviewTTL)}
	return user
}

// forget drops the reviews past their time, and all of them if none is (a flood of tokens).
func (a *replicaAuth) forget(now time.Time) {
	for k, r := range a.seen {
		if !now.Before(r.until) {
			delete(a.seen, k)
		}
	}
	if len(a.seen) >= maxReplicaReviews {
		clear(a.seen)
	}
}

// replicaAuthOf is the replicas' authentication of --replica-token-file, with a client of its
// own for the reviews; nil without it.
func (f *controllerFlags) replicaAuthOf(cfg *rest.Config) (*replicaAuth, error) {
	if f.replicaTokenFile == "" {
		return nil, nil
	}
	if !f.leaderElect {
		return nil, usageErrorf("--replica-token-file needs --leader-elect (replicas vouch for themselves to one another)")
	}
	cs, err := kubernetes.NewForConfig(rest.CopyConfig(cfg))
	if err != nil {
		return nil, err
	}
	a, err := newReplicaAuth(f.replicaTokenFile, cs)
	if err != nil {
		return nil, fmt.Errorf("replica token: %w", err)
	}
	return a, nil
}
