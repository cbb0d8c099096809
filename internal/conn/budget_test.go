package conn

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
)

// The reconnect backoff window of each attempt: InitialBackoff doubled per attempt up to
// MaxBackoff, the defaults standing for zero values.
func TestPolicyWindow(t *testing.T) {
	p := Policy{InitialBackoff: time.Second, MaxBackoff: 5 * time.Second}
	cases := map[string]struct {
		p    Policy
		n    int
		want time.Duration
	}{
		"no attempt":          {p, 0, 0},
		"first":               {p, 1, time.Second},
		"second":              {p, 2, 2 * time.Second},
		"third":               {p, 3, 4 * time.Second},
		"capped":              {p, 4, 5 * time.Second},
		"capped far on":       {p, 200, 5 * time.Second},
		"defaults":            {Policy{}, 1, v1alpha1.DefaultInitialBackoff},
		"defaults, capped":    {Policy{}, 100, v1alpha1.DefaultMaxBackoff},
		"max below initial":   {Policy{InitialBackoff: time.Minute, MaxBackoff: time.Second}, 3, time.Minute},
		"max above initial 0": {Policy{MaxBackoff: time.Hour}, 2, 2 * v1alpha1.DefaultInitialBackoff},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := tc.p.Window(tc.n); got != tc.want {
				t.Errorf("Window(%d) = %s, want %s", tc.n, got, tc.want)
			}
		})
	}
}

// A connection started with its budget already spent (a rebuild of one that failed) is tried
// once: a server that still fails is Failed at once, without waiting out a backoff (an hour
// here) for attempts it no longer has; with budget left, it waits for its next attempt.
func TestSpentAttemptsAreNotGivenBack(t *testing.T) {
	broken := filepath.Join(t.TempDir(), "broken")
	if err := os.WriteFile(broken, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	policy := Policy{MaxAttempts: 3, InitialBackoff: time.Hour, MaxBackoff: time.Hour}
	spent := start(t, Options{Server: stdioServer("s", "--fail-if-exists", broken), Policy: policy, Attempts: 3})
	if s := waitFor(t, spent, "the first attempt's end", func(s Snapshot) bool { return !s.Starting() || s.Phase == v1alpha1.PhaseDisconnected }); s.Phase != v1alpha1.PhaseFailed {
		t.Fatalf("a connection whose budget is spent must fail on its one attempt: %s", s.Phase)
	}
	left := start(t, Options{Server: stdioServer("s", "--fail-if-exists", broken), Policy: policy, Attempts: 2})
	if s := waitFor(t, left, "the first attempt's end", func(s Snapshot) bool { return !s.Starting() || s.Phase == v1alpha1.PhaseDisconnected }); s.Phase != v1alpha1.PhaseDisconnected || s.ReconnectAttempts != 3 {
		t.Fatalf("with one attempt left it must wait to reconnect: %s, attempt %d", s.Phase, s.ReconnectAttempts)
	}
}

// InUse: requests in flight, or subscriptions a Ready session holds.
func TestInUse(t *testing.T) {
	c := start(t, Options{Server: stdioServer("s")})
	waitPhase(t, c, v1alpha1.PhaseReady)
	if c.InUse() {
		t.Fatal("an idle connection is not in use")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = c.Call(ctx, &mcp.CallToolParams{Name: "hang", Arguments: map[string]any{}}, nil)
	}()
	for deadline := time.Now().Add(10 * time.Second); !c.InUse(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a call in flight must make the connection in use")
		}
	}
	cancel()
	<-done
	if c.InUse() {
		t.Fatal("in use after its only call ended")
	}
	uri := "fixture://fixture/readme"
	subCtx, subCancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer subCancel()
	if err := c.Subscribe(subCtx, uri); err != nil {
		t.Fatal(err)
	}
	if !c.InUse() {
		t.Fatal("a subscription makes the connection in use")
	}
	c.Unsubscribe(uri)
	if c.InUse() {
		t.Fatal("in use after its only subscription was dropped")
	}
}
