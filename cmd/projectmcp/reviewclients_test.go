package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/dsh-dev/projectmcp/internal/gateway/access"
	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// reviewAPIServer answers TokenReviews (a token "<user>/<anything>" is that user) and
// SubjectAccessReviews (use of anything, and items named by their own name, are granted) at
// once, and counts the item reviews.
func reviewAPIServer(t *testing.T) (*rest.Config, *atomic.Int32) {
	t.Helper()
	var items atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if strings.HasSuffix(r.URL.Path, "/tokenreviews") {
			var tr authnv1.TokenReview
			_ = json.NewDecoder(r.Body).Decode(&tr)
			user, _, _ := strings.Cut(tr.Spec.Token, "/")
			tr.Status.Authenticated, tr.Status.User = true, authnv1.UserInfo{Username: user}
			_ = json.NewEncoder(w).Encode(&tr)
			return
		}
		var sar authzv1.SubjectAccessReview
		_ = json.NewDecoder(r.Body).Decode(&sar)
		ra := sar.Spec.ResourceAttributes
		if ra.Verb == access.ItemVerb {
			items.Add(1)
		}
		sar.Status.Allowed = ra.Verb == access.UseVerb || strings.Contains(ra.Name, "file:///")
		_ = json.NewEncoder(w).Encode(&sar)
	}))
	t.Cleanup(srv.Close)
	return &rest.Config{Host: srv.URL, ContentConfig: rest.ContentConfig{ContentType: "application/json"}}, &items
}

// The clients the controller reviews with: while many identities' lists queue their item
// reviews on the item client's rate limit (100 a second), a new token and its use of a
// project are reviewed on the other client at once.
func TestGatewayItemReviewsNeverQueueAuthentication(t *testing.T) {
	cfg, itemReviews := reviewAPIServer(t)
	a, err := parseControllerFlags(t, "--gateway-auth", "kubernetes").kubernetesAuth(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if a.ItemClient == a.Client {
		t.Fatal("the item reviews share the authentication's client")
	}
	const identities = 25 // each with up to 8 item reviews in flight: 200 waiting on the item client
	resources := make([]access.Item, 256)
	for i := range resources {
		resources[i] = access.Item{Resource: access.ResourceResources, Server: "fs", Name: fmt.Sprintf("file:///f/%d", i)}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var lists sync.WaitGroup
	t.Cleanup(func() { cancel(); lists.Wait() })
	for i := range identities {
		lists.Go(func() {
			r := authRequest(fmt.Sprintf("lister-%d/1", i), "192.0.2.1:1")
			a.Permit(ctx, access.NewIdentity("", r), types.NamespacedName{Namespace: "ns", Name: "p"}, resources)
		})
	}
	// Past the item client's burst, its reviews wait their turn.
	testutil.Eventually(t, 20*time.Second, "the item client's burst spent", func() bool { return itemReviews.Load() > 2*reviewBurst })
	for i := range 3 {
		start := time.Now()
		_, status, msg := a.Authorize(context.Background(), authRequest(fmt.Sprintf("newcomer-%d/1", i), "192.0.2.2:1"), types.NamespacedName{Namespace: "ns", Name: "p"})
		if took := time.Since(start); status != 0 || took > 500*time.Millisecond {
			t.Fatalf("a new token while %d identities' item reviews queue: %d %q after %s, want 0 at once", identities, status, msg, took.Round(time.Millisecond))
		}
	}
}
