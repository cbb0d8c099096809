package paths

import (
	"context"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// logged is a relayed log line saying what.
func logged(what string) relayed { return relayed{log: &mcp.LoggingMessageParams{Data: what}} }

// said is what a relayed message says, for comparing what was written.
func said(e relayed) string {
	switch {
	case e.request != nil:
		return string(e.request)
	case e.log != nil:
		return e.log.Data.(string)
	}
	return e.progress.Message
}

// A call the server sends nothing for runs on the calling goroutine: no goroutine begins, no
// handoff between two.
func TestRelayCallSendsOnCallersGoroutine(t *testing.T) {
	var stack string
	_, _ = relayCall(context.Background(), func(relayed) { t.Error("nothing to write") },
		func(context.Context, func(relayed)) (int, error) {
			buf := make([]byte, 64<<10)
			stack = string(buf[:runtime.Stack(buf, false)])
			return 0, nil
		})
	if !strings.Contains(stack, "testing.tRunner(") { // the test's own goroutine
		t.Fatalf("send ran on another goroutine:\n%s", stack)
	}
}

// What the server sends during a call, from whichever goroutine, is written in its order, a
// request after what came before it, and all of it before relayCall returns; nothing later is
// written.
func TestRelayCallWritesInOrderBeforeTheResult(t *testing.T) {
	var mu sync.Mutex
	var wrote []string
	returned := false
	write := func(e relayed) {
		mu.Lock()
		defer mu.Unlock()
		if returned {
			t.Errorf("%q written after the call returned", said(e))
		}
		wrote = append(wrote, said(e))
	}
	var late func(relayed)
	_, _ = relayCall(context.Background(), write, func(_ context.Context, put func(relayed)) (int, error) {
		late = put
		done := make(chan struct{})
		go func() { // the connection's reader, which every session shares
			defer close(done)
			put(logged("one"))
			put(logged("two"))
			put(relayed{request: []byte("ask")}) // returns once written
		}()
		<-done
		put(logged("three"))
		return 0, nil
	})
	mu.Lock()
	returned = true
	got := strings.Join(wrote, ",")
	mu.Unlock()
	late(logged("late"))
	asked := make(chan struct{})
	go func() {
		defer close(asked)
		late(relayed{request: []byte("late ask")})
	}()
	select { // a request after the call waits for no writer
	case <-asked:
	case <-time.After(10 * time.Second):
		t.Error("a request put after the call still waits to be written")
	}
	if got != "one,two,ask,three" {
		t.Fatalf("written %q, want one,two,ask,three", got)
	}
}

// A session slower than its server loses the oldest progress waiting past progressQueue, and
// the goroutine handing them over never waits.
func TestRelayCallDropsTheOldestWaiting(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var wrote []string
	write := func(e relayed) {
		if len(wrote) == 0 {
			close(entered)
			<-release // the session reads slowly
		}
		wrote = append(wrote, said(e))
	}
	const sent = progressQueue + 8
	_, _ = relayCall(context.Background(), write, func(_ context.Context, put func(relayed)) (int, error) {
		put(logged("first"))
		<-entered
		for i := range sent {
			put(logged(string(rune('a' + i))))
		}
		close(release)
		return 0, nil
	})
	if len(wrote) != 1+progressQueue || wrote[0] != "first" || wrote[1] != string(rune('a'+sent-progressQueue)) {
		t.Fatalf("written %q: want the first, then the newest %d", wrote, progressQueue)
	}
}

// A resumable stream opened for its events sends each at once, the priming event first; one
// opened for the answer alone holds the priming event and the answer for the handler's
// return, which sends them with the stream's end in one write.
func TestSSEWriterHeldForTheAnswer(t *testing.T) {
	answer := []byte(`{"jsonrpc":"2.0","id":1,"result":{}}`)
	for name, tc := range map[string]struct {
		open    func(http.ResponseWriter, *replayStream) *sseWriter
		flushed bool
	}{
		"for events":           {newSSEWriter, true},
		"for the answer alone": {newHeldSSEWriter, false},
	} {
		t.Run(name, func(t *testing.T) {
			var rs replays
			rec := httptest.NewRecorder()
			s := tc.open(rec, rs.open("s", "p"))
			if rec.Flushed != tc.flushed {
				t.Fatalf("the priming event sent at once: %v, want %v", rec.Flushed, tc.flushed)
			}
			s.event(answer)
			body := rec.Body.String()
			if rec.Flushed != tc.flushed || !strings.HasPrefix(body, "id: ") || !strings.Contains(body, "\ndata: \n\n") ||
				!strings.HasSuffix(body, "data: "+string(answer)+"\n\n") {
				t.Fatalf("flushed %v, stream %q", rec.Flushed, body)
			}
		})
	}
}
