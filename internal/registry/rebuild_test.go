package registry

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/share"
)

// sdkServer serves an MCP server written with the Go SDK over streamable HTTP, as a real
// server built on it is served, and returns its URL: caps are what it declares (the SDK's
// server answers the lists it does not declare with empty lists), setup adds its items and
// middleware.
func sdkServer(t *testing.T, caps *mcp.ServerCapabilities, setup func(*mcp.Server)) string {
	t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "docs", Version: "1"}, &mcp.ServerOptions{Capabilities: caps,
		SubscribeHandler:   func(context.Context, *mcp.SubscribeRequest) error { return nil },
		UnsubscribeHandler: func(context.Context, *mcp.UnsubscribeRequest) error { return nil }})
	if setup != nil {
		setup(srv)
	}
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(func() { hs.CloseClientConnections(); hs.Close() })
	return hs.URL
}

func httpOpts(name, url string) conn.Options {
	return conn.Options{Server: v1alpha1.MCPServer{Name: name, HTTP: &v1alpha1.HTTPServer{URL: url}},
		Settings: conn.Settings{ConnectTimeout: 5 * time.Second}}
}

// A server that offers resources and no tool is healthy: a stream of new sessions, each mounted
// past conn.DeadAfter, never rebuilds it (the same connection all along), whether it answers a
// tools/list it did not declare with method not found (the fixture, as the specification lets
// it) or with an empty list (a server written with the Go SDK).
func TestMountKeepsAServerWithoutTools(t *testing.T) {
	cases := map[string]func(t *testing.T) conn.Options{
		"stdio, tools/list not found": func(*testing.T) conn.Options {
			return withArgs(fixtureOpts("docs"), "--name", "docs", "--offer", "resources")
		},
		"Go SDK over HTTP, resources declared alone": func(t *testing.T) conn.Options {
			return httpOpts("docs", sdkServer(t, &mcp.ServerCapabilities{Resources: &mcp.ResourceCapabilities{}}, func(s *mcp.Server) {
				s.AddResource(&mcp.Resource{URI: "docs://readme", Name: "readme"}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
					return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: "docs://readme", Text: "read me"}}}, nil
				})
			}))
		},
	}
	for name, opts := range cases {
		t.Run(name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Now())
			r := New(clk, logr.Discard())
			defer r.Shutdown()
			r.SetDesired(key, Desired{Servers: []string{"docs"}, ReadyTimeout: 5 * time.Second})
			c := connectReady(t, r, "h1", opts(t))
			if s := c.Snapshot(); s.Phase != v1alpha1.PhaseReady || len(s.Resources) != 1 {
				t.Fatalf("a resources-only server must come up Ready with its resource: %s, %d resources (%s)", s.Phase, len(s.Resources), s.LastError)
			}
			for _, session := range []string{"s1", "s2", "s3", "s4"} {
				clk.Step(conn.DeadAfter + 500*time.Millisecond)
				if _, err := r.Mount(context.Background(), key, share.Who{Session: session}, "test"); err != nil {
					t.Fatal(err)
				}
				st := r.Observe(key).Servers["docs"]
				if st.Conn.ID != c.ID() || !st.LastRebuild.At.IsZero() {
					t.Fatalf("session %s restarted the server: connection %s, was %s (%+v)", session, st.Conn.ID, c.ID(), st.LastRebuild)
				}
				if resources, _ := st.OfferedResources(); st.Conn.Phase != v1alpha1.PhaseReady || len(resources) != 1 {
					t.Fatalf("session %s: %s, resources %v", session, st.Conn.Phase, resources)
				}
			}
		})
	}
}

