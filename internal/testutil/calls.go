package testutil

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The call benchmarks' shared measures: the gateway's in one process (internal/gateway) and
// with every part a process of its own (cmd/projectmcp).

// Percentile is the p-th percentile of d (d is left as it is).
func Percentile(d []time.Duration, p int) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[(len(s)*p-1)/100]
}

// Micros is d in microseconds, as the benchmarks report it.
func Micros(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }

// CallRate has every session of ss call tool (an echo) calls times, all at once, and returns
// the calls per second; a failed call fails the benchmark.
func CallRate(b testing.TB, ss []*mcp.ClientSession, tool string, calls int) float64 {
	b.Helper()
	start := time.Now()
	errs := make(chan error, len(ss))
	for _, s := range ss {
		go func() {
			for range calls {
				if _, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"text": "x"}}); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range ss {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	return float64(calls*len(ss)) / time.Since(start).Seconds()
}
