package conn

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// A new session is Ready before its subscriptions come back: with a server that holds every
// subscribe, a call succeeds while the whole restore waits, at most maxRestoring subscribes
// are in flight, and once the server answers the restore ends and the subscriptions hold (an
// update reaches the connection).
func TestRestoreAfterReady(t *testing.T) {
	uris := map[string]int{}
	for i := range 3 * maxRestoring {
		uris[fmt.Sprintf("fixture://a/held/%d", i)] = 1
	}
	updated := make(chan string, 1)
	onNotice := func(n Notice) {
		if n.ResourceUpdated != nil {
			select {
			case updated <- n.ResourceUpdated.URI:
			default:
			}
		}
	}
	// A connect timeout of a minute: no held subscribe gives up while the test runs.
	c := start(t, Options{Server: stdioServer("a", "--hold-subscribe", "--protocol", "2025-11-25"), Subscriptions: uris,
		OnNotice: onNotice, Settings: Settings{ConnectTimeout: time.Minute}})
	waitPhase(t, c, v1alpha1.PhaseReady)
	if got := call(t, c, "echo", map[string]any{"text": "served"}); got != "served" {
		t.Fatalf("echo: %q", got)
	}
	if n := c.subs.restoring.Load(); n != int64(len(uris)) {
		t.Fatalf("%d URIs still to restore, want all %d: the server answered no subscribe yet", n, len(uris))
	}
	testutil.Eventually(t, 10*time.Second, "the restore's subscribes in flight", func() bool {
		return testutil.CountStacks("conn.(*subscriptions).resubscribe(") == maxRestoring
	})

	call(t, c, "release_subscribe", nil)
	testutil.Eventually(t, 10*time.Second, "the restore's end", func() bool { return c.subs.restoring.Load() == 0 })
	uri := fmt.Sprintf("fixture://a/held/%d", len(uris)-1)
	call(t, c, "touch_resource", map[string]any{"uri": uri})
	select {
	case got := <-updated:
		if got != uri {
			t.Fatalf("update of %q, want %q", got, uri)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no update of a restored subscription")
	}
}

// A connection keeps at most max URIs subscribed: another URI is refused with an invalid
// request naming the bound, a URI already subscribed still counts a subscriber, and once one
// goes another may come.
func TestSubscriptionsPerConnectionBounded(t *testing.T) {
	c := start(t, Options{Server: stdioServer("a", "--protocol", "2025-11-25")})
	waitPhase(t, c, v1alpha1.PhaseReady)
	c.subs.max = 3
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 3 {
		if err := c.Subscribe(ctx, fmt.Sprintf("fixture://a/r/%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	err := c.Subscribe(ctx, "fixture://a/r/3")
	var rpcErr *jsonrpc.Error
	if !errors.As(err, &rpcErr) || rpcErr.Code != jsonrpc.CodeInvalidRequest || !strings.Contains(rpcErr.Message, "3 subscribed resources") {
		t.Fatalf("a fourth URI: %v, want an invalid request naming the bound", err)
	}
	if err := c.Subscribe(ctx, "fixture://a/r/0"); err != nil {
		t.Fatalf("another subscriber of a URI already subscribed: %v", err)
	}
	c.Unsubscribe("fixture://a/r/1")
	if err := c.Subscribe(ctx, "fixture://a/r/3"); err != nil {
		t.Fatalf("a URI once another went: %v", err)
	}
}
