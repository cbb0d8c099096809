package main

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"golang.org/x/time/rate"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dsh-dev/projectmcp/internal/buckets"
	"github.com/dsh-dev/projectmcp/internal/testenv"
)

// A proxying replica's word is believed only when its token's user is this replica's own,
// known one.
func TestBelieved(t *testing.T) {
	const sa = "system:serviceaccount:projectmcp-system:projectmcp"
	for _, c := range []struct {
		own, user string
		want      bool
	}{
		{sa, sa, true},
		{sa, "system:serviceaccount:projectmcp-system:other", false},
		{sa, "", false},
		{"", "", false}, // this replica's own review failed: nobody is believed
		{"", sa, false},
	} {
		if got := believed(c.own, c.user); got != c.want {
			t.Errorf("believed(%q, %q) = %v, want %v", c.own, c.user, got, c.want)
		}
	}
}

// A review names a user only for a token authenticated for the replicas' audience.
func TestReviewedUser(t *testing.T) {
	user := authnv1.UserInfo{Username: "system:serviceaccount:ns:projectmcp"}
	for _, c := range []struct {
		what string
		st   authnv1.TokenReviewStatus
		want string
	}{
		{"the replicas' audience", authnv1.TokenReviewStatus{Authenticated: true, User: user, Audiences: []string{buckets.ReplicaAudience}}, user.Username},
		{"another audience", authnv1.TokenReviewStatus{Authenticated: true, User: user, Audiences: []string{"https://kubernetes.default.svc"}}, ""},
		{"not authenticated", authnv1.TokenReviewStatus{User: user, Audiences: []string{buckets.ReplicaAudience}}, ""},
	} {
		if got := reviewedUser(c.st); got != c.want {
			t.Errorf("%s: %q, want %q", c.what, got, c.want)
		}
	}
}

// fakeReviews are the API server's TokenReviews: a user per token, counted.
type fakeReviews struct {
	mu    sync.Mutex
	users map[string]string
	calls int
	fail  bool
}

func (f *fakeReviews) review(_ context.Context, token string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.fail {
		return "", errors.New("the API server is down")
	}
	return f.users[token], nil
}

func (f *fakeReviews) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls
}

func newTestReplicaAuth(t *testing.T, reviews *fakeReviews) *replicaAuth {
	t.Helper()
	file := filepath.Join(t.TempDir(), "replica-token")
	if err := os.WriteFile(file, []byte("own-token\n"), 0o400); err != nil {
		t.Fatal(err)
	}
	return &replicaAuth{file: file, review: reviews.review, fresh: rate.NewLimiter(rate.Inf, 1), seen: map[[32]byte]reviewed{}}
}

// With --replica-token-file a connection from a replica's address is believed only with a token
// of the replica's own identity: a process beside another replica that cannot read its token
// (a stdio server under --server-uid) sends none, or one of another identity, and is not
// believed, though it calls from a replica's address. Reviews are kept, and a failed one is
// not.
func TestReplicaTrustedNeedsTheReplicasToken(t *testing.T) {
	const sa = "system:serviceaccount:projectmcp-system:projectmcp"
	reviews := &fakeReviews{users: map[string]string{"own-token": sa, "peer-token": sa, "other-token": "system:serviceaccount:team:app"}}
	auth := newTestReplicaAuth(t, reviews)
	replica := func(host string) bool { return host == "10.0.0.7" }
	request := func(remote, token string) *http.Request {
		r, _ := http.NewRequest(http.MethodGet, "http://gateway/projects/ns/p/mcp", nil)
		r.RemoteAddr = remote
		if token != "" {
			r.Header.Set(buckets.HeaderReplicaToken, token)
		}
		return r
	}
	trusted := replicaTrusted(replica, auth)
	for _, c := range []struct {
		what          string
		remote, token string
		want          bool
	}{
		{"another replica, with a token of the controller's identity", "10.0.0.7:41000", "peer-token", true},
		{"a process at a replica's address with no token", "10.0.0.7:41000", "", false},
		{"a process at a replica's address with another identity's token", "10.0.0.7:41000", "other-token", false},
		{"a process at a replica's address with a token the API server does not know", "10.0.0.7:41000", "forged", false},
		{"a token of the controller's identity from elsewhere", "10.0.0.8:41000", "peer-token", false},
	} {
		if got := trusted(request(c.remote, c.token)); got != c.want {
			t.Errorf("%s: trusted %v, want %v", c.what, got, c.want)
		}
	}
	if !replicaTrusted(replica, nil)(request("10.0.0.7:41000", "")) {
		t.Error("without --replica-token-file a replica's address is believed as before")
	}

	before := reviews.count()
	if !trusted(request("10.0.0.7:41000", "peer-token")) || reviews.count() != before {
		t.Errorf("a token reviewed a moment ago was reviewed again (%d reviews, %d before)", reviews.count(), before)
	}
	reviews.mu.Lock()
	reviews.fail = true
	reviews.mu.Unlock()
	if trusted(request("10.0.0.7:41000", "new-token")) {
		t.Error("a token whose review failed was believed")
	}
	reviews.mu.Lock()
	reviews.fail, reviews.users["new-token"] = false, sa
	reviews.mu.Unlock()
	if !trusted(request("10.0.0.7:41000", "new-token")) {
		t.Error("a failed review was kept: the token is not believed once the API server answers")
	}
}

// replicaNamespace holds the service accounts of TestReplicaAuthReviews.
const replicaNamespace = "replica-auth"

// saToken creates (once) a service account of replicaNamespace and returns a token of it for
// the audiences given (none: the API server's), as the kubelet projects one.
func saToken(t *testing.T, env *testenv.Env, name string, audiences ...string) string {
	t.Helper()
	createOnce(t, env,
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: replicaNamespace}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: replicaNamespace}})
	return saTokenFor(t, env, replicaNamespace, name, audiences...)
}

// Against a real API server: a replica vouches for another replica's token of its own service
// account for the replicas' audience, and for no other: another service account's, its own for
// the API server's audience, or one the API server never issued.
func TestReplicaAuthReviews(t *testing.T) {
	env := apiServer(t)
	file := filepath.Join(t.TempDir(), "replica-token")
	if err := os.WriteFile(file, []byte(saToken(t, env, "controller", buckets.ReplicaAudience)), 0o400); err != nil {
		t.Fatal(err)
	}
	auth, err := parseControllerFlags(t, "--replica-token-file", file).replicaAuthOf(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, c := range []struct {
		what  string
		token string
		want  bool
	}{
		{"another replica's token of the same service account", saToken(t, env, "controller", buckets.ReplicaAudience), true},
		{"another service account's", saToken(t, env, "intruder", buckets.ReplicaAudience), false},
		{"the controller's token for the API server", saToken(t, env, "controller"), false},
		{"a token the API server never issued", "not-a-token", false},
	} {
		if got := auth.vouched(ctx, c.token); got != c.want {
			t.Errorf("%s: vouched %v, want %v", c.what, got, c.want)
		}
	}
	if _, err := parseControllerFlags(t, "--replica-token-file", filepath.Join(t.TempDir(), "none")).replicaAuthOf(env.Config); err == nil {
		t.Error("a token file that is not there was accepted")
	}
}
