package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/gateway"
	"github.com/dsh-dev/projectmcp/internal/testenv/harness"
	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// listenRecorder is a session's HTTP client that names its session and notes the ids of its
// subscriptions/listen requests.
type listenRecorder struct {
	session string
	mu      sync.Mutex
	ids     []string
}

func (r *listenRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set(gateway.SessionHeader, r.session)
	if req.Header.Get("Mcp-Method") == "subscriptions/listen" && req.Body != nil {
		body, _ := io.ReadAll(req.Body)
		req.Body = io.NopCloser(bytes.NewReader(body))
		var env struct {
			ID json.RawMessage `json:"id"`
		}
		_ = json.Unmarshal(body, &env)
		r.mu.Lock()
		r.ids = append(r.ids, strings.Trim(string(env.ID), `"`))
		r.mu.Unlock()
	}
	return http.DefaultTransport.RoundTrip(req)
}

func (r *listenRecorder) listenIDs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.ids...)
}

// listenClient is a 2026-07-28 SDK client session with its list_changed and updates, each by the
// subscription id its _meta names.
type listenClient struct {
	rec     *listenRecorder
	s       *mcp.ClientSession
	changed chan string
	updated chan string // uri subscriptionId
}

func dialListener(t *testing.T, endpoint, session string) *listenClient {
	t.Helper()
	l := &listenClient{rec: &listenRecorder{session: session}, changed: make(chan string, 16), updated: make(chan string, 16)}
	sub := func(m mcp.Meta) string { return fmt.Sprint(m[mcp.MetaKeySubscriptionID]) }
	client := mcp.NewClient(&mcp.Implementation{Name: "listener", Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(_ context.Context, r *mcp.ToolListChangedRequest) { l.changed <- sub(r.Params.Meta) },
		ResourceUpdatedHandler: func(_ context.Context, r *mcp.ResourceUpdatedNotificationRequest) {
			l.updated <- r.Params.URI + " " + sub(r.Params.Meta)
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{Transport: l.rec}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	l.s = s
	return l
}

// servedListens counts the listens the gateway serves itself for project key (an idle taken
// stream has no goroutine to count).
func servedListens(key types.NamespacedName) int { return gateway.Listens(harness.Ctl.Gateway, key) }

// Through the endpoint, a Go SDK 2026-07-28 client's listen (served by the gateway, not the
// SDK's handler) gets one list_changed per config edit, with its own listen's id; two sessions'
// listens are apart, and a resource subscription's updates reach only the session that made it.
func TestGatewayServedListen(t *testing.T) {
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "served", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "a")}})
	obj := harness.WaitStatus(t, key, 30*time.Second, "Ready", func(o *v1alpha1.ProjectMCP) bool { return harness.IsReady(o) && o.Status.Endpoint != "" })
	one, two := dialListener(t, obj.Status.Endpoint, "one"), dialListener(t, obj.Status.Endpoint, "two")
	testutil.Eventually(t, 10*time.Second, "both listens served by the gateway", func() bool { return servedListens(key) == 2 })

	harness.Update(t, key, func(o *v1alpha1.ProjectMCP) { o.Spec.Servers = append(o.Spec.Servers, harness.FixtureServer(t, "b")) })
	for name, l := range map[string]*listenClient{"one": one, "two": two} {
		select {
		case id := <-l.changed:
			if ids := l.rec.listenIDs(); len(ids) != 1 || id != ids[0] {
				t.Errorf("%s: list_changed for subscription %q, its listen is %v", name, id, ids)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("%s: no list_changed after the config edit", name)
		}
	}
	time.Sleep(500 * time.Millisecond)
	if len(one.changed)+len(two.changed) != 0 {
		t.Fatalf("one edit must be one list_changed per session, got %d and %d more", len(one.changed), len(two.changed))
	}

	// A resource subscription is a listen of its own (the SDK client opens one per URI).
	const uri = "fixture://a/readme"
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := one.s.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the subscription's listen served", func() bool { return servedListens(key) == 3 })
	testutil.Eventually(t, 10*time.Second, "the resource's update on its listen", func() bool {
		callOK(t, two.s, "a__touch_resource", map[string]any{"uri": uri})
		select {
		case got := <-one.updated:
			ids := one.rec.listenIDs()
			if want := uri + " " + ids[len(ids)-1]; got != want {
				t.Fatalf("update %q, want %q", got, want)
			}
			return true
		case <-time.After(300 * time.Millisecond):
			return false
		}
	})
	if len(two.updated) != 0 {
		t.Fatalf("a session that did not subscribe got %d updates", len(two.updated))
	}
	// Unsubscribing ends that listen: its session's subscription goes with it.
	if err := one.s.Unsubscribe(ctx, &mcp.UnsubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the subscription's listen ended", func() bool { return servedListens(key) == 2 })
	drain2 := func(ch chan string) {
		for len(ch) > 0 {
			<-ch
		}
	}
	drain2(one.updated)
	callOK(t, two.s, "a__touch_resource", map[string]any{"uri": uri})
	time.Sleep(500 * time.Millisecond)
	if len(one.updated) != 0 {
		t.Fatal("an update after the unsubscribe")
	}
}
