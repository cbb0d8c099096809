//go:build faults

package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/proctest"
	"github.com/dsh-dev/projectmcp/internal/testutil"
	"github.com/dsh-dev/projectmcp/test/fixture"
)

// cycles is how many create/retire cycles the last fault runs (FAULT_CYCLES, default 500).
func cycles() int {
	if n, err := strconv.Atoi(os.Getenv("FAULT_CYCLES")); err == nil && n > 0 {
		return n
	}
	return 500
}

// TestFaults injects each fault in turn against one running controller and prints the table.
func TestFaults(t *testing.T) {
	s := setup(t)
	s.killServer(t)
	s.sessionServerCrash(t)
	s.hangInitialize(t)
	s.hangCall(t)
	s.hugeResult(t)
	s.millionTools(t)
	s.flappingList(t)
	s.toollessServer(t)
	s.slowReader(t)
	s.slowLogReader(t)
	s.sessionHijack(t)
	s.rbacLogs(t)
	s.tokenRead(t)
	s.batchSession(t)
	s.crowdAll(t)
	s.principalConnections(t)
	s.hugeHeaders(t)
	s.randomPaths(t)
	s.revokedSpender(t)
	s.tokenFlood(t)
	s.apiOutage(t)
	s.restart(t)
	s.mirrorBeforeAPI(t)
	s.symlinkSwap(t)
	s.abandonedCalls(t)
	s.createRetire(t)
	fmt.Println()
	printTable(os.Stdout, s.rows)
	if out := os.Getenv("FAULT_TABLE"); out != "" {
		var b bytes.Buffer
		printTable(&b, s.rows)
		if err := os.WriteFile(out, b.Bytes(), 0o644); err != nil {
			t.Error(err)
		}
	}
}

func pids(cs *mcp.ClientSession, tool string) (fixture.PIDs, error) {
	var p fixture.PIDs
	out, err := call(cs, 10*time.Second, tool, nil)
	if err == nil {
		err = json.Unmarshal([]byte(out), &p)
	}
	return p, err
}

func (s *suite) killServer(t *testing.T) {
	s.fault(t, row{fault: "kill -9 of a stdio server and of its grandchild",
		sees:       "a call in flight fails; the next calls wait for the restarted server (same tool names); status shows the exit in `lastError` until it is back",
		guaranteed: "the server is restarted with backoff; its process group and orphaned grandchildren are killed and reaped (no zombie); a killed grandchild alone does not disturb its server",
	}, func(t *testing.T, r *row) {
		key := s.project(t, "killed", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{s.stdio("s", "--grandchild")}}, true)
		cs := s.mustConnect(t, key, "2025-11-25", nil)
		old, err := pids(cs, "s__pids")
		if err != nil || old.Grandchild == 0 {
			t.Fatalf("pids: %+v %v", old, err)
		}
		killed := time.Now()
		if err := syscall.Kill(old.PID, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		var fresh fixture.PIDs
		testutil.Eventually(t, 30*time.Second, "a new server process answering", func() bool {
			p, err := pids(cs, "s__pids")
			fresh = p
			return err == nil && p.PID != old.PID
		})
		r.figure("answering again %s after the kill", ms(time.Since(killed)))
		testutil.Eventually(t, 10*time.Second, "the old grandchild reaped", func() bool { return proctest.Reaped(old.Grandchild) })
		obj := s.get(t, key)
		if st := serverStatus(obj, "s"); st.Connection == "" || st.Phase != v1alpha1.PhaseReady {
			t.Errorf("status after the restart: %+v", st)
		}
		if err := syscall.Kill(fresh.Grandchild, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 10*time.Second, "the killed grandchild reaped", func() bool { return proctest.Reaped(fresh.Grandchild) })
		if got, err := call(cs, 10*time.Second, "s__echo", map[string]any{"text": "still"}); err != nil || got != "still" {
			t.Errorf("the server after its grandchild died: %q %v", got, err)
		}
	})
}

