package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/gateway"
	"github.com/dsh-dev/projectmcp/internal/testutil"
	"github.com/dsh-dev/projectmcp/test/fixture"
)

// The call path with every part a process of its own, as a deployment has it and as the
// issue that set the call path's targets measured it: an MCP server (the fixture's stateless
// 2026-07-28 HTTP server), a bare reverse proxy in front of it, the controller with its
// gateway, and the client (this process). Unlike the in-process benchmarks of
// internal/gateway, the proxy's and the gateway's CPU are their own processes', read from
// /proc, and neither shares a collector with the client or the server.
//
//	go test ./cmd/projectmcp -run '^$' -bench CallPathProcesses -benchtime 2000x -count 3

// bareProxyEnvVar makes the test binary a bare reverse proxy to the URL it holds
// (serveBareProxy).
const bareProxyEnvVar = "PROJECTMCP_TEST_BARE_PROXY"

// serveBareProxy serves testutil.BareProxy to target on a loopback port, which it announces
// as the fixture does ("LISTENING <url>"), until it is killed.
func serveBareProxy(target string) {
	u, err := url.Parse(target)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	proxy, _ := testutil.BareProxy(u)
	fmt.Printf("LISTENING http://%s\n", ln.Addr())
	fmt.Fprintln(os.Stderr, http.Serve(ln, proxy))
	os.Exit(1)
}

// callPath is the processes of one call-path benchmark and a session through each way.
type callPath struct {
	gatewayPID, proxyPID int
	direct, bare, via    func(n int) []*mcp.ClientSession // n sessions each way
}

// startCallPath starts the processes, the server with args, and opens sessions of version
// ("": the SDK's newest, 2026-07-28) each way.
func startCallPath(b *testing.B, version string, args ...string) *callPath {
	env := apiServer(b)
	ctx := context.Background()
	server := fixture.StartHTTPProcess(b, selfCommand(fixture.EnvVar+"=1", append([]string{"--http", "127.0.0.1:0"}, args...)...)) + "/mcp"
	proxyCmd := selfCommand(bareProxyEnvVar + "=" + server)
	proxy := fixture.StartHTTPProcess(b, proxyCmd) + "/mcp"
	var names []string
	for _, prefix := range []string{"callpath-", "callpath-leases-"} {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}
		if err := env.Client.Create(ctx, ns); err != nil {
			b.Fatal(err)
		}
		names = append(names, ns.Name)
	}
	key := types.NamespacedName{Namespace: names[0], Name: "callpath"}
	obj := &v1alpha1.ProjectMCP{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
		Spec: v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{{Name: "a", HTTP: &v1alpha1.HTTPServer{URL: server}}}}}
	env.DeleteOnCleanup(b, obj)
	if err := env.Client.Create(ctx, obj); err != nil {
		b.Fatal(err)
	}
	gw := startReplica(b, "gateway", env.Kubeconfig, names[1], "http://127.0.0.1:1")
	testutil.Eventually(b, 60*time.Second, "the project Ready", func() bool {
		got := &v1alpha1.ProjectMCP{}
		return env.Client.Get(ctx, key, got) == nil && got.Status.ReadyServers == "1/1"
	})
	endpoint := "http://" + gw.gateway + gateway.Path(key)
	opts := &mcp.ClientSessionOptions{ProtocolVersion: version}
	open := func(url, sessionPrefix string) func(int) []*mcp.ClientSession {
		return func(n int) []*mcp.ClientSession {
			var out []*mcp.ClientSession
			for i := range n {
				var hc *http.Client
				if sessionPrefix != "" && version == "" { // each its own stateless session of the gateway's
					hc = &http.Client{Transport: sessionNamed{sessionPrefix + strconv.Itoa(i)}}
				}
				s, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).Connect(ctx,
					&mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc}, opts)
				if err != nil {
					b.Fatalf("connecting to %s: %v", url, err)
				}
				b.Cleanup(func() { _ = s.Close() })
				out = append(out, s)
			}
			return out
		}
	}
	return &callPath{gatewayPID: gw.cmd.Process.Pid, proxyPID: proxyCmd.Process.Pid,
		direct: open(server, ""), bare: open(proxy, ""), via: open(endpoint, "bench-")}
}

// selfCommand is this test binary with env added to its environment and args.
func selfCommand(env string, args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), env)
	return cmd
}

// sessionNamed names a stateless session for the gateway (gateway.SessionHeader).
type sessionNamed struct{ name string }

func (s sessionNamed) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(gateway.SessionHeader, s.name)
	return http.DefaultTransport.RoundTrip(r)
}

