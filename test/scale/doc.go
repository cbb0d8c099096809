// Package scale holds the scale benchmark (`make bench-scale`, BenchmarkScale in this
// package's tests): one `projectmcp controller` process against a real API server, with
// ProjectMCPs × 3 servers (HTTP upstreams shared from a few fixture processes, and a stdio
// variant), ten agent sessions per project of both protocol revisions, config edits timed to
// the sessions' list_changed and tool calls from 200 concurrent sessions. It reports the
// controller's memory, goroutines, rates and latencies at each size and how they grow. The
// replicas stage runs three controller processes sharing the projects by bucket Leases, its
// sessions held by worker processes of the benchmark's own binary (replicas_test.go). The share
// stage (BenchmarkScaleShare) mounts many sessions on one share: session stdio server, a
// process each, and times their mounts and each session's end to its process's exit
// (share_test.go).
//
// It is a benchmark, never run by `go test ./...` (make test): a full run takes about half an
// hour on two cores.
package scale
