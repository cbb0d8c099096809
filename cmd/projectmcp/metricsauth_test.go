package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/dsh-dev/projectmcp/internal/testenv"
	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// What a metrics request gets, by its method, its header and the review's verdict; a verdict is
// kept (a refusal for less), a failed review is not, and reviews beyond the bound get 429.
func TestMetricsReviewerDecides(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	verdicts := map[string]int{"good": http.StatusOK, "stranger": http.StatusForbidden, "forged": http.StatusUnauthorized}
	var calls atomic.Int32
	r := newMetricsReviewer(func(_ context.Context, token, path string) (int, error) {
		calls.Add(1)
		if token == "broken" {
			return 0, errors.New("the API server is away")
		}
		return verdicts[token], nil
	}, func() time.Time { return now })
	ask := func(method, header string) int {
		req, _ := http.NewRequest(method, "https://x/metrics", nil)
		if header != "" {
			req.Header.Set("Authorization", header)
		}
		return r.decide(req, logr.Discard())
	}
	for _, c := range []struct {
		method, header string
		want           int
		reviews        int32 // reviews so far
	}{
		{http.MethodPost, "Bearer good", http.StatusMethodNotAllowed, 0},
		{http.MethodGet, "", http.StatusUnauthorized, 0},
		{http.MethodGet, "Basic Z29vZA==", http.StatusUnauthorized, 0},
		{http.MethodGet, "Bearer ", http.StatusUnauthorized, 0},
		{http.MethodGet, "Bearer good", http.StatusOK, 1},
		{http.MethodHead, "bearer good", http.StatusOK, 1}, // kept
		{http.MethodGet, "Bearer stranger", http.StatusForbidden, 2},
		{http.MethodGet, "Bearer stranger", http.StatusForbidden, 2},
		{http.MethodGet, "Bearer forged", http.StatusUnauthorized, 3},
		{http.MethodGet, "Bearer broken", http.StatusInternalServerError, 4},
		{http.MethodGet, "Bearer broken", http.StatusInternalServerError, 5}, // a failure is not kept
	} {
		if got := ask(c.method, c.header); got != c.want || calls.Load() != c.reviews {
			t.Errorf("%s %q: %d after %d reviews, want %d after %d", c.method, c.header, got, calls.Load(), c.want, c.reviews)
		}
	}
	now = now.Add(metricsDenyTTL)
	if ask(http.MethodGet, "Bearer stranger"); calls.Load() != 6 {
		t.Errorf("a refusal is reviewed again after %s: %d reviews", metricsDenyTTL, calls.Load())
	}
	if ask(http.MethodGet, "Bearer good"); calls.Load() != 6 {
		t.Errorf("a grant is kept for %s: %d reviews", metricsAllowTTL, calls.Load())
	}
	for range metricsReviewsAtOnce {
		r.slots <- struct{}{}
	}
	if got := ask(http.MethodGet, "Bearer new"); got != http.StatusTooManyRequests {
		t.Errorf("with every review slot taken: %d, want 429", got)
	}
}

// With --metrics-secure the metrics server serves TLS, and a scrape without a token is refused
// (401), one whose ServiceAccount has no grant too (403); bound to config/rbac's
// projectmcp-metrics-reader, the same token gets the metrics. The reviews are the real API
// server's.
func TestMetricsSecure(t *testing.T) {
	env := apiServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := controllerFlags{metricsAddr: "127.0.0.1:0", metricsSecure: true}
	opts, err := f.metricsOptions()
	if err != nil {
		t.Fatal(err)
	}
	hc, err := rest.HTTPClientFor(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := metricsserver.NewServer(opts, env.Config, hc)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("metrics server: %v", err)
		}
	}()
	bound := srv.(interface{ GetBindAddr() string })
	testutil.Eventually(t, 10*time.Second, "the metrics server to listen", func() bool {
		addr := bound.GetBindAddr()
		return addr != "" && !strings.HasSuffix(addr, ":0")
	})
	url := "https://" + bound.GetBindAddr() + "/metrics"
	scraper := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // the server's certificate is self-signed
	scrape := func(token string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := scraper.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if resp, err := http.Get("http" + strings.TrimPrefix(url, "https")); err == nil { //nolint:noctx // a plain request to a TLS port
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("plain HTTP got the metrics")
		}
	}
	if code, _ := scrape(""); code != http.StatusUnauthorized {
		t.Errorf("a scrape without a token: %d, want 401", code)
	}
	if code, _ := scrape("not-a-token"); code != http.StatusUnauthorized {
		t.Errorf("a scrape with a forged token: %d, want 401", code)
	}
	token := serviceAccountToken(t, "default", "scraper", "none")
	if code, _ := scrape(token); code != http.StatusForbidden {
		t.Errorf("a scrape by a ServiceAccount without the grant: %d, want 403", code)
	}

	reader := metricsReaderRole(t)
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "scraper-metrics"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: reader.GetName()},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "scraper", Namespace: "default"}}}
	for _, o := range []*unstructured.Unstructured{reader} {
		env.DeleteOnCleanup(t, o)
		if err := env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	env.DeleteOnCleanup(t, binding)
	if err := env.Client.Create(ctx, binding); err != nil {
		t.Fatal(err)
	}
	// The refusal is kept metricsDenyTTL; the grant shows once it has passed.
	testutil.EventuallyOK(t, metricsDenyTTL+10*time.Second, "the bound ServiceAccount to get the metrics", func() error {
		if code, body := scrape(token); code != http.StatusOK || !strings.Contains(body, "# HELP") {
			return fmt.Errorf("%d: %.200s", code, body)
		}
		return nil
	})
}

// metricsReaderRole is config/rbac/metrics_reader_role.yaml.
func metricsReaderRole(t *testing.T) *unstructured.Unstructured {
	t.Helper()
	root, _ := testenv.RepoRoot()
	data, err := os.ReadFile(filepath.Join(root, "config", "rbac", "metrics_reader_role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(string(data)), 4096).Decode(&u.Object); err != nil {
		t.Fatal(err)
	}
	return u
}
