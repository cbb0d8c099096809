package gateway_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/gateway"
	"github.com/dsh-dev/projectmcp/internal/gateway/paths"
	"github.com/dsh-dev/projectmcp/internal/testenv/harness"
	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// keptResult is the size of the text the tool "f__big" returns: a result the gateway keeps
// whole for a resumption (under 1 MiB with its envelope). "h__big" returns 2 KiB less than the
// suite's bound on a server's message (1 MiB), and is called with an id of 4 KiB: its answer
// to the session is over the 1 MiB the gateway keeps of a stream.
const (
	keptResult = 900_000
	overResult = 1<<20 - 2<<10
)

// Calls a 2025-11-25 session abandons after their first progress event are kept for a
// resumption within the process's budget, not each whole result: two sessions of one
// principal abandoning 20 calls each of a tool returning 900 KB (36 MB in all) keep at most the
// principal's 16 MiB. A call abandoned within the bounds is resumed with its answer byte for
// byte as a reader that stayed got it; one whose answer is past the replay bound (1 MiB) is
// resumed with a short error for its id, not the answer. The sessions' end lets go of it all.
func TestGatewayKeptStreamsBounded(t *testing.T) {
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "kept", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{
		harness.FixtureServer(t, "f", "--protocol", "2025-11-25", "--big-result", strconv.Itoa(keptResult)),
		harness.FixtureServer(t, "h", "--protocol", "2025-11-25", "--big-result", strconv.Itoa(overResult)),
	}})
	obj := harness.WaitStatus(t, key, 30*time.Second, "Ready", func(o *v1alpha1.ProjectMCP) bool { return harness.IsReady(o) && o.Status.Endpoint != "" })
	url := obj.Status.Endpoint
	open := func(name string) string {
		sid := post(t, url, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"`+name+`","version":"1"}}}`)
		post(t, url, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		return sid
	}
	sessions := []string{open("abandoner-1"), open("abandoner-2")}
	kept := func() paths.ReplayUsage { return gateway.KeptReplays(harness.Ctl.Gateway) }
	// settled waits for n more calls to have ended and been kept (or evicted at once).
	settled := func(from paths.ReplayUsage, n uint64) paths.ReplayUsage {
		t.Helper()
		var u paths.ReplayUsage
		testutil.Eventually(t, 30*time.Second, fmt.Sprintf("%d abandoned calls kept", n), func() bool {
			u = kept()
			return u.Kept-from.Kept >= n
		})
		return u
	}

	// What a reader that stays gets.
	stayed, err := bigCall(url, sessions[0], "99", "f__big", false)
	if err != nil || !strings.Contains(stayed, `"id":99,`) || len(stayed) < keptResult {
		t.Fatalf("the call a reader stays for: %.200s (%v)", stayed, err)
	}

	before := kept()
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for _, sid := range sessions {
		for w := range 8 { // 8 calls in flight per session, within its share of the connection
			wg.Go(func() {
				for id := 1 + w; id <= 20; id += 8 {
					if _, err := bigCall(url, sid, strconv.Itoa(id), "f__big", true); err != nil {
						errs <- err
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("abandoning a call: %v", err)
	}
	after := settled(before, 40)
	for _, b := range after.PrincipalBytes {
		if b > paths.DefaultReplayBytesPerPrincipal {
			t.Errorf("a principal's kept streams hold %.1f MiB, over its %d MiB", float64(b)/(1<<20), paths.DefaultReplayBytesPerPrincipal>>20)
		}
	}
	if after.Bytes > paths.DefaultReplayBytes || after.Bytes < 8<<20 {
		t.Errorf("the gateway keeps %.1f MiB of 40 abandoned 900 KB results (want the principal's 16 MiB at most, and some kept)", float64(after.Bytes)/(1<<20))
	}
	if after.Evicted == before.Evicted {
		t.Error("36 MB of abandoned results must have evicted some")
	}
	t.Logf("40 abandoned calls of 900 KB: %.1f MiB kept in %d streams, %d evicted", float64(after.Bytes)/(1<<20), after.Streams, after.Evicted-before.Evicted)

	// A call abandoned now is within the bounds: resumed, it gets its answer as it was.
	progress, err := bigCall(url, sessions[0], "99", "f__big", true)
	if err != nil {
		t.Fatal(err)
	}
	settled(after, 1)
	resumed := resumeAnswer(t, url, sessions[0], progress, `"id":99,`)
	if resumed != stayed {
		t.Fatalf("the resumed answer (%d bytes) differs from the one a reader that stayed got (%d bytes)", len(resumed), len(stayed))
	}

	// An answer past the replay bound is resumed as a short error for its id.
	last := kept()
	long := strconv.Quote(strings.Repeat("i", 4<<10))
	progress, err = bigCall(url, sessions[1], long, "h__big", true)
	if err != nil {
		t.Fatal(err)
	}
	if u := settled(last, 1); u.Bytes-last.Bytes > 64<<10 {
		t.Errorf("a 1 MiB answer's stream is charged %d bytes", u.Bytes-last.Bytes)
	}
	tooLarge := resumeAnswer(t, url, sessions[1], progress, `"id":`+long+`,`)
	if len(tooLarge) > 6<<10 || !strings.Contains(tooLarge, `"error"`) || !strings.Contains(tooLarge, "call the tool again") {
		t.Fatalf("the resumed answer past the bound: %.300s (%d bytes)", tooLarge, len(tooLarge))
	}

	for _, sid := range sessions {
		del, _ := http.NewRequest(http.MethodDelete, url, nil)
		setSession(del, sid)
		resp, err := http.DefaultClient.Do(del)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	testutil.Eventually(t, 10*time.Second, "the sessions' kept streams let go", func() bool { return kept().Bytes < before.Bytes+keptResult })
}

// bigCall calls tool (the fixture's big: progress, 300 ms, the result) with a progress token
// as call id (JSON) of session sid. abandon: it goes away once the progress event came, and
// returns that event's id; else it reads the stream to the answer and returns its data.
func bigCall(url, sid, id, tool string, abandon bool) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(fmt.Sprintf(
		`{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":{"name":%q,"arguments":{"ms":300},"_meta":{"progressToken":"t"}}}`, id, tool)))
	setSession(req, sid)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return "", fmt.Errorf("call %.20s: %s, %s: %s", id, resp.Status, ct, body)
	}
	events := bufio.NewReaderSize(resp.Body, 1<<20)
	last := "" // the data of the last event read, to say what came instead
	for {
		e, err := nextEvent(events)
		switch {
		case err != nil:
			return "", fmt.Errorf("call %.20s: %w (the last event: %.300s)", id, err, last)
		case abandon && strings.Contains(e.data, `"notifications/progress"`):
			return e.id, nil // cancel (deferred) drops the connection
		case !abandon && strings.Contains(e.data, `"id":`+id+`,`):
			return e.data, nil
		}
		last = e.data
	}
}

// resumeAnswer resumes session sid's stream after the event lastID and returns the data of the
// answer (the event holding want).
func resumeAnswer(t *testing.T, url, sid, lastID, want string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	get, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	setSession(get, sid)
	get.Header.Set("Accept", "text/event-stream")
	get.Header.Set("Last-Event-ID", lastID)
	resp, err := http.DefaultClient.Do(get)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("resuming after %s: %v %v", lastID, resp, err)
	}
	defer resp.Body.Close()
	events := bufio.NewReaderSize(resp.Body, 1<<20)
	for {
		e, err := nextEvent(events)
		if err != nil {
			t.Fatalf("resuming after %s: %v", lastID, err)
		}
		if strings.Contains(e.data, want) {
			return e.data
		}
	}
}

// nextEvent reads the next event of an event stream.
func nextEvent(r *bufio.Reader) (sseEvent, error) {
	var e sseEvent
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return e, errors.Join(errors.New("the stream ended before the event"), err)
		}
		line = strings.TrimRight(line, "\n")
		if line == "" {
			return e, nil
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "id":
			e.id = value
		case "retry":
			e.retry = value
		case "data":
			e.data += value
		}
	}
}