func (s *suite) hangInitialize(t *testing.T) {
	s.fault(t, row{fault: "server hangs in initialize",
		sees:       "a new session waits at most the project's `readyTimeout`, then gets the other servers' tools; status shows the hung server `Disconnected` with a timeout in `lastError`, then `Failed` with a `ConnectFailed` event once its budget is spent",
		guaranteed: "each attempt is bounded by `--connect-timeout` and its process is killed before the next; the project's other servers and other projects serve normally",
	}, func(t *testing.T, r *row) {
		key := s.project(t, "stuck", v1alpha1.ProjectMCPSpec{
			ReadyTimeout: &metav1.Duration{Duration: 2 * time.Second},
			Reconnect:    &v1alpha1.ReconnectPolicy{MaxAttempts: new(int32(2)), InitialBackoff: &metav1.Duration{Duration: 500 * time.Millisecond}},
			Servers:      []v1alpha1.MCPServer{s.stdio("ok"), s.stdio("stuck", "--hang-init")},
		}, false)
		s.waitStatus(t, key, 30*time.Second, "ok Ready", func(o *v1alpha1.ProjectMCP) bool { return serverStatus(o, "ok").Phase == v1alpha1.PhaseReady })
		start := time.Now()
		cs := s.mustConnect(t, key, "2025-11-25", nil)
		r.figure("session ready in %s", ms(time.Since(start)))
		if got, err := call(cs, 10*time.Second, "ok__echo", map[string]any{"text": "fine"}); err != nil || got != "fine" {
			t.Errorf("the healthy server of the project: %q %v", got, err)
		}
		obj := s.waitStatus(t, key, 60*time.Second, "stuck Failed", func(o *v1alpha1.ProjectMCP) bool {
			return serverStatus(o, "stuck").Phase == v1alpha1.PhaseFailed
		})
		st := serverStatus(obj, "stuck")
		if !strings.Contains(st.LastError, "time") {
			t.Errorf("lastError does not say it timed out: %q", st.LastError)
		}
		r.figure("Failed after %s: %q", ms(time.Since(start)), st.LastError)
		testutil.Eventually(t, 10*time.Second, "a ConnectFailed event", func() bool {
			return slices.ContainsFunc(s.events(t, key), func(e string) bool { return strings.HasPrefix(e, v1alpha1.EventConnectFailed) })
		})
	})
}

func (s *suite) hangCall(t *testing.T) {
	s.fault(t, row{fault: "server hangs in one call",
		sees:       "that call fails after `--call-timeout` (5 s here) with an error naming the flag; the server's other calls go on meanwhile",
		guaranteed: "the upstream request is cancelled (`notifications/cancelled`); the connection stays up",
	}, func(t *testing.T, r *row) {
		key := s.project(t, "hanging", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{s.stdio("s")}}, true)
		cs := s.mustConnect(t, key, "2025-11-25", nil)
		start := time.Now()
		done := make(chan error, 1)
		go func() { _, err := call(cs, time.Minute, "s__hang", nil); done <- err }()
		var lat []time.Duration
		for len(done) == 0 && time.Since(start) < 20*time.Second {
			t0 := time.Now()
			if _, err := call(cs, 10*time.Second, "s__echo", map[string]any{"text": "x"}); err != nil {
				t.Fatalf("echo beside the hung call: %v", err)
			}
			lat = append(lat, time.Since(t0))
			time.Sleep(50 * time.Millisecond)
		}
		err := <-done
		took := time.Since(start)
		if err == nil || !strings.Contains(err.Error(), "call-timeout") {
			t.Errorf("the hung call ended with %v, want an error naming --call-timeout", err)
		}
		if took < 4*time.Second {
			t.Errorf("the hung call ended after %s, before the 5 s --call-timeout", took)
		}
		r.figure("hung call failed after %s; %d echo calls meanwhile, p50 %s", ms(took), len(lat), ms(window{lat: lat}.p(50)))
	})
}

