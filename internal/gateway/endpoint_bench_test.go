package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	neturl "net/url"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/gateway"
	"github.com/dsh-dev/projectmcp/internal/testenv/harness"
	"github.com/dsh-dev/projectmcp/internal/testutil"
	"github.com/dsh-dev/projectmcp/test/fixture"
)

// Gateway benchmarks, run side by side in one process:
//
//	go test ./internal/gateway -run '^$' -bench Gateway -benchtime 2000x

// connectVersion is a session to url at protocol version ("": the SDK's newest, 2026-07-28).
func connectVersion(b testing.TB, url, version string) *mcp.ClientSession {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: url}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

// BenchmarkGatewayCallOverhead calls the same echo tool of one fixture server directly and
// through the gateway (which reaches that same server over streamable HTTP), alternating, and
// reports p50/p99 of both and the ratio of the medians.
func BenchmarkGatewayCallOverhead(b *testing.B) { benchOverheadHTTP(b, "2025-11-25", nil) }

// benchOverheadHTTP is BenchmarkGatewayCallOverhead for clients of version ("": the SDK's
// newest first) with header, beside the same client through a bare reverse proxy, to a
// fixture server started with args.
func benchOverheadHTTP(b *testing.B, version string, header http.Header, args ...string) {
	url := fixture.StartHTTP(b, args...) + "/mcp"
	ns := harness.NewNamespace(b)
	key := harness.Create(b, ns, "overhead", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{
		{Name: "a", HTTP: &v1alpha1.HTTPServer{URL: url}},
	}})
	harness.WaitStatus(b, key, 30*time.Second, "Ready", harness.IsReady)
	via := harness.ConnectAgent(b, key, version, header).Session
	measureOverhead(b, connectVersion(b, url, version), via, connectVersion(b, bareProxy(b, url), version))
}

// BenchmarkGatewayCallOverheadStateless is BenchmarkGatewayCallOverheadStdio for 2026-07-28:
// a 2026-07-28 client calling a fixture process over stdio directly, and a stateless session
// calling through the gateway, whose connection to its own fixture process speaks 2026-07-28
// too (the fast path).
func BenchmarkGatewayCallOverheadStateless(b *testing.B) {
	ns := harness.NewNamespace(b)
	key := harness.Create(b, ns, "overhead-stateless", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(b, "a")}})
	harness.WaitStatus(b, key, 30*time.Second, "Ready", harness.IsReady)
	via := harness.ConnectAgent(b, key, "", http.Header{gateway.SessionHeader: {"bench"}}).Session
	measureOverhead(b, direct(b, "a", ""), via, nil)
}

// BenchmarkGatewayCallOverheadStatelessHTTP is BenchmarkGatewayCallOverhead for the client
// Claude Code is: one that asks for 2026-07-28 first. The fixture's stateful HTTP server
// answers it at 2025-11-25, directly and through the bare proxy; through the gateway it is a
// stateless session, whose calls the gateway bridges to that server.
func BenchmarkGatewayCallOverheadStatelessHTTP(b *testing.B) {
	benchOverheadHTTP(b, "", http.Header{gateway.SessionHeader: {"bench"}})
}

// BenchmarkGatewayCallOverheadNewest is BenchmarkGatewayCallOverhead at 2026-07-28 end to end:
// the fixture's stateless HTTP server speaks it, so the client speaks it directly and through
// the bare proxy too, and the gateway forwards the stateless session's calls on a connection
// of that revision.
func BenchmarkGatewayCallOverheadNewest(b *testing.B) {
	benchOverheadHTTP(b, "", http.Header{gateway.SessionHeader: {"bench"}}, "--stateless")
}

// bareProxy puts a plain reverse proxy (the standard library's, nothing MCP about it) in front
// of url: the cost of one more HTTP hop on loopback, the floor for any gateway.
func bareProxy(b *testing.B, url string) string {
	target, err := neturl.Parse(url)
	if err != nil {
		b.Fatal(err)
	}
	proxy, closeIdle := testutil.BareProxy(target)
	srv := httptest.NewServer(proxy)
	b.Cleanup(func() { srv.Close(); closeIdle() })
	return srv.URL + target.Path
}

