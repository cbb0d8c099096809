package controllers

import (
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
)

// The lifecycle benchmarks time what an agent waits for, end to end through the real API
// server: each reports the median and the 90th percentile of its iterations.
//
//	go test ./controllers -run '^$' -bench . -benchtime 10x

func reportLatencies(b *testing.B, d []time.Duration) {
	slices.Sort(d)
	b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, "median-ms")
	b.ReportMetric(float64(d[len(d)*9/10].Microseconds())/1000, "p90-ms")
	b.ReportMetric(0, "ns/op") // the wall time per iteration includes setup; the medians are the figures
}

// BenchmarkCreateReady: from creating a ProjectMCP with three fixture servers to Ready.
func BenchmarkCreateReady(b *testing.B) {
	t := b
	ns := newNamespace(t)
	var d []time.Duration
	for i := 0; b.Loop(); i++ {
		start := time.Now()
		key := create(t, ns, fmt.Sprintf("p%d", i), v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{
			fixtureServer(t, "a"), fixtureServer(t, "b"), fixtureServer(t, "c"),
		}})
		waitStatus(t, key, 30*time.Second, "Ready", isReady)
		d = append(d, time.Since(start))
		deleteAndWait(t, key)
	}
	reportLatencies(b, d)
}

// BenchmarkRepoint: from a config edit to the new connection Ready in status.
func BenchmarkRepoint(b *testing.B) {
	t := b
	ns := newNamespace(t)
	key := create(t, ns, "repoint", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{fixtureServer(t, "a")}})
	waitStatus(t, key, 30*time.Second, "Ready", isReady)
	var d []time.Duration
	for i := 0; b.Loop(); i++ {
		old, _ := serverStatusOf(get(t, key), "a")
		start := time.Now()
		update(t, key, func(o *v1alpha1.ProjectMCP) {
			o.Spec.Servers[0].Stdio.Args = append(o.Spec.Servers[0].Stdio.Args[:4], "--name", fmt.Sprintf("v%d", i))
		})
		waitStatus(t, key, 30*time.Second, "repointed", func(o *v1alpha1.ProjectMCP) bool {
			s, _ := serverStatusOf(o, "a")
			return s.Phase == v1alpha1.PhaseReady && s.Connection != old.Connection
		})
		d = append(d, time.Since(start))
	}
	reportLatencies(b, d)
	deleteAndWait(t, key)
}

// BenchmarkRebuild: from a reconnect request to the rebuilt connection Ready in status.
func BenchmarkRebuild(b *testing.B) {
	t := b
	ns := newNamespace(t)
	key := create(t, ns, "rebuild", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{fixtureServer(t, "a")}})
	waitStatus(t, key, 30*time.Second, "Ready", isReady)
	var d []time.Duration
	for i := 0; b.Loop(); i++ {
		old, _ := serverStatusOf(get(t, key), "a")
		start := time.Now()
		update(t, key, func(o *v1alpha1.ProjectMCP) {
			o.Annotations = map[string]string{v1alpha1.AnnotationReconnectRequestedAt: metav1.Now().Format(time.RFC3339Nano)}
		})
		waitStatus(t, key, 30*time.Second, "rebuilt", func(o *v1alpha1.ProjectMCP) bool {
			s, _ := serverStatusOf(o, "a")
			return s.Phase == v1alpha1.PhaseReady && s.Connection != old.Connection
		})
		d = append(d, time.Since(start))
	}
	reportLatencies(b, d)
	deleteAndWait(t, key)
}
