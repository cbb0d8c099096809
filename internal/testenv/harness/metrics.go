package harness

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// Scraper reads the controller-runtime registry through the handler the controller's
// /metrics endpoint serves it with.
type Scraper struct {
	t   testing.TB
	url string
}

// NewScraper serves the registry for the test's duration.
func NewScraper(t testing.TB) *Scraper {
	srv := httptest.NewServer(promhttp.HandlerFor(ctrlmetrics.Registry, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	return &Scraper{t: t, url: srv.URL}
}

// Scrape reads /metrics once.
func (s *Scraper) Scrape() testutil.Metrics {
	s.t.Helper()
	resp, err := http.Get(s.url)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	m, err := testutil.ParseMetrics(string(body))
	if err != nil {
		s.t.Fatalf("/metrics: %v", err)
	}
	return m
}