// A server that keeps failing is rebuilt by a session's mount at most once per reconnect
// backoff window (on the injected clock: the first at once, then 1 s, 2 s, 4 s, 4 s after the
// one before), however many sessions come; each rebuild is one attempt of the spent budget,
// so the rebuilt connection fails on its first attempt instead of retrying with backoff. Once
// a mount finds the server healthy, or the reconciler builds its connection, the windows start
// over.
func TestMountRebuildsAFailingServerOncePerWindow(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Now())
	r := New(clk, logr.Discard())
	defer r.Shutdown()
	r.SetDesired(key, Desired{Servers: []string{"a"}, ReadyTimeout: 5 * time.Second})
	broken := filepath.Join(t.TempDir(), "broken")
	if err := os.WriteFile(broken, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	opts := withArgs(fixtureOpts("a"), "--fail-if-exists", broken)
	opts.Policy = conn.Policy{MaxAttempts: 2, InitialBackoff: time.Second, MaxBackoff: 4 * time.Second}
	failed(t, clk, r.Connect(key, "h1", opts))

	sessions := 0
	mount := func() conn.Snapshot {
		t.Helper()
		sessions++
		id := "s" + string(rune('a'+sessions))
		if _, err := r.Mount(context.Background(), key, share.Who{Session: id}, "test"); err != nil {
			t.Fatal(err)
		}
		return r.Observe(key).Servers["a"].Conn
	}
	last := r.Observe(key).Servers["a"].Conn.ID
	rebuilds := 0
	expect := func(what string, rebuilt bool) {
		t.Helper()
		s := mount()
		if got := s.ID != last; got != rebuilt {
			t.Fatalf("%s: rebuilt %v, want %v (after %d rebuilds)", what, got, rebuilt, rebuilds)
		}
		if rebuilt {
			rebuilds++
			last = s.ID
			if s.Phase != v1alpha1.PhaseFailed {
				t.Fatalf("%s: the rebuilt connection of a server that still fails must fail on its one attempt: %s (attempt %d)", what, s.Phase, s.ReconnectAttempts)
			}
		}
	}
	expect("the first mount", true)
	expect("a mount at once", false)
	clk.Step(999 * time.Millisecond)
	expect("a mount inside the first window (1 s)", false)
	clk.Step(2 * time.Millisecond)
	expect("a mount after it", true)
	clk.Step(time.Second)
	expect("a mount inside the second window (2 s)", false)
	clk.Step(time.Second + time.Millisecond)
	expect("a mount after it", true)
	clk.Step(4*time.Second + time.Millisecond)
	expect("a mount after the third window (4 s)", true)
	clk.Step(3 * time.Second)
	expect("a mount inside the capped window (4 s)", false)
	clk.Step(time.Second + time.Millisecond)
	expect("a mount after it", true)
	if rebuilds != 5 || sessions != 9 {
		t.Fatalf("%d rebuilds for %d sessions", rebuilds, sessions)
	}

	// Healthy again: the next window is the first one again.
	if err := os.Remove(broken); err != nil {
		t.Fatal(err)
	}
	clk.Step(4*time.Second + time.Millisecond)
	if s := mount(); s.Phase != v1alpha1.PhaseReady {
		t.Fatalf("the mount after the server was fixed must bring it back: %s (%s)", s.Phase, s.LastError)
	}
	healthy := mount() // finds it healthy
	last = healthy.ID
	if err := os.WriteFile(broken, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_ = syscall.Kill(healthy.PID, syscall.SIGKILL)
	failed(t, clk, r.Lookup(key, "s"+string(rune('a'+sessions)), "a"))
	last = r.Observe(key).Servers["a"].Conn.ID
	expect("the first mount after it failed again", true)
	clk.Step(time.Second + time.Millisecond)
	expect("a mount after the first window (1 s), not the last one (4 s)", true)

	// A connection the reconciler builds (here a repoint) starts the windows over too.
	repointed := opts
	repointed.Policy.MaxAttempts = 0
	failed(t, clk, r.Connect(key, "h2", repointed))
	last = r.Observe(key).Servers["a"].Conn.ID
	expect("a mount after a repoint, inside the last window (2 s)", true)
}

// failed drives a connection's reconnects on the injected clock until it is Failed.
func failed(t *testing.T, clk *clocktesting.FakeClock, c *conn.Conn) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for c.Snapshot().Phase != v1alpha1.PhaseFailed {
		if time.Now().After(deadline) {
			t.Fatalf("the connection did not fail: %+v", c.Snapshot())
		}
		if s := c.Snapshot(); s.Phase == v1alpha1.PhaseDisconnected {
			clk.Step(time.Minute) // past the longest backoff
		}
		select {
		case <-c.Changed():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// A dead connection (Ready offering nothing) that sessions use is not rebuilt: not while a
// request is in flight on it, nor while its server holds a subscription; once neither is
// left, the next mount rebuilds it.
func TestMountNeverRebuildsAConnectionInUse(t *testing.T) {
	called, release := make(chan struct{}, 1), make(chan struct{})
	url := sdkServer(t, &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}, Resources: &mcp.ResourceCapabilities{Subscribe: true}},
		func(s *mcp.Server) {
			s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
				return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
					if method == "tools/call" { // held until released: a request in flight
						called <- struct{}{}
						select {
						case <-release:
						case <-ctx.Done():
						}
						return &mcp.CallToolResult{}, nil
					}
					return next(ctx, method, req)
				}
			})
		})
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	clk := clocktesting.NewFakeClock(time.Now())
	r := New(clk, logr.Discard())
	defer r.Shutdown()
	r.SetDesired(key, Desired{Servers: []string{"empty"}, ReadyTimeout: 5 * time.Second})
	c := connectReady(t, r, "h1", httpOpts("empty", url))
	clk.Step(conn.DeadAfter + time.Second)
	if s := c.Snapshot(); !s.Dead(clk.Now()) {
		t.Fatalf("a server listing nothing must be dead past DeadAfter: %+v", s)
	}
	mountIn := func(session string) string {
		t.Helper()
		if _, err := r.Mount(context.Background(), key, share.Who{Session: session}, "test"); err != nil {
			t.Fatal(err)
		}
		return r.Observe(key).Servers["empty"].Conn.ID
	}

	done := make(chan error, 1)
	go func() {
		_, err := c.Call(context.Background(), &mcp.CallToolParams{Name: "slow", Arguments: map[string]any{}}, nil)
		done <- err
	}()
	<-called
	if id := mountIn("s1"); id != c.ID() {
		t.Fatal("a mount rebuilt a connection with a request in flight")
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("the request in flight must complete: %v", err)
	}
	if id := mountIn("s2"); id == c.ID() {
		t.Fatal("with no request left, the mount must rebuild the dead connection")
	}

	c = r.Lookup(key, "s2", "empty")
	clk.Step(conn.DeadAfter + time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Subscribe(ctx, "docs://watched"); err != nil {
		t.Fatal(err)
	}
	if id := mountIn("s3"); id != c.ID() {
		t.Fatal("a mount rebuilt a connection whose server holds a subscription")
	}
	c.Unsubscribe("docs://watched")
	if id := mountIn("s4"); id == c.ID() {
		t.Fatal("with no subscription left, the mount must rebuild the dead connection")
	}
}
