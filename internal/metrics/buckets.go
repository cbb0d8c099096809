package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// The replicas' buckets (internal/buckets): how many this replica serves, how they move, and
// the requests it proxies to the replica serving a project.
var (
	BucketsHeld = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "projectmcp_buckets_held",
		Help: "Buckets (projectmcp-bucket-<k> Leases) this replica holds and serves.",
	})
	BucketMoves = counterVec("projectmcp_bucket_moves_total",
		"Buckets this replica took, handed off or lost (not renewed within the renew deadline), by move (taken, handed_off, lost).",
		[]string{"move"})
	ProxiedRequests = counterVec("projectmcp_proxied_requests_total",
		"Gateway requests for projects another replica serves, by outcome (proxied; unserved: no replica serves the bucket now, answered 503).",
		[]string{"outcome"})
)

func init() {
	for _, m := range []string{"taken", "handed_off", "lost"} {
		BucketMoves.WithLabelValues(m)
	}
	for _, o := range []string{"proxied", "unserved"} {
		ProxiedRequests.WithLabelValues(o)
	}
	register(BucketsHeld, BucketMoves, ProxiedRequests)
}
