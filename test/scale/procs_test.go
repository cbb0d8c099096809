package scale

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dsh-dev/projectmcp/internal/controlplane"
	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// binaries are the programs the benchmark runs as processes of their own, built once.
type binaries struct {
	controller, fixture string
}

func build(b *testing.B) binaries {
	b.Helper()
	root, err := controlplane.RepoRoot()
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	bins := binaries{controller: filepath.Join(dir, "projectmcp"), fixture: filepath.Join(dir, "mcp-fixture")}
	for out, pkg := range map[string]string{bins.controller: "./cmd/projectmcp", bins.fixture: "./test/fixture/cmd/mcp-fixture"} {
		cmd := exec.Command("go", "build", "-o", out, pkg)
		cmd.Dir = root
		if msg, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("go build %s: %v\n%s", pkg, err, msg)
		}
	}
	return bins
}

// process is a child process of the benchmark, stopped with SIGTERM (then SIGKILL).
type process struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

func (p *process) pid() int { return p.cmd.Process.Pid }

func (p *process) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

func start(b *testing.B, cmd *exec.Cmd) *process {
	b.Helper()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	p := &process{cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	return p
}

// startHTTPFixture runs a fixture process serving streamable HTTP on a free port and returns
// it with its /mcp URL.
func startHTTPFixture(b *testing.B, bin string, args ...string) (*process, string) {
	b.Helper()
	cmd := exec.Command(bin, append([]string{"--http", "127.0.0.1:0"}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = io.Discard
	p := start(b, cmd)
	r := bufio.NewReader(out)
	line, err := r.ReadString('\n')
	if err != nil {
		p.stop()
		b.Fatalf("fixture: no LISTENING line: %v", err)
	}
	go func() { _, _ = io.Copy(io.Discard, r) }()
	return p, strings.TrimPrefix(strings.TrimSpace(line), "LISTENING ") + "/mcp"
}

// startHTTPFixtures runs n HTTP fixture processes, every other one stateless (2026-07-28), the
// rest with 2025-11-25 sessions; it returns their URLs and what stops them.
func startHTTPFixtures(b *testing.B, bin string, n int) ([]string, func()) {
	b.Helper()
	var urls []string
	var procs []*process
	for i := range n {
		args := []string{"--protocol", "2025-11-25"}
		if i%2 == 1 {
			args = []string{"--stateless"}
		}
		p, url := startHTTPFixture(b, bin, append(args, "--name", fmt.Sprintf("f%d", i))...)
		procs = append(procs, p)
		urls = append(urls, url)
	}
	return urls, func() {
		for _, p := range procs {
			p.stop()
		}
	}
}

// controller is the `projectmcp controller` process under measurement.
type controller struct {
	*process
	metrics, pprof, gateway string
	logPath                 string
}

// startController runs the controller with its log in dir, and args after the benchmark's own.
func startController(b *testing.B, bin, kubeconfig, dir string, args ...string) *controller {
	b.Helper()
	c := &controller{metrics: testutil.FreeAddr(b), pprof: testutil.FreeAddr(b), gateway: testutil.FreeAddr(b), logPath: filepath.Join(dir, "controller.log")}
	logFile, err := os.Create(c.logPath)
	if err != nil {
		b.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(bin, "controller", "--kubeconfig", kubeconfig,
		"--leader-elect=false", "--health-probe-bind-address", "0",
		"--metrics-bind-address", c.metrics, "--pprof-bind-address", c.pprof, "--gateway-bind-address", c.gateway,
		"--allow-url", "127.0.0.1/32", // the HTTP fixtures listen on loopback
		// Sessions that only listen send no request: keep them for the whole run.
		"--session-timeout", "2h", "--stateless-session-idle", "2h")
	cmd.Args = append(cmd.Args, args...)
	// SCALE_CONTROLLER_ARGS adds flags (e.g. --health-interval 1m --relist-interval 5m).
	cmd.Args = append(cmd.Args, strings.Fields(os.Getenv("SCALE_CONTROLLER_ARGS"))...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// SCALE_CONTROLLER_ENV adds NAME=value words to the controller's environment alone (e.g.
	// GOMEMLIMIT=900MiB, as a pod with a 1 GiB memory limit would set it).
	cmd.Env = append(os.Environ(), strings.Fields(os.Getenv("SCALE_CONTROLLER_ENV"))...)
	c.process = start(b, cmd)
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := c.scrape(); err == nil {
			return c
		}
		select {
		case <-c.exited:
			b.Fatalf("the controller exited; its log is %s", c.logPath)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			c.stop()
			b.Fatalf("the controller's /metrics did not answer within a minute; its log is %s", c.logPath)
		}
	}
}

// scrape reads the controller's /metrics.
func (c *controller) scrape() (testutil.Metrics, error) {
	resp, err := http.Get("http://" + c.metrics + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %s", resp.Status)
	}
	text, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return testutil.ParseMetrics(string(text))
}

// sample is the controller's state at one moment.
type sample struct {
	at         time.Time
	rss, hwm   int64 // bytes (VmRSS, VmHWM)
	threads    int   // OS threads
	heapLive   float64
	heapInuse  float64
	goroutines float64
	stacks     float64 // bytes of goroutine stacks
	fds        float64
	cpu        time.Duration // user + system since start
	apiCPU     time.Duration // the API server's and etcd's, since they started
	reconciles float64       // controller_runtime_reconcile_total of projectmcp
	statusPut  float64       // status writes (patches sent)
	conflicts  float64       // of which refused for a conflict (the object changed meanwhile)
	connReady  float64       // connections Ready
	connAll    float64       // connections in any phase
	reconcileS float64       // seconds spent reconciling, in all
	children   int           // its child processes (stdio servers)
	childRSS   int64         // their RSS, bytes
}

// sample collects the controller's state. It first has the controller collect its garbage (the
// heap profile's gc=1), so that the live heap is the heap right now, not at the last cycle.
func (c *controller) sample(b *testing.B) sample {
	b.Helper()
	if resp, err := http.Get("http://" + c.pprof + "/debug/pprof/heap?gc=1"); err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	m, err := c.scrape()
	if err != nil {
		b.Fatalf("scrape: %v (controller log %s)", err, c.logPath)
	}
	s := sample{at: time.Now(),
		heapLive:   m.Sum("go_gc_heap_live_bytes"),
		heapInuse:  m.Sum("go_memstats_heap_inuse_bytes"),
		goroutines: m.Sum("go_goroutines"),
		stacks:     m.Sum("go_memstats_stack_inuse_bytes"),
		fds:        m.Sum("process_open_fds"),
		reconciles: m.Sum("controller_runtime_reconcile_total", "controller", "projectmcp"),
		statusPut:  m.Sum("projectmcp_status_writes_total"),
		conflicts:  m.Sum("projectmcp_status_writes_total", "result", "conflict"),
		connReady:  m.Sum("projectmcp_connections", "phase", "Ready"),
		connAll:    m.Sum("projectmcp_connections"),
		reconcileS: m.Sum("controller_runtime_reconcile_time_seconds_sum", "controller", "projectmcp"),
	}
	s.rss, s.hwm, s.threads = procMemory(c.pid())
	s.cpu = procCPU(c.pid())
	s.apiCPU = apiServerCPU()
	s.children, s.childRSS = childrenRSS(c.pid())
	return s
}

// procMemory is a process's VmRSS and VmHWM in bytes, and its OS threads.
func procMemory(pid int) (rss, hwm int64, threads int) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb << 10
		case "VmHWM:":
			hwm = kb << 10
		case "Threads:":
			threads = int(kb)
		}
	}
	return rss, hwm, threads
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times (100 on Linux everywhere).
const clockTicks = 100

// statFields are the fields of /proc/<pid>/stat after the command name.
func statFields(pid int) []string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	s := string(data)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
}

// procCPU is a process's user and system CPU time.
func procCPU(pid int) time.Duration {
	f := statFields(pid)
	if len(f) < 13 {
		return 0
	}
	user, _ := strconv.ParseInt(f[11], 10, 64)
	sys, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(user+sys) * time.Second / clockTicks
}

// childrenRSS counts a process's children and adds up their RSS.
func childrenRSS(pid int) (n int, rss int64) {
	entries, _ := os.ReadDir("/proc")
	want := strconv.Itoa(pid)
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f := statFields(child); len(f) > 1 && f[1] == want {
			r, _, _ := procMemory(child)
			n++
			rss += r
		}
	}
	return n, rss
}

// profile saves the controller's profile at path (/debug/pprof/heap, ...) into file.
func (c *controller) profile(ctx context.Context, path, file string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.pprof+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(f, resp.Body)
	return err
}

// processCPU is the CPU time (user and system) this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loadAverage is the machine's 1-minute load average.
func loadAverage() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(data))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// apiServerCPU is the CPU time the kube-apiserver and etcd this process started have used.
func apiServerCPU() time.Duration {
	entries, _ := os.ReadDir("/proc")
	self := strconv.Itoa(os.Getpid())
	var total time.Duration
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		name := strings.TrimSpace(string(comm))
		if f := statFields(pid); len(f) > 1 && f[1] == self && (name == "kube-apiserver" || name == "etcd") {
			total += procCPU(pid)
		}
	}
	return total
}
