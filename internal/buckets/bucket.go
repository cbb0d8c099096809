// Package buckets spreads projects over the controller's replicas. A fixed number of buckets
// (--buckets) each have a coordination.k8s.io Lease named projectmcp-bucket-<k> in the
// controller's namespace; a replica serves a project only while it holds the Lease of the
// project's bucket. Which bucket a project is in is a pure function of its namespace and name
// (Of), so any replica computes it from the endpoint's URL without a lookup.
//
// A Holder takes and keeps its fair share of the buckets, counted from the replicas' own
// Leases (projectmcp-replica-<identity>, renewed like the buckets'), and gives up its surplus
// when replicas join. It gives a bucket up only after its owner has stopped serving it
// (Config.Release), and it stops serving a bucket it cannot renew before the Lease can expire,
// as leader election does: the renew deadline is shorter than the lease duration, so no two
// replicas ever serve one bucket.
package buckets

import (
	"hash/fnv"
	"strconv"

	"k8s.io/apimachinery/pkg/types"
)

// LeasePrefix and ReplicaPrefix begin the names of the bucket and replica Leases.
const (
	LeasePrefix   = "projectmcp-bucket-"
	ReplicaPrefix = "projectmcp-replica-"
)

// Labels and annotations of the Leases, and the label that pins a project to a bucket.
const (
	// LabelBucket is on every bucket Lease: the bucket's number.
	LabelBucket = "mcp.dsh.dev/bucket"
	// LabelReplica is on every replica Lease: "true".
	LabelReplica = "mcp.dsh.dev/replica"
	// AnnotationAddress is the holder's gateway address (host:port), on the Leases it holds,
	// for the replicas that proxy its projects' requests to it.
	AnnotationAddress = "mcp.dsh.dev/address"
	// LabelPin on a ProjectMCP puts it in the bucket it names (a number below --buckets)
	// instead of the one its name hashes to.
	LabelPin = "mcp.dsh.dev/bucket"
)

// DefaultBuckets is how many buckets there are unless --buckets says otherwise: many more than
// replicas, so that a replica joining or leaving moves few projects.
const DefaultBuckets = 64

// MaxBuckets bounds --buckets: each bucket is a Lease every replica lists each retry period.
const MaxBuckets = 1024

// Of is the bucket of the project key among n: the pin when it is a number below n, else
// FNV-1a of "namespace/name" modulo n. It depends on nothing but its arguments, so every
// replica agrees.
func Of(key types.NamespacedName, n int, pin string) int {
	if n <= 1 {
		return 0
	}
	if k, err := strconv.Atoi(pin); err == nil && k >= 0 && k < n {
		return k
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(key.Namespace))
	_, _ = h.Write([]byte{'/'})
	_, _ = h.Write([]byte(key.Name))
	return int(h.Sum32() % uint32(n))
}

// LeaseName is the name of bucket k's Lease.
func LeaseName(k int) string { return LeasePrefix + strconv.Itoa(k) }

// FairShare is how many of n buckets each of replicas replicas holds at most: the ceiling, so
// that every bucket has room to be held.
func FairShare(n, replicas int) int {
	if replicas < 1 {
		replicas = 1
	}
	return (n + replicas - 1) / replicas
}
