package buckets

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// BenchmarkProxyHop measures what the Router adds to a request for a project another replica
// serves, beside a bare reverse proxy's loopback hop (the target: no more than that hop) and
// the request sent to the owner directly. The owner answers a small JSON body, as a tools/call
// answer; each sub-benchmark reports its p50.
func BenchmarkProxyHop(b *testing.B) {
	body := `{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"hi"}]}}`
	owner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, body)
	}))
	defer owner.Close()
	ownerURL, _ := url.Parse(owner.URL)
	pooled := func() *http.Transport { // both proxies keep the connections they need
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = 64
		return t
	}
	bare := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(ownerURL) }, Transport: pooled()})
	defer bare.Close()
	transport := pooled()
	router := httptest.NewServer(&Router{
		Ownership: fixedOwnership{owners: map[int]string{0: ownerURL.Host}},
		BucketOf:  func(types.NamespacedName) int { return 0 }, Address: "front:1", Transport: transport,
		Next: http.NotFoundHandler(),
	})
	defer router.Close()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	for _, c := range []struct{ name, base string }{{"direct", owner.URL}, {"bare-proxy", bare.URL}, {"router", router.URL}} {
		b.Run(c.name, func(b *testing.B) {
			took := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			for b.Loop() {
				start := time.Now()
				resp, err := client.Post(c.base+"/projects/ns/p/mcp", "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/call"}`))
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				took = append(took, time.Since(start))
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds()), "p50-µs")
		})
	}
}