// BenchmarkCallPathProcesses calls the server's echo directly, through the bare proxy and
// through the gateway, alternating, every client and the server (the fixture's stateless one)
// at 2026-07-28; it reports the p50s, what each hop adds to the direct p50 and their ratio,
// and the CPU the proxy's and the gateway's processes use per call (less what the gateway's
// uses idle: its probes and re-lists).
func BenchmarkCallPathProcesses(b *testing.B) { benchCallPath(b, "", "--stateless") }

// BenchmarkCallPathProcesses2025 is BenchmarkCallPathProcesses at 2025-11-25: the fixture's
// stateful server, and every client a 2025-11-25 session.
func BenchmarkCallPathProcesses2025(b *testing.B) { benchCallPath(b, "2025-11-25") }

func benchCallPath(b *testing.B, version string, args ...string) {
	cp := startCallPath(b, version, args...)
	direct, bare, via := cp.direct(1)[0], cp.bare(1)[0], cp.via(1)[0]
	call := func(s *mcp.ClientSession, name string) time.Duration {
		start := time.Now()
		res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: map[string]any{"text": "x"}})
		if err != nil || res.IsError {
			b.Fatalf("%s: %v %+v", name, err, res)
		}
		return time.Since(start)
	}
	for range 50 {
		call(direct, "echo")
		call(bare, "echo")
		call(via, "a__echo")
	}
	idleStart, idle0 := time.Now(), processCPU(b, cp.gatewayPID)
	time.Sleep(2 * time.Second)
	idleRate := float64(processCPU(b, cp.gatewayPID)-idle0) / float64(time.Since(idleStart))
	var d, p, g []time.Duration
	// Each process's CPU over the whole loop: what a call costs it includes what it does after
	// answering (the rest of its handler, its collector).
	start, p0, g0 := time.Now(), processCPU(b, cp.proxyPID), processCPU(b, cp.gatewayPID)
	for b.Loop() {
		d = append(d, call(direct, "echo"))
		p = append(p, call(bare, "echo"))
		g = append(g, call(via, "a__echo"))
	}
	proxyCPU := processCPU(b, cp.proxyPID) - p0
	gatewayCPU := processCPU(b, cp.gatewayPID) - g0 - time.Duration(idleRate*float64(time.Since(start)))
	dp, pp, gp := testutil.Percentile(d, 50), testutil.Percentile(p, 50), testutil.Percentile(g, 50)
	b.ReportMetric(testutil.Micros(dp), "direct-p50-µs")
	b.ReportMetric(testutil.Micros(pp), "bare-proxy-p50-µs")
	b.ReportMetric(testutil.Micros(gp), "gateway-p50-µs")
	b.ReportMetric(testutil.Micros(pp-dp), "bare-proxy-added-µs")
	b.ReportMetric(testutil.Micros(gp-dp), "gateway-added-µs")
	b.ReportMetric(float64(gp-dp)/float64(pp-dp), "added-ratio")
	b.ReportMetric(testutil.Micros(proxyCPU)/float64(len(p)), "bare-proxy-cpu-µs/call")
	b.ReportMetric(testutil.Micros(gatewayCPU)/float64(len(g)), "gateway-cpu-µs/call")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkCallPathProcessesThroughput: eight sessions calling echo at once for the same
// number of calls each, directly, through the bare proxy and through the gateway; calls per
// second each way and the ratios to direct.
func BenchmarkCallPathProcessesThroughput(b *testing.B) {
	const sessions, calls = 8, 25
	cp := startCallPath(b, "", "--stateless")
	ways := []struct {
		name string
		ss   []*mcp.ClientSession
		tool string
	}{{"direct", cp.direct(sessions), "echo"}, {"bare-proxy", cp.bare(sessions), "echo"}, {"gateway", cp.via(sessions), "a__echo"}}
	rate := func(ss []*mcp.ClientSession, tool string) float64 { return testutil.CallRate(b, ss, tool, calls) }
	for _, w := range ways {
		rate(w.ss, w.tool) // warm
	}
	sums := make([]float64, len(ways))
	for b.Loop() {
		for i, w := range ways {
			sums[i] += rate(w.ss, w.tool)
		}
	}
	for i, w := range ways {
		b.ReportMetric(sums[i]/float64(b.N), w.name+"-calls/s")
	}
	b.ReportMetric(sums[1]/sums[0], "bare-proxy-ratio")
	b.ReportMetric(sums[2]/sums[0], "gateway-ratio")
	b.ReportMetric(0, "ns/op")
}

// processCPU is the user and system CPU process pid has used, from /proc (in clock ticks of
// 10 ms: the benchmark reads it over thousands of calls).
func processCPU(b *testing.B, pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// The fields after the command's name, which is in parentheses and may hold spaces:
	// utime and stime are the 12th and 13th of them.
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	var ticks int64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}
