package controllers_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/testenv/harness"
)

// The lifecycle benchmarks time what an agent waits for, end to end through the real API
// server: each reports the median and the 90th percentile of its iterations.
//
//	go test ./controllers -run '^$' -bench . -benchtime 10x

func reportLatencies(b *testing.B, d []time.Duration) {
	b.Logf("latencies: %v", d)
	slices.Sort(d)
	b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, "median-ms")
	b.ReportMetric(float64(d[(len(d)*9-1)/10].Microseconds())/1000, "p90-ms")
	b.ReportMetric(0, "ns/op") // the wall time per iteration includes setup; the medians are the figures
}

// BenchmarkCreateReady: from creating a ProjectMCP with three fixture servers to Ready.
func BenchmarkCreateReady(b *testing.B) {
	ns := harness.NewNamespace(b)
	var d []time.Duration
	for i := 0; b.Loop(); i++ {
		start := time.Now()
		key := harness.Create(b, ns, fmt.Sprintf("p%d", i), v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{
			harness.FixtureServer(b, "a"), harness.FixtureServer(b, "b"), harness.FixtureServer(b, "c"),
		}})
		harness.WaitStatus(b, key, 30*time.Second, "Ready", harness.IsReady)
		d = append(d, time.Since(start))
		harness.DeleteAndWait(b, key)
	}
	reportLatencies(b, d)
}

// BenchmarkRepoint: from a config edit to the new connection Ready in status.
func BenchmarkRepoint(b *testing.B) {
	benchReplacement(b, "repoint", func(o *v1alpha1.ProjectMCP, i int) {
		o.Spec.Servers[0].Stdio.Args = append(o.Spec.Servers[0].Stdio.Args[:4], "--name", fmt.Sprintf("v%d", i))
	})
}

// BenchmarkRebuild: from a reconnect request to the rebuilt connection Ready in status.
func BenchmarkRebuild(b *testing.B) {
	benchReplacement(b, "rebuild", func(o *v1alpha1.ProjectMCP, i int) {
		o.Annotations = map[string]string{v1alpha1.AnnotationReconnectRequestedAt: fmt.Sprintf("request-%d", i)}
	})
}

// benchReplacement times edits that replace server a's connection until status shows the new
// connection Ready.
func benchReplacement(b *testing.B, name string, edit func(*v1alpha1.ProjectMCP, int)) {
	ns := harness.NewNamespace(b)
	key := harness.Create(b, ns, name, v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(b, "a")}})
	harness.WaitStatus(b, key, 30*time.Second, "Ready", harness.IsReady)
	var d []time.Duration
	for i := 0; b.Loop(); i++ {
		old, _ := harness.ServerStatusOf(harness.Get(b, key), "a")
		start := time.Now()
		harness.Update(b, key, func(o *v1alpha1.ProjectMCP) { edit(o, i) })
		harness.WaitStatus(b, key, 30*time.Second, "a new connection", func(o *v1alpha1.ProjectMCP) bool {
			s, _ := harness.ServerStatusOf(o, "a")
			return s.Phase == v1alpha1.PhaseReady && s.Connection != old.Connection
		})
		d = append(d, time.Since(start))
	}
	reportLatencies(b, d)
}
