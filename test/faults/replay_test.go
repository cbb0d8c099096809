//go:build faults

package faults

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
)

// Abandoned calls: a caller that leaves each call after its first progress event costs the
// controller no more than the bounds on the streams kept for a resumption.

const (
	abandonedCalls    = 1000
	abandonedSessions = 4
	abandonedWorkers  = 16        // calls in flight, 4 a session: within each one's share
	abandonedResult   = 256 << 10 // the big tool's result: kept whole (under 1 MiB)
	// The controller's bounds on kept streams (internal/gateway/paths: budget.go).
	keptPerPrincipal = 16 << 20
)

func (s *suite) abandonedCalls(t *testing.T) {
	s.fault(t, row{fault: "a caller abandoning 1,000 progress-reporting calls",
		sees:       "each call runs to its end; a client that comes back within 15 s resumes its stream (`Last-Event-ID`) and gets the answer, or, once the bounds let its stream go, 400 as for an expired one",
		guaranteed: "the streams kept for a resumption hold at most 64 MiB in the controller, 16 MiB per principal and 16 per session, the one kept longest going first; an answer over 1 MiB is kept as a short error; the controller's heap stays bounded and the bystander's latency unchanged",
	}, func(t *testing.T, r *row) {
		key := s.project(t, "abandoned", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{
			s.stdio("f", "--protocol", "2025-11-25", "--big-result", strconv.Itoa(abandonedResult)),
		}}, true)
		ab := &abandoner{url: s.endpoint(key), hc: &http.Client{Transport: bearer{s.token, http.DefaultTransport}}}
		var sessions []string
		for i := range abandonedSessions {
			sid, err := ab.open(fmt.Sprintf("abandoner-%d", i))
			if err != nil {
				t.Fatal(err)
			}
			sessions = append(sessions, sid)
			s.undo = append(s.undo, func() { ab.end(sid) })
		}
		// A session of the bystander project of its own, measured before and during.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cs, err := s.connectAs(ctx, s.load.key, "2025-11-25", "bystander", nil)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		s.undo = append(s.undo, func() { _ = cs.Close() })
		base := measure(cs, 3*time.Second)
		before := s.ctl.usage(t, true)
		evictedBefore := evictions(scrape(t, s.addrs.metrics))

		stop := make(chan struct{})
		var during window
		var measured sync.WaitGroup
		measured.Go(func() { during = calls(cs, stop) })
		start := time.Now()
		var next, failed atomic.Int64
		var firstErr atomic.Value
		var wg sync.WaitGroup
		for w := range abandonedWorkers {
			sid := sessions[w%abandonedSessions]
			wg.Go(func() {
				for {
					id := next.Add(1)
					if id > abandonedCalls {
						return
					}
					if _, err := ab.call(sid, strconv.FormatInt(id, 10), true); err != nil {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, err.Error())
					}
				}
			})
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		// The controller's heap and kept bytes, sampled until the calls are made.
		var peakHeap, peakKept int64
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for sampling := true; sampling; {
			select {
			case <-done:
				sampling = false
			case <-tick.C:
			}
			m := scrape(t, s.addrs.metrics)
			peakHeap = max(peakHeap, int64(m["go_memstats_heap_inuse_bytes"]))
			peakKept = max(peakKept, int64(m["projectmcp_gateway_replay_kept_bytes"]))
		}
		abandoned := time.Since(start)
		// One more, within the bounds: its client comes back and resumes it.
		progress, err := ab.call(sessions[0], "0", true)
		if err == nil {
			time.Sleep(time.Second) // the call ends (100 ms after its progress), and is kept
			var answer string
			if answer, err = ab.resume(sessions[0], progress, `"id":0,`); err == nil && !strings.Contains(answer, strings.Repeat("b", abandonedResult)) {
				err = fmt.Errorf("the resumed answer: %.200s", answer)
			}
		}
		if err != nil {
			t.Errorf("a call abandoned after the others, resumed: %v", err)
		}
		close(stop)
		measured.Wait()
		m := scrape(t, s.addrs.metrics)
		evicted := evictions(m) - evictedBefore
		peakKept = max(peakKept, int64(m["projectmcp_gateway_replay_kept_bytes"]))

		if n := failed.Load(); n > 0 {
			t.Errorf("%d of %d calls could not be made and abandoned, first: %v", n, abandonedCalls, firstErr.Load())
		}
		if peakKept > keptPerPrincipal {
			t.Errorf("the controller kept %.1f MiB of one principal's abandoned calls, over its %d MiB", mib(peakKept), keptPerPrincipal>>20)
		}
		if evicted == 0 {
			t.Errorf("%d abandoned results of %d KiB evicted none", abandonedCalls, abandonedResult>>10)
		}
		// What is in flight (16 calls of 256 KiB, read, decoded and written) and not yet
		// collected comes on top of the kept streams; with no bound, 1,000 abandoned results
		// would be 250 MiB.
		if grew := peakHeap - before.heap; grew > 128<<20 {
			t.Errorf("the controller's heap grew by %.0f MiB while the calls were abandoned", mib(grew))
		}
		if during.failed > 0 || during.ok == 0 {
			t.Errorf("the bystander session: %d calls, %d failed, first: %s", during.ok+during.failed, during.failed, during.firstErr)
		}
		if p99, limit := during.p(99), max(4*base.p(99), base.p(99)+100*time.Millisecond); p99 > limit {
			t.Errorf("the bystander's p99 rose from %s to %s while the calls were abandoned (bound %s)", ms(base.p(99)), ms(p99), ms(limit))
		}
		r.figure("%d calls abandoned in %s (%.0f/s), %d failed; kept at most %.1f MiB (%d streams let go); controller heap peak %+.0f MiB",
			abandonedCalls, abandoned.Round(100*time.Millisecond), float64(abandonedCalls)/abandoned.Seconds(), failed.Load(),
			mib(peakKept), evicted, mib(peakHeap-before.heap))
		r.figure("bystander session: p50 %s p99 %s before, p50 %s p99 %s during, %d calls, %d failed",
			ms(base.p(50)), ms(base.p(99)), ms(during.p(50)), ms(during.p(99)), during.ok+during.failed, during.failed)
	})
}