func (s *suite) hugeResult(t *testing.T) {
	s.fault(t, row{fault: "2 GB tool result",
		sees:       "that call fails with an error naming `--max-message-bytes` (64 MiB); the next call on the same server works",
		guaranteed: "the controller reads at most the bound and stops; its memory grows by about the bound, once",
	}, func(t *testing.T, r *row) {
		h := startHostile(t, 0, 2<<30)
		key := s.project(t, "huge", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{{Name: "h", HTTP: &v1alpha1.HTTPServer{URL: h.url}}}}, true)
		for _, version := range []string{"2025-11-25", ""} {
			cs := s.mustConnect(t, key, version, nil)
			base := rss(s.ctl.cmd.Process.Pid)
			written := h.written.Load()
			peak := peakRSS(s.ctl.cmd.Process.Pid)
			start := time.Now()
			_, err := call(cs, 2*time.Minute, "h__huge", nil)
			top := peak()
			if err == nil || !strings.Contains(err.Error(), "max-message-bytes") {
				t.Errorf("session %q: the huge call ended with %v, want an error naming --max-message-bytes", version, err)
			}
			sent := h.written.Load() - written
			if top-base > 512<<20 {
				t.Errorf("session %q: the controller's RSS grew by %.0f MiB", version, mib(top-base))
			}
			r.figure("session %s: failed after %s, %.0f MiB read, RSS peak %+.0f MiB", revision(version), ms(time.Since(start)), mib(sent), mib(top-base))
			if got, err := call(cs, 10*time.Second, "h__echo", nil); err != nil || got != "ok" {
				t.Errorf("session %q: the next call: %q %v", version, got, err)
			}
		}
	})
}

func revision(version string) string {
	if version == "" {
		return "2026-07-28"
	}
	return version
}

func (s *suite) millionTools(t *testing.T) {
	s.fault(t, row{fault: "1,000,000-tool list",
		sees:       "the server is refused: status `Failed`/`Disconnected` with an error naming the bound; the project's other servers serve",
		guaranteed: "the list is cut at the bound (bytes or items) before it is held; memory stays bounded",
	}, func(t *testing.T, r *row) {
		h := startHostile(t, 1_000_000, 0)
		base := rss(s.ctl.cmd.Process.Pid)
		peak := peakRSS(s.ctl.cmd.Process.Pid)
		start := time.Now()
		key := s.project(t, "million", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{
			s.stdio("ok"), {Name: "many", HTTP: &v1alpha1.HTTPServer{URL: h.url}},
		}}, false)
		obj := s.waitStatus(t, key, 60*time.Second, "many refused", func(o *v1alpha1.ProjectMCP) bool {
			st := serverStatus(o, "many")
			return st.LastError != "" && serverStatus(o, "ok").Phase == v1alpha1.PhaseReady
		})
		top := peak()
		st := serverStatus(obj, "many")
		if st.Phase == v1alpha1.PhaseReady || !strings.Contains(st.LastError, "more than") && !strings.Contains(st.LastError, "max-") {
			t.Errorf("status of the server listing a million tools: %s %q", st.Phase, st.LastError)
		}
		if top-base > 768<<20 {
			t.Errorf("the controller's RSS grew by %.0f MiB", mib(top-base))
		}
		r.figure("refused after %s: %q; RSS peak %+.0f MiB", ms(time.Since(start)), st.LastError, mib(top-base))
		cs := s.mustConnect(t, key, "2025-11-25", nil)
		if _, err := call(cs, 10*time.Second, "ok__echo", map[string]any{"text": "x"}); err != nil {
			t.Errorf("the project's other server: %v", err)
		}
	})
}

func (s *suite) flappingList(t *testing.T) {
	s.fault(t, row{fault: "list_changed every millisecond",
		sees:       "sessions get `tools/list_changed` a few times a second, not a thousand, and still see the list change; status follows at the same pace",
		guaranteed: "re-lists are coalesced (at most one per 250 ms per connection), so status writes and notifications stay at a few per second",
	}, func(t *testing.T, r *row) {
		h := startHostile(t, 0, 0)
		h.flap = time.Millisecond
		key := s.project(t, "flapping", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{{Name: "f", HTTP: &v1alpha1.HTTPServer{URL: h.url}}}}, true)
		var changed atomic.Int64
		cs := s.mustConnect(t, key, "2025-11-25", &mcp.ClientOptions{
			ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed.Add(1) },
		})
		const period = 5 * time.Second
		rv := s.get(t, key).ResourceVersion
		writes := 0
		changed.Store(0)
		notes := h.notes.Load()
		end := time.Now().Add(period)
		for time.Now().Before(end) {
			if obj := s.get(t, key); obj.ResourceVersion != rv {
				writes++
				rv = obj.ResourceVersion
			}
			time.Sleep(10 * time.Millisecond)
		}
		n, notes := changed.Load(), h.notes.Load()-notes
		perSec := func(n int64) float64 { return float64(n) / period.Seconds() }
		if perSec(int64(writes)) > 6 || perSec(n) > 6 {
			t.Errorf("in %s: %d status writes and %d list_changed, want at most 6 a second", period, writes, n)
		}
		if writes == 0 || n == 0 {
			t.Errorf("in %s: %d status writes and %d list_changed: the changing list must still be followed", period, writes, n)
		}
		if _, err := call(cs, 10*time.Second, "f__echo", nil); err != nil {
			t.Errorf("a call to the flapping server: %v", err)
		}
		r.figure("server sent %d list_changed in %s; %.1f status writes/s, %.1f list_changed/s to a session", notes, period, perSec(int64(writes)), perSec(n))
	})
}

