package gateway_test

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/gateway"
	"github.com/dsh-dev/projectmcp/internal/testenv/harness"
)

// A server's connection keeps at most conn.MaxSubscriptions URIs for all the project's
// sessions: past it a session's subscribe gets the connection's error, naming the bound, and
// its own entry is given back, so that once another URI goes it may subscribe.
func TestGatewaySubscriptionsPerConnection(t *testing.T) {
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "connsubs", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "a", "--protocol", "2025-11-25")}})
	harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	// A session bound above the connection's, so that the connection's is the one reached.
	_, base := serveGateway(t, gateway.Options{Registry: harness.Ctl.Registry, MaxSubscriptionsPerSession: conn.MaxSubscriptions + 1})
	url := base + gateway.Path(key)
	sid := post(t, url, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"subs","version":"1"}}}`)
	post(t, url, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	subscribe := func(id int, uri string) string {
		_, got := exchange(t, url, sid, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"resources/subscribe","params":{"uri":%q}}`, id, uri))
		return got
	}
	var next atomic.Int64
	var failed atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := next.Add(1); i <= conn.MaxSubscriptions; i = next.Add(1) {
				if got := subscribe(int(10+i), fmt.Sprintf("fixture://a/items/%d", i)); strings.Contains(got, `"error"`) {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d of the first %d subscribes failed", n, conn.MaxSubscriptions)
	}
	past := "fixture://a/items/past"
	if got := subscribe(5000, past); !strings.Contains(got, fmt.Sprintf("already holds %d subscribed resources", conn.MaxSubscriptions)) {
		t.Fatalf("a subscribe past the connection's bound: %s, want an error naming it", got)
	}
	post(t, url, sid, `{"jsonrpc":"2.0","id":5001,"method":"resources/unsubscribe","params":{"uri":"fixture://a/items/1"}}`)
	if got := subscribe(5002, past); strings.Contains(got, `"error"`) {
		t.Fatalf("once another URI went: %s", got)
	}
}
