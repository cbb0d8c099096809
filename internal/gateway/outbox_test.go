package gateway

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// An outbox writes in order, drops its oldest past outboxSize while its writer is held up,
// and keeps no goroutine once it is empty.
func TestOutbox(t *testing.T) {
	var o outbox
	var mu sync.Mutex
	var got []int
	held, release := make(chan struct{}), make(chan struct{})
	o.put(func() { close(held); <-release }) // the writer is held, as by a session that stops reading
	<-held
	for i := range outboxSize + 10 {
		o.put(func() { mu.Lock(); got = append(got, i); mu.Unlock() })
	}
	close(release)
	deadline := time.Now().Add(5 * time.Second)
	for {
		o.mu.Lock()
		idle := !o.running && len(o.queue) == 0
		o.mu.Unlock()
		if idle {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the writer did not drain and end")
		}
		time.Sleep(time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	var want []int
	for i := 10; i < outboxSize+10; i++ { // the 10 oldest went
		want = append(want, i)
	}
	if !slices.Equal(got, want) || o.dropped != 10 {
		t.Fatalf("wrote %d (first %v), dropped %d; want the newest %d in order", len(got), got[:min(3, len(got))], o.dropped, outboxSize)
	}
}