func (s *suite) slowReader(t *testing.T) {
	s.fault(t, row{fault: "slow-reading session",
		sees:       "the session that stops reading loses its own progress notifications (oldest dropped); every other session on the same server gets its progress and results on time",
		guaranteed: "a call's progress is written by the goroutine serving that call, from a bounded queue of its own; log lines, resource updates and list_changed by the session's own writer; every write to a session is bounded",
	}, func(t *testing.T, r *row) {
		key := s.project(t, "slow", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{s.stdio("s")}}, true)
		stalled := s.stalledFlood(t, key, 20000, 1024)
		defer stalled()
		var progress atomic.Int64
		cs := s.mustConnect(t, key, "2025-11-25", &mcp.ClientOptions{
			ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) { progress.Add(1) },
		})
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		params := &mcp.CallToolParams{Name: "s__sleep", Arguments: map[string]any{"ms": 2000}}
		params.SetProgressToken("mine")
		if _, err := cs.CallTool(ctx, params); err != nil {
			t.Fatalf("a call beside the stalled session: %v", err)
		}
		took := time.Since(start)
		if n := progress.Load(); n < 10 || took > 6*time.Second {
			t.Errorf("beside a stalled session: %d progress notifications, call took %s (want ≥ 10 and about 2 s)", n, took)
		}
		r.figure("a 2 s call beside a stalled 20 MB flood: %s, %d progress notifications", ms(took), progress.Load())
	})
}

// stalledFlood opens a stateful session by hand on a connection with a tiny receive buffer,
// starts a flood of count progress notifications of size bytes, and never reads the answer.
// The returned func closes it.
func (s *suite) stalledFlood(t *testing.T, key types.NamespacedName, count, size int) func() {
	t.Helper()
	dialer := &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 2048) })
		if err != nil {
			return err
		}
		return serr
	}}
	hc := &http.Client{Transport: bearer{s.token, &http.Transport{DialContext: dialer.DialContext}}}
	post := func(sid, body string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, s.endpoint(key), strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if sid != "" {
			req.Header.Set("Mcp-Session-Id", sid)
			req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := post("", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"stalled","version":"1"}}}`)
	sid := resp.Header.Get("Mcp-Session-Id")
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if sid == "" {
		t.Fatalf("initialize by hand: status %d, no session id", resp.StatusCode)
	}
	resp = post(sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	resp.Body.Close()
	flood := post(sid, fmt.Sprintf(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"s__flood","arguments":{"count":%d,"bytes":%d},"_meta":{"progressToken":"stalled"}}}`, count, size)) //nolint:bodyclose // the returned func closes it, when the fault is over
	if flood.StatusCode != http.StatusOK {
		t.Fatalf("the flood call: status %d", flood.StatusCode)
	}
	time.Sleep(500 * time.Millisecond) // let the flood fill every buffer on the way
	return func() { flood.Body.Close(); hc.CloseIdleConnections() }
}

