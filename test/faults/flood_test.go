//go:build faults

package faults

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/client-go/kubernetes"
)

// The token flood: callers without a valid token cost the API server a bounded number of
// TokenReviews, and users with one do not notice.

const (
	floodSources  = 40   // addresses 127.0.0.2 and on, one flooding worker each
	floodRate     = 1000 // requests a second, all workers together
	floodDuration = 10 * time.Second
	// The controller's budgets for tokens it does not know (the defaults of
	// --gateway-new-token-reviews and --gateway-new-token-reviews-per-source).
	newTokenRate, newTokenBurst = 50, 100
)

// fromAddr is a transport whose connections leave from ip: the gateway sees another caller.
func fromAddr(ip string) *http.Transport {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	return &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 4}
}

// tokenReviews is how many TokenReviews the API server has answered (its
// apiserver_request_total): the suite makes none, so they are the controller's.
func (s *suite) tokenReviews(t *testing.T) int {
	t.Helper()
	cs, err := kubernetes.NewForConfig(s.env.Config)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("reading the API server's metrics: %v", err)
	}
	total := 0.0
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "apiserver_request_total{") || !strings.Contains(line, `resource="tokenreviews"`) {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err == nil {
			total += v
		}
	}
	return int(total)
}

// flood sends made-up bearer tokens to key's endpoint from floodSources addresses at
// floodRate until stop is closed, and counts the answers (0: no answer); a 429 without
// Retry-After counts as -429.
func (s *suite) flood(stop <-chan struct{}, endpoint string) map[int]int {
	codes := map[int]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range floodSources {
		hc := &http.Client{Transport: fromAddr(fmt.Sprintf("127.0.0.%d", 2+i)), Timeout: 10 * time.Second}
		wg.Go(func() {
			defer hc.CloseIdleConnections()
			tick := time.NewTicker(time.Second * floodSources / floodRate)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				req, _ := http.NewRequest(http.MethodPost, endpoint, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
				req.Header.Set("Authorization", fmt.Sprintf("Bearer %016x%016x", rand.Uint64(), rand.Uint64()))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Accept", "application/json, text/event-stream")
				code := 0
				if resp, err := hc.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					code = resp.StatusCode
					if code == http.StatusTooManyRequests && resp.Header.Get("Retry-After") == "" {
						code = -code
					}
				}
				mu.Lock()
				codes[code]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return codes
}

// calls keeps calling echo on cs every 20 ms until stop is closed, and returns the window.
func calls(cs *mcp.ClientSession, stop <-chan struct{}) window {
	var w window
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return w
		case <-tick.C:
		}
		start := time.Now()
		if got, err := call(cs, 10*time.Second, "local__echo", map[string]any{"text": "flood"}); err != nil || got != "flood" {
			w.failed++
			if w.firstErr == "" {
				w.firstErr = fmt.Sprintf("%q, %v", got, err)
			}
			continue
		}
		w.ok++
		w.lat = append(w.lat, time.Since(start))
	}
}

// measure runs calls for d.
func measure(cs *mcp.ClientSession, d time.Duration) window {
	stop := make(chan struct{})
	time.AfterFunc(d, func() { close(stop) })
	return calls(cs, stop)
}

func (s *suite) tokenFlood(t *testing.T) {
	s.fault(t, row{fault: fmt.Sprintf("token flood: %d requests a second with made-up bearer tokens from %d addresses", floodRate, floodSources),
		sees:       "the flood gets 401 while the budgets for unknown tokens last, then 429 with `Retry-After` at once; users with a valid token, from the flooding addresses too, keep calling, and their tokens are reviewed again when their verdicts lapse",
		guaranteed: "a token the gateway does not know costs a TokenReview only within 50 a second (burst 100) for all callers and 5 a second (burst 20) per address; a token known to be valid is never charged; invalid verdicts sit in a cache of their own; every review has a 5 s deadline",
	}, func(t *testing.T, r *row) {
		key := s.load.key
		// A user with a valid token who shares the first flooding address.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		c := mcp.NewClient(&mcp.Implementation{Name: "neighbour", Version: "1"}, nil)
		cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: s.endpoint(key),
			HTTPClient: &http.Client{Transport: bearer{s.token, fromAddr("127.0.0.2")}}}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
		cancel()
		if err != nil {
			t.Fatalf("connect from the flooding address: %v", err)
		}
		s.undo = append(s.undo, func() { _ = cs.Close() })
		base := measure(cs, 3*time.Second)

		reviews := s.tokenReviews(t)
		stop := make(chan struct{})
		var codes map[int]int
		var flooded sync.WaitGroup
		flooded.Go(func() { codes = s.flood(stop, s.endpoint(key)) })
		start := time.Now()
		time.AfterFunc(floodDuration, func() { close(stop) })
		during := calls(cs, stop)
		flooded.Wait()
		took := time.Since(start)
		reviews = s.tokenReviews(t) - reviews

		total := 0
		for code, n := range codes {
			total += n
			if code != http.StatusUnauthorized && code != http.StatusTooManyRequests {
				t.Errorf("%d flood requests got %d (-429: without Retry-After)", n, code)
			}
		}
		if during.failed > 0 || during.ok == 0 {
			t.Errorf("the valid session on a flooding address: %d calls, %d failed, first: %s", during.ok+during.failed, during.failed, during.firstErr)
		}
		if p99, limit := during.p(99), max(4*base.p(99), base.p(99)+100*time.Millisecond); p99 > limit {
			t.Errorf("the valid session's p99 rose from %s to %s during the flood (bound %s)", ms(base.p(99)), ms(p99), ms(limit))
		}
		// The new-token budget, plus the re-reviews of the valid token (every
		// --gateway-review-ttl, 2 s here) and a second of slack for the clocks.
		if bound := newTokenBurst + newTokenRate*int(took/time.Second+1) + 2*int(took/(2*time.Second)+1); reviews > bound {
			t.Errorf("the flood cost %d TokenReviews in %s, over the budget's %d", reviews, took.Round(time.Millisecond), bound)
		}
		r.figure("%d requests in %s: %d × 401, %d × 429; %d TokenReviews (%.0f/s)", total, took.Round(100*time.Millisecond),
			codes[http.StatusUnauthorized], codes[http.StatusTooManyRequests], reviews, float64(reviews)/took.Seconds())
		r.figure("valid session on a flooding address: p50 %s p99 %s before, p50 %s p99 %s during, %d calls, %d failed",
			ms(base.p(50)), ms(base.p(99)), ms(during.p(50)), ms(during.p(99)), during.ok+during.failed, during.failed)
	})
}
