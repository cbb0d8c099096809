package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/dsh-dev/projectmcp/internal/registry"
	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// Listens are bounded per session and per identity, whatever the number of its sessions: each
// holds a connection and outlives its session's release. Past a bound a listen gets a JSON-RPC
// error naming it, another identity still listens, and a listen that ends gives its place back.
// (Before, one session opened listens without end.)
func TestListensBounded(t *testing.T) {
	reg := registry.New(clocktesting.NewFakeClock(time.Now()), logr.Discard())
	t.Cleanup(reg.Shutdown)
	key := types.NamespacedName{Namespace: "ns", Name: "p"}
	reg.SetDesired(key, registry.Desired{})
	g := New(Options{Registry: reg, Auth: tokenIsPrincipal{}, MaxSessionsPerPrincipal: 6})
	srv := httptest.NewServer(g)
	t.Cleanup(func() {
		g.shutdown()
		srv.CloseClientConnections()
		srv.Close()
	})
	url := srv.URL + Path(key)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n := 0
	listen := func(ctx context.Context, token, session string) (string, bool) {
		n++
		_, first, ok := openListenAs(t, ctx, url, token, session, listenBody(fmt.Sprint(n), `{"toolsListChanged":true}`))
		return first, ok
	}
	for i := range maxListensPerSession {
		if refusal, ok := listen(ctx, "mallory", "m1"); !ok {
			t.Fatalf("listen %d of a session: %s", i+1, refusal)
		}
	}
	if refusal, ok := listen(ctx, "mallory", "m1"); ok || !strings.Contains(refusal, "this session has 4 listens open") {
		t.Fatalf("a listen past the session's bound: %s", refusal)
	}
	second, endSecond := context.WithCancel(ctx)
	defer endSecond()
	if refusal, ok := listen(second, "mallory", "m2"); !ok {
		t.Fatalf("a listen of another session: %s", refusal)
	}
	if refusal, ok := listen(ctx, "mallory", "m2"); !ok {
		t.Fatalf("a listen of another session: %s", refusal)
	}
	if refusal, ok := listen(ctx, "mallory", "m3"); ok || !strings.Contains(refusal, "this identity's sessions have 6 listens open") {
		t.Fatalf("a listen past the identity's bound, from a new session: %s", refusal)
	}
	if refusal, ok := listen(ctx, "alice", "a1"); !ok {
		t.Fatalf("another identity must still listen: %s", refusal)
	}
	endSecond()
	testutil.Eventually(t, 10*time.Second, "the ended listen to give its place back", func() bool {
		return g.project(key).listeners.count() == 7
	})
	if refusal, ok := listen(ctx, "mallory", "m3"); !ok {
		t.Fatalf("a listen after one ended: %s", refusal)
	}
}

// openListenAs posts a listen as the principal token names, and reads its first event: true
// when it is the acknowledgement (the stream goes on until ctx ends, read by the scanner), else
// the refusal.
func openListenAs(t *testing.T, ctx context.Context, url, token, session, body string) (*bufio.Scanner, string, bool) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "subscriptions/listen")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set(SessionHeader, session)
	tr := http.DefaultTransport.(*http.Transport).Clone() // a connection of its own: the stream takes it
	t.Cleanup(tr.CloseIdleConnections)
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		return nil, fmt.Sprintf("%d %s", resp.StatusCode, b), false
	}
	sc := bufio.NewScanner(resp.Body)
	ack := nextEvent(t, sc)
	return sc, ack, strings.Contains(ack, "notifications/subscriptions/acknowledged")
}