// measureOverhead calls echo on direct and a__echo on via, alternating (after a warm-up), and
// reports p50/p99 of both, the added p50 and the ratio of the medians; with floor (a session
// through a bare HTTP proxy to the same server), also the p50 of that.
func measureOverhead(b *testing.B, direct, via, floor *mcp.ClientSession) {
	ctx := context.Background()
	call := func(s *mcp.ClientSession, name string) time.Duration {
		start := time.Now()
		res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: map[string]any{"text": "x"}})
		if err != nil || res.IsError {
			b.Fatalf("%s: %v %+v", name, err, res)
		}
		return time.Since(start)
	}
	for range 50 { // warm both paths
		call(direct, "echo")
		call(via, "a__echo")
	}
	// What the gateway costs per forwarded call, beyond the client and the server: the heap
	// allocated and the CPU used by the whole process per call through the endpoint, less the
	// same for a direct call (the fixture and the client run in this process both ways).
	cost := func(s *mcp.ClientSession, name string) (bytes, cpu float64) {
		const n = 300
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		cpu0 := processCPU()
		for range n {
			call(s, name)
		}
		cpu1 := processCPU()
		runtime.ReadMemStats(&after)
		return float64(after.TotalAlloc-before.TotalAlloc) / n, testutil.Micros(cpu1-cpu0) / n
	}
	directBytes, directCPU := cost(direct, "echo")
	viaBytes, viaCPU := cost(via, "a__echo")
	var floorBytes, floorCPU float64
	if floor != nil { // what one plain HTTP hop costs the same way
		floorBytes, floorCPU = cost(floor, "echo")
	}
	var d, g, f []time.Duration
	for b.Loop() {
		d = append(d, call(direct, "echo"))
		g = append(g, call(via, "a__echo"))
		if floor != nil {
			f = append(f, call(floor, "echo"))
		}
	}
	if floor != nil {
		b.ReportMetric(testutil.Micros(testutil.Percentile(f, 50)), "bare-proxy-p50-µs")
		b.ReportMetric(floorBytes-directBytes, "bare-proxy-B/call")
		b.ReportMetric(floorCPU-directCPU, "bare-proxy-cpu-µs/call")
	}
	b.ReportMetric(testutil.Micros(testutil.Percentile(d, 50)), "direct-p50-µs")
	b.ReportMetric(testutil.Micros(testutil.Percentile(d, 99)), "direct-p99-µs")
	b.ReportMetric(testutil.Micros(testutil.Percentile(g, 50)), "gateway-p50-µs")
	b.ReportMetric(testutil.Micros(testutil.Percentile(g, 99)), "gateway-p99-µs")
	b.ReportMetric(testutil.Micros(testutil.Percentile(g, 50)-testutil.Percentile(d, 50)), "added-p50-µs")
	b.ReportMetric(float64(testutil.Percentile(g, 50))/float64(testutil.Percentile(d, 50)), "ratio-p50")
	b.ReportMetric(viaBytes-directBytes, "gateway-B/call")
	b.ReportMetric(viaCPU-directCPU, "gateway-cpu-µs/call")
	b.ReportMetric(0, "ns/op")
}