// evictions is how many kept streams the controller let go past a bound, every bound's.
func evictions(m map[string]float64) int {
	n := 0.0
	for name, v := range m {
		if strings.HasPrefix(name, "projectmcp_gateway_replay_evictions_total{") {
			n += v
		}
	}
	return int(n)
}

// abandoner is a client of 2025-11-25 sessions over raw HTTP, which can leave a call's stream
// after its first progress event, as a client whose connection drops does.
type abandoner struct {
	url string
	hc  *http.Client
}

func (a *abandoner) request(ctx context.Context, method, sid, body string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, a.url, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
	}
	return a.hc.Do(req)
}

// open initializes a session and returns its id.
func (a *abandoner) open(name string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := a.request(ctx, http.MethodPost, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"`+name+`","version":"1"}}}`)
	if err != nil {
		return "", err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	sid := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || sid == "" {
		return "", fmt.Errorf("initialize: HTTP %d", resp.StatusCode)
	}
	if resp, err = a.request(ctx, http.MethodPost, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); err != nil {
		return "", err
	}
	resp.Body.Close()
	return sid, nil
}

// end deletes a session.
func (a *abandoner) end(sid string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if resp, err := a.request(ctx, http.MethodDelete, sid, ""); err == nil {
		resp.Body.Close()
	}
}

// call calls f__big (progress, 100 ms, the result) as id with a progress token. abandon: it
// drops the connection once the progress event came and returns that event's id.
func (a *abandoner) call(sid, id string, abandon bool) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := a.request(ctx, http.MethodPost, sid,
		`{"jsonrpc":"2.0","id":`+id+`,"method":"tools/call","params":{"name":"f__big","arguments":{"ms":100},"_meta":{"progressToken":"t"}}}`)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("call %s: HTTP %d", id, resp.StatusCode)
	}
	events := bufio.NewReaderSize(resp.Body, 64<<10)
	for {
		eid, data, err := readSSE(events)
		switch {
		case err != nil:
			return "", fmt.Errorf("call %s: %w", id, err)
		case abandon && strings.Contains(data, `"notifications/progress"`):
			return eid, nil // cancel (deferred) drops the connection
		case !abandon && strings.Contains(data, `"id":`+id+`,`):
			return data, nil
		}
	}
}

// resume resumes session sid's stream after the event lastID and returns the data of the
// event holding want.
func (a *abandoner) resume(sid, lastID, want string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.url, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	req.Header.Set("Mcp-Session-Id", sid)
	req.Header.Set("Last-Event-ID", lastID)
	resp, err := a.hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		return "", fmt.Errorf("resuming: HTTP %d %s", resp.StatusCode, b)
	}
	events := bufio.NewReaderSize(resp.Body, 64<<10)
	for {
		_, data, err := readSSE(events)
		if err != nil {
			return "", fmt.Errorf("resuming: %w", err)
		}
		if strings.Contains(data, want) {
			return data, nil
		}
	}
}

// readSSE reads the next event of an event stream: its id and data.
func readSSE(r *bufio.Reader) (id, data string, err error) {
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return "", "", err
		}
		line = strings.TrimRight(line, "\n")
		if line == "" {
			return id, data, nil
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "id":
			id = value
		case "data":
			data += value
		}
	}
}
