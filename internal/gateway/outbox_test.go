package gateway

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// An outbox writes in order while its writer is held up (as by a session that stops reading):
// past outboxSize its oldest log lines go first, a change already waiting is not queued twice,
// other sessions' writers run on, and no writer or outbox stays once everything is written.
func TestOutboxes(t *testing.T) {
	var t0 outboxes
	slow, other := &mcp.ServerSession{}, &mcp.ServerSession{}
	var mu sync.Mutex
	var got []string
	record := func(s string) func() { return func() { mu.Lock(); got = append(got, s); mu.Unlock() } }
	held, release := make(chan struct{}), make(chan struct{})
	t0.put(slow, notice{method: "notifications/message", send: func() { close(held); <-release }})
	<-held
	t0.put(slow, notice{method: "notifications/tools/list_changed", send: record("tools")})
	t0.put(slow, notice{method: "notifications/resources/updated", uri: "u:1", send: record("u:1")})
	for i := range outboxSize + 10 {
		t0.put(slow, notice{method: "notifications/message", send: record(fmt.Sprint(i))})
	}
	t0.put(slow, notice{method: "notifications/tools/list_changed", send: record("tools again")})
	t0.put(slow, notice{method: "notifications/resources/updated", uri: "u:1", send: record("u:1 again")})
	t0.put(slow, notice{method: "notifications/resources/updated", uri: "u:2", send: record("u:2")})

	done := make(chan struct{})
	t0.put(other, notice{method: "notifications/message", send: func() { close(done) }})
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("one session's held writer held up another's")
	}

	close(release)
	waitEmpty(t, &t0)
	want := []string{"tools", "u:1"}
	for i := 13; i < outboxSize+10; i++ { // the 13 oldest lines made room for the newest and u:2
		want = append(want, fmt.Sprint(i))
	}
	want = append(want, "u:2")
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(got, want) {
		t.Fatalf("wrote %d: %v … %v; want %d: %v … %v", len(got), got[:3], got[len(got)-3:], len(want), want[:3], want[len(want)-3:])
	}
}

func waitEmpty(t *testing.T, o *outboxes) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		o.mu.Lock()
		n := len(o.boxes)
		o.mu.Unlock()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d outboxes still held once all was written", n)
		}
		time.Sleep(time.Millisecond)
	}
}