// processCPU is the CPU time (user and system) this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkGatewayMount: a new session (initialize + first tools/list) on a project whose five
// servers are already connected.
func BenchmarkGatewayMount(b *testing.B) {
	ns := harness.NewNamespace(b)
	var servers []v1alpha1.MCPServer
	for i := range 5 {
		servers = append(servers, harness.FixtureServer(b, fmt.Sprintf("s%d", i)))
	}
	key := harness.Create(b, ns, "mount", v1alpha1.ProjectMCPSpec{Servers: servers})
	obj := harness.WaitStatus(b, key, 30*time.Second, "Ready", func(o *v1alpha1.ProjectMCP) bool { return harness.IsReady(o) && o.Status.Endpoint != "" })
	client := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	var d []time.Duration
	for b.Loop() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		start := time.Now()
		s, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: obj.Status.Endpoint},
			&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
		if err != nil {
			b.Fatal(err)
		}
		res, err := s.ListTools(ctx, nil)
		d = append(d, time.Since(start))
		if err != nil || len(res.Tools) < 5 {
			b.Fatalf("tools/list: %v (%d tools)", err, len(res.Tools))
		}
		_ = s.Close()
		cancel()
	}
	b.ReportMetric(float64(testutil.Percentile(d, 50).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(testutil.Percentile(d, 99).Microseconds())/1000, "p99-ms")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkGatewayConfigEdit: from a config edit (a server added, pointing at an already
// running fixture) to notifications/tools/list_changed at a live session; then the server is
// removed again for the next round.
func BenchmarkGatewayConfigEdit(b *testing.B) {
	url := fixture.StartHTTP(b) + "/mcp"
	ns := harness.NewNamespace(b)
	key := harness.Create(b, ns, "edit", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(b, "base")}})
	harness.WaitStatus(b, key, 30*time.Second, "Ready", harness.IsReady)
	ag := harness.ConnectAgent(b, key, "2025-11-25", nil)
	var d []time.Duration
	for i := 0; b.Loop(); i++ {
		drain(ag.Changed)
		name := fmt.Sprintf("w%d", i)
		start := time.Now()
		harness.Update(b, key, func(o *v1alpha1.ProjectMCP) {
			o.Spec.Servers = append(o.Spec.Servers, v1alpha1.MCPServer{Name: name, HTTP: &v1alpha1.HTTPServer{URL: url}})
		})
		select {
		case <-ag.Changed:
			d = append(d, time.Since(start))
		case <-time.After(10 * time.Second):
			b.Fatal("no list_changed after a config edit")
		}
		ag.WaitTools(b, "the new server's tools", harness.Has(name+"__echo"))
		harness.Update(b, key, func(o *v1alpha1.ProjectMCP) { o.Spec.Servers = o.Spec.Servers[:1] })
		ag.WaitTools(b, "the server's tools gone", harness.HasNot(name+"__echo"))
	}
	b.ReportMetric(float64(testutil.Percentile(d, 50).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(testutil.Percentile(d, 99).Microseconds())/1000, "p99-ms")
	b.ReportMetric(0, "ns/op")
}

func drain(ch chan struct{}) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// BenchmarkGatewayCallOverheadStdio is BenchmarkGatewayCallOverhead with a stdio upstream: a
// direct 2025-11-25 session to one fixture process against the same call through the gateway,
// whose connection to its own fixture process is stdio too. The server speaks 2025-11-25, as
// most servers do today (the fast path); the -2026 variant's speaks 2026-07-28 too, so calls
// from a 2025-11-25 session go through the SDK, which translates between the revisions.
func BenchmarkGatewayCallOverheadStdio(b *testing.B) {
	benchStdio(b, "--protocol", "2025-11-25")
}

func BenchmarkGatewayCallOverheadStdio2026(b *testing.B) { benchStdio(b) }

func benchStdio(b *testing.B, args ...string) {
	ns := harness.NewNamespace(b)
	key := harness.Create(b, ns, "overhead-stdio", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(b, "a", args...)}})
	harness.WaitStatus(b, key, 30*time.Second, "Ready", harness.IsReady)
	measureOverhead(b, direct(b, "a", "2025-11-25"), harness.ConnectAgent(b, key, "2025-11-25", nil).Session, nil)
}

// BenchmarkGatewayThroughput: 8 concurrent sessions calling echo, directly to one fixture over
// streamable HTTP and through the gateway (one shared connection to the same fixture), each
// for the same number of calls; reports calls per second both ways and their ratio.
func BenchmarkGatewayThroughput(b *testing.B) { benchThroughput(b, "2025-11-25") }

// BenchmarkGatewayThroughputStateless is BenchmarkGatewayThroughput with 2026-07-28 clients:
// eight stateless sessions through the gateway (bridged to the 2025-11-25 server).
func BenchmarkGatewayThroughputStateless(b *testing.B) { benchThroughput(b, "") }

// BenchmarkGatewayThroughputNewest is BenchmarkGatewayThroughput at 2026-07-28 end to end: the
// fixture's stateless HTTP server, reached directly and through the gateway by 2026-07-28
// clients.
func BenchmarkGatewayThroughputNewest(b *testing.B) { benchThroughput(b, "", "--stateless") }

// benchThroughput is BenchmarkGatewayThroughput for clients of version ("": the SDK's newest
// first) to a fixture server started with args.
func benchThroughput(b *testing.B, version string, args ...string) {
	const sessions = 8
	url := fixture.StartHTTP(b, args...) + "/mcp"
	ns := harness.NewNamespace(b)
	key := harness.Create(b, ns, "throughput", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{
		{Name: "a", HTTP: &v1alpha1.HTTPServer{URL: url}},
	}})
	harness.WaitStatus(b, key, 30*time.Second, "Ready", harness.IsReady)
	var directs, vias []*mcp.ClientSession
	for i := range sessions {
		directs = append(directs, connectVersion(b, url, version))
		var header http.Header
		if version == "" { // eight stateless sessions, not one
			header = http.Header{gateway.SessionHeader: {fmt.Sprintf("s%d", i)}}
		}
		vias = append(vias, harness.ConnectAgent(b, key, version, header).Session)
	}
	run := func(ss []*mcp.ClientSession, name string, calls int) float64 {
		return testutil.CallRate(b, ss, name, calls)
	}
	run(directs, "echo", 20)
	run(vias, "a__echo", 20)
	var direct, via float64
	for b.Loop() {
		direct += run(directs, "echo", 25)
		via += run(vias, "a__echo", 25)
	}
	b.ReportMetric(direct/float64(b.N), "direct-calls/s")
	b.ReportMetric(via/float64(b.N), "gateway-calls/s")
	b.ReportMetric(via/direct, "ratio")
	b.ReportMetric(0, "ns/op")
}