func (s *suite) hugeHeaders(t *testing.T) {
	s.fault(t, row{fault: "900 KB session header",
		sees:       "HTTP 431 for a 900 KB `Mcp-Session-Id` or `X-ProjectMCP-Session`; a 900 KB client name is accepted and cut (with a hash) in status",
		guaranteed: "header bytes are bounded (64 KiB) and status stays small, so status writes for the project go on",
	}, func(t *testing.T, r *row) {
		key := s.project(t, "headers", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{s.stdio("s")}}, true)
		huge := strings.Repeat("a", 900<<10)
		var codes []string
		for _, h := range []string{"Mcp-Session-Id", "X-ProjectMCP-Session"} {
			req, _ := http.NewRequest(http.MethodPost, s.endpoint(key), strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
			req.Header.Set("Authorization", "Bearer "+s.token)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set(h, huge)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("%s: %v", h, err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
				t.Errorf("a 900 KB %s: status %d, want 431", h, resp.StatusCode)
			}
			codes = append(codes, fmt.Sprintf("%s → %d", h, resp.StatusCode))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cs, err := s.connectAs(ctx, key, "2025-11-25", huge, nil)
		if err != nil {
			t.Fatalf("a session with a 900 KB client name: %v", err)
		}
		s.undo = append(s.undo, func() { _ = cs.Close() })
		obj := s.waitStatus(t, key, 20*time.Second, "the session in status", func(o *v1alpha1.ProjectMCP) bool { return o.Status.SessionCount == 1 })
		size, _ := json.Marshal(obj.Status)
		longest := 0
		for _, b := range obj.Status.Sessions {
			longest = max(longest, len(b.Client))
		}
		if longest > 256 || len(size) > 16<<10 {
			t.Errorf("status holds a client name of %d bytes, %d bytes in all", longest, len(size))
		}
		r.figure("%s; client name in status: %d bytes; status: %d bytes", strings.Join(codes, ", "), longest, len(size))
	})
}

func (s *suite) randomPaths(t *testing.T) {
	s.fault(t, row{fault: "10,000 random project paths with a valid token",
		sees:       "404 (no such object, or a name no object can have) or 403 while the token's review budget lasts, then 429 (503 with `Retry-After` when the API server cannot confirm a miss in time): the caller is slowed, nobody else",
		guaranteed: "names are validated before any review; one user causes at most 20 access reviews a second; verdicts sit in bounded LRU caches; the controller's memory does not grow with the paths tried",
	}, func(t *testing.T, r *row) {
		const n, workers = 10000, 32
		codes := map[int]int{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		next := atomic.Int64{}
		hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers}}
		start := time.Now()
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := next.Add(1); i <= n; i = next.Add(1) {
					var path string
					switch i % 3 {
					case 0: // in the suite's namespace, where the token may use any ProjectMCP
						path = fmt.Sprintf("/projects/%s/p-%x/mcp", ns, rand.Uint64())
					case 1: // another namespace
						path = fmt.Sprintf("/projects/n-%x/p-%x/mcp", rand.Uint32(), rand.Uint64())
					default: // names no object can have
						path = fmt.Sprintf("/projects/N_%x/%x..%x/mcp", rand.Uint32(), rand.Uint64(), rand.Uint64())
					}
					req, _ := http.NewRequest(http.MethodPost, "http://"+s.addrs.gateway+path, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
					req.Header.Set("Authorization", "Bearer "+s.token)
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("Accept", "application/json, text/event-stream")
					code := 0
					if resp, err := hc.Do(req); err == nil {
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						code = resp.StatusCode
					}
					mu.Lock()
					codes[code]++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		took := time.Since(start)
		hc.CloseIdleConnections()
		for code, count := range codes {
			// 503 (with Retry-After): the API server did not confirm the miss in time.
			if code != http.StatusNotFound && code != http.StatusForbidden && code != http.StatusTooManyRequests && code != http.StatusServiceUnavailable {
				t.Errorf("%d requests got %d", count, code)
			}
		}
		r.figure("%d requests in %s (%.0f/s): %d × 404, %d × 403, %d × 429, %d × 503", n, took.Round(time.Millisecond), float64(n)/took.Seconds(),
			codes[http.StatusNotFound], codes[http.StatusForbidden], codes[http.StatusTooManyRequests], codes[http.StatusServiceUnavailable])
	})
}

func (s *suite) apiOutage(t *testing.T) {
	s.fault(t, row{fault: "API server unreachable for 30 s",
		sees:       "nothing: live sessions keep calling, and new sessions of a token seen before are admitted; status is stale meanwhile and catches up after",
		guaranteed: "connections live in the controller, not in the API server; access decisions already made are kept (stale) while reviews cannot be made; status writes resume with the API server",
	}, func(t *testing.T, r *row) {
		key := s.project(t, "outage", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{s.stdio("s")}}, true)
		first := s.mustConnect(t, key, "2025-11-25", nil)
		s.proxy.cut()
		cut := time.Now()
		ok, failed := 0, 0
		var firstErr error
		var late []*mcp.ClientSession
		for time.Since(cut) < 30*time.Second {
			if _, err := call(first, 10*time.Second, "s__echo", map[string]any{"text": "x"}); err != nil {
				failed++
				firstErr = cmpErr(firstErr, err)
			} else {
				ok++
			}
			if len(late) < 2 && time.Since(cut) > 10*time.Second {
				ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
				cs, err := s.connect(ctx, key, "2025-11-25", nil)
				cancel()
				if err != nil {
					failed++
					firstErr = cmpErr(firstErr, err)
				} else {
					late = append(late, cs)
					s.undo = append(s.undo, func() { _ = cs.Close() })
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		s.proxy.restore()
		back := time.Now()
		if failed > 0 {
			t.Errorf("during the outage %d calls or connects failed, first: %v", failed, firstErr)
		}
		s.waitStatus(t, key, 60*time.Second, "status with the sessions opened during the outage", func(o *v1alpha1.ProjectMCP) bool {
			return o.Status.SessionCount == int32(1+len(late))
		})
		r.figure("%d calls and %d new sessions during the outage, %d failed; status caught up %s after the API server came back",
			ok, len(late), failed, ms(time.Since(back)))
	})
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

func (s *suite) restart(t *testing.T) {
	s.fault(t, row{fault: "controller restart with live sessions",
		sees:             "calls fail while no controller runs; then a stateful session's id is unknown (404) and the client initializes again, a stateless session just goes on; same tool names",
		guaranteed:       "the old controller's servers die with it (parent-death signal); the new one rebuilds every connection from the objects; specs and status are kept",
		bystanderMayFail: true,
	}, func(t *testing.T, r *row) {
		key := s.project(t, "restarted", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{s.stdio("s")}}, true)
		cs := s.mustConnect(t, key, "2025-11-25", nil)
		before := s.get(t, key)
		old := descendants(s.ctl.cmd.Process.Pid)
		if err := s.ctl.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		<-s.ctl.exited
		killed := time.Now()
		for _, p := range old {
			pid := p.pid
			testutil.Eventually(t, 10*time.Second, fmt.Sprintf("the old controller's server %d gone", pid), func() bool { return !proctest.Alive(pid) })
		}
		s.ctl = s.startController(t)
		serving := time.Since(killed)
		if _, err := call(cs, 10*time.Second, "s__echo", map[string]any{"text": "x"}); err == nil {
			t.Errorf("a stateful session of the old controller was still known")
		}
		fresh := s.mustConnect(t, key, "2025-11-25", nil)
		if got, err := call(fresh, 10*time.Second, "s__echo", map[string]any{"text": "again"}); err != nil || got != "again" {
			t.Errorf("after the restart: %q %v", got, err)
		}
		answered := time.Since(killed)
		after := s.waitStatus(t, key, 30*time.Second, "Ready again", func(o *v1alpha1.ProjectMCP) bool { return o.Status.ReadyServers == "1/1" })
		if !slices.EqualFunc(before.Spec.Servers, after.Spec.Servers, func(a, b v1alpha1.MCPServer) bool { return a.Name == b.Name }) {
			t.Errorf("spec changed across the restart")
		}
		r.figure("old servers gone at once; new controller ready %s after the kill, first call answered at %s", ms(serving), ms(answered))
	})
}

// mirror runs `projectmcp mirror` for one folder.
func (s *suite) mirror(t *testing.T, dir, name string) *exec.Cmd {
	cmd := exec.Command(s.bin, "mirror", "--kubeconfig", s.kubeconfig, "-n", ns, "--project", dir, "--name", name)
	var out testutil.SyncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s.undo = append(s.undo, func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("mirror output:\n%s", out.String())
		}
	})
	return cmd
}

func writeConfig(t *testing.T, dir string, servers ...string) {
	t.Helper()
	entries := map[string]any{}
	for _, name := range servers {
		entries[name] = map[string]any{"type": "http", "url": "http://127.0.0.1:1/mcp"}
	}
	b, _ := json.Marshal(map[string]any{"mcpServers": entries})
	if err := os.MkdirAll(filepath.Join(dir, ".dsh"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".dsh", "mcp.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// serverNames waits until the object exists with exactly these servers and returns how long.
func (s *suite) serverNames(t *testing.T, key types.NamespacedName, timeout time.Duration, want ...string) time.Duration {
	t.Helper()
	start := time.Now()
	testutil.Eventually(t, timeout, fmt.Sprintf("%s with servers %v", key, want), func() bool {
		obj := &v1alpha1.ProjectMCP{}
		if err := s.env.Client.Get(context.Background(), key, obj); err != nil {
			return false
		}
		var names []string
		for _, srv := range obj.Spec.Servers {
			names = append(names, srv.Name)
		}
		return slices.Equal(names, want)
	})
	return time.Since(start)
}

func (s *suite) mirrorBeforeAPI(t *testing.T) {
	s.fault(t, row{fault: "mirror started before the API server",
		sees:       "the ProjectMCP appears shortly after the API server does; nothing to restart",
		guaranteed: "the mirror retries with backoff (capped) until applied; it does not exit",
	}, func(t *testing.T, r *row) {
		dir := filepath.Join(t.TempDir(), "early")
		writeConfig(t, dir, "one")
		key := types.NamespacedName{Namespace: ns, Name: "early"}
		s.undo = append(s.undo, func() { s.remove(t, key) })
		s.proxy.cut()
		cmd := s.mirror(t, dir, key.Name)
		time.Sleep(5 * time.Second)
		s.proxy.restore()
		took := s.serverNames(t, key, 60*time.Second, "one")
		if cmd.ProcessState != nil {
			t.Errorf("the mirror exited")
		}
		r.figure("applied %s after the API server came back (5 s outage)", ms(took))
	})
}

func (s *suite) symlinkSwap(t *testing.T) {
	s.fault(t, row{fault: "git-sync symlink swap",
		sees:       "the ProjectMCP follows each swap of the project folder's symlink",
		guaranteed: "the mirror watches the link and the folder it points at, and re-resolves the link when it changes",
	}, func(t *testing.T, r *row) {
		root := t.TempDir()
		writeConfig(t, filepath.Join(root, "rev1"), "one")
		writeConfig(t, filepath.Join(root, "rev2"), "one", "two")
		link := filepath.Join(root, "current")
		swap := func(target string) {
			tmp := filepath.Join(root, "tmp-link")
			if err := os.Symlink(target, tmp); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, link); err != nil {
				t.Fatal(err)
			}
		}
		swap("rev1")
		key := types.NamespacedName{Namespace: ns, Name: "synced"}
		s.undo = append(s.undo, func() { s.remove(t, key) })
		s.mirror(t, link, key.Name)
		s.serverNames(t, key, 30*time.Second, "one")
		var took []string
		for i, target := range []string{"rev2", "rev1", "rev2"} {
			swap(target)
			want := []string{"one", "two"}
			if i == 1 {
				want = want[:1]
			}
			took = append(took, ms(s.serverNames(t, key, 30*time.Second, want...)))
		}
		r.figure("3 swaps followed in %s", strings.Join(took, ", "))
	})
}

func (s *suite) createRetire(t *testing.T) {
	n := cycles()
	s.fault(t, row{fault: fmt.Sprintf("%d create/retire cycles", n),
		sees:       "each added server is Ready and each removed one gone, every time",
		guaranteed: "no growth in processes, descriptors, goroutines or heap (checked after; RSS shown)",
	}, func(t *testing.T, r *row) {
		key := s.project(t, "cycling", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{s.stdio("base")}}, true)
		start := time.Now()
		ctx := context.Background()
		for i := range n {
			for _, add := range []bool{true, false} {
				obj := s.get(t, key)
				patch := client.MergeFrom(obj.DeepCopy())
				if add {
					obj.Spec.Servers = append(obj.Spec.Servers, s.stdio("c"))
				} else {
					obj.Spec.Servers = obj.Spec.Servers[:1]
				}
				if err := s.env.Client.Patch(ctx, obj, patch); err != nil {
					t.Fatalf("cycle %d: %v", i, err)
				}
				gen := obj.Generation
				s.waitStatus(t, key, 30*time.Second, fmt.Sprintf("cycle %d settled", i), func(o *v1alpha1.ProjectMCP) bool {
					if o.Status.ObservedGeneration < gen {
						return false
					}
					if add {
						return serverStatus(o, "c").Phase == v1alpha1.PhaseReady
					}
					return len(o.Status.Servers) == 1
				})
			}
		}
		r.figure("%d cycles in %s (%s each)", n, time.Since(start).Round(time.Second), ms(time.Since(start)/time.Duration(n)))
	})
}
