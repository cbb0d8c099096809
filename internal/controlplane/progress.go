package controlplane

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// reporter writes progress lines for a person: one per step, and while a long step runs, the
// time spent so far, so that a twenty-minute cold build never looks hung.
type reporter struct {
	mu    sync.Mutex
	w     io.Writer
	step  string    // what is running now, for the periodic line
	start time.Time // of the whole fill, for elapsed times
}

func newReporter(w io.Writer) *reporter {
	if w == nil {
		w = io.Discard
	}
	return &reporter{w: w}
}

func (r *reporter) printf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(r.w, "control plane: "+format+"\n", args...)
}

// begin announces a step; the periodic line names it until the next step begins.
func (r *reporter) begin(step string) {
	r.mu.Lock()
	r.step = step
	r.mu.Unlock()
	r.printf("%s", step)
}

// elapsed is the time since startTicking, rounded for reading.
func (r *reporter) elapsed() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return time.Since(r.start).Round(time.Second)
}

// startTicking prints "still <step>" every interval until the returned stop is called; stop
// returns once the ticking goroutine has ended.
func (r *reporter) startTicking(interval time.Duration) (stop func()) {
	r.mu.Lock()
	r.start = time.Now()
	r.mu.Unlock()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				r.mu.Lock()
				step, since := r.step, time.Since(r.start).Round(time.Second)
				r.mu.Unlock()
				r.printf("still %s (%s so far)", step, since)
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
	}
}
