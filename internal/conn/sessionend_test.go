package conn

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/testutil"
	"github.com/dsh-dev/projectmcp/test/fixture"
)

// muteEnv makes the test binary the stdio fixture, which closes its output once the file the
// variable names appears (removing it), and lives on after its input closes too.
const muteEnv = "PROJECTMCP_CONN_TEST_MUTE"

func muteStdio(trigger string) {
	var muted atomic.Bool
	go func() {
		for os.Remove(trigger) != nil {
			time.Sleep(20 * time.Millisecond)
		}
		os.Stdout.Close()
		muted.Store(true)
	}()
	_ = fixture.Run(context.Background(), nil, os.Stdin, os.Stdout, os.Stderr)
	if muted.Load() {
		time.Sleep(time.Hour) // until the connection ends its process group
	}
	os.Exit(0)
}

// cuttable is a front to an HTTP fixture that can end the sessions it has seen: cut answers
// 404 to every later request naming one of them, as a server that forgot its sessions does,
// and cuts every TCP connection (their event streams with them).
type cuttable struct {
	*httptest.Server
	mu   sync.Mutex
	seen map[string]bool
	gone bool
}

func newCuttable(t *testing.T, target string) *cuttable {
	u, _ := url.Parse(target)
	proxy := httputil.NewSingleHostReverseProxy(u)
	f := &cuttable{seen: map[string]bool{}}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("Mcp-Session-Id")
		f.mu.Lock()
		forgotten := f.gone && f.seen[id]
		if !f.gone && id != "" {
			f.seen[id] = true
		}
		f.mu.Unlock()
		if forgotten {
			http.Error(w, "session not found", http.StatusNotFound)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *cuttable) cut() {
	f.mu.Lock()
	f.gone = true
	f.mu.Unlock()
	f.CloseClientConnections()
}

// A session the SDK ends on its own (its event stream cut and not resumable, a stdio
// server's output closed while the process lives) is replaced at once, not at the next
// probe or re-list (an hour away here), and no goroutine waits for that end (the SDK's
// ClientSession.Wait held one per connection for the session's whole life).
func TestSessionEndSeenWithoutAWaitingGoroutine(t *testing.T) {
	trigger := filepath.Join(t.TempDir(), "mute")
	var front *cuttable
	cases := map[string]struct {
		server func(t *testing.T) v1alpha1.MCPServer
		end    func(t *testing.T)
	}{
		"streamable stateful (2025-11-25)": {
			server: func(t *testing.T) v1alpha1.MCPServer {
				front = newCuttable(t, fixture.StartHTTP(t))
				return v1alpha1.MCPServer{Name: "r", HTTP: &v1alpha1.HTTPServer{URL: front.URL + "/mcp"}}
			},
			end: func(*testing.T) { front.cut() },
		},
		"legacy SSE": {
			server: func(t *testing.T) v1alpha1.MCPServer {
				front = newCuttable(t, fixture.StartHTTP(t, "--sse"))
				return v1alpha1.MCPServer{Name: "r", HTTP: &v1alpha1.HTTPServer{URL: front.URL + "/sse", Transport: v1alpha1.TransportSSE}}
			},
			end: func(*testing.T) { front.cut() },
		},
		"stdio": {
			server: func(*testing.T) v1alpha1.MCPServer {
				s := stdioServer("s")
				s.Stdio.Env = append(s.Stdio.Env, v1alpha1.NameValue{Name: muteEnv, Value: trigger})
				return s
			},
			end: func(t *testing.T) {
				if err := os.WriteFile(trigger, nil, 0o600); err != nil {
					t.Fatal(err)
				}
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := start(t, Options{Server: tc.server(t), Settings: Settings{HealthInterval: time.Hour, RelistInterval: time.Hour}})
			first := waitPhase(t, c, v1alpha1.PhaseReady)
			if stacks := testutil.StacksWith("go-sdk/mcp.(*ClientSession).Wait("); stacks != "" {
				t.Fatalf("a goroutine waits for the session's end:\n%s", stacks)
			}
			tc.end(t)
			deadline := time.After(20 * time.Second)
			for {
				ch := c.Changed()
				s := c.Snapshot()
				if s.Phase == v1alpha1.PhaseReady && s.ReadySince.After(first.ReadySince) {
					break
				}
				select {
				case <-ch:
				case <-deadline:
					t.Fatalf("the session's end went unseen: %s (%s)", s.Phase, s.LastError)
				}
			}
			if got := call(t, c, "echo", map[string]any{"text": "again"}); got != "again" {
				t.Fatalf("echo on the new session = %q", got)
			}
		})
	}
}

// A server that refuses the connection's requests (401, 403) fails the connect with its
// answer named: the OAuth handler the end is watched through runs no authorization flow.
func TestRefusedByServerNamesTheStatus(t *testing.T) {
	cases := []struct {
		code       int
		body, want string
	}{
		{http.StatusUnauthorized, "no", "the server answered 401 Unauthorized"},
		{http.StatusForbidden, "no", "the server answered 403 Forbidden"},
		{http.StatusUnauthorized, `{"jsonrpc":"2.0","id":1,"error":{"code":-32001,"message":"token expired"}}`,
			"the server answered 401 Unauthorized: token expired"},
	}
	for _, tc := range cases {
		t.Run(tc.want, func(t *testing.T) {
			front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tc.code)
				fmt.Fprint(w, tc.body)
			}))
			t.Cleanup(front.Close)
			c := start(t, Options{Server: v1alpha1.MCPServer{Name: "r", HTTP: &v1alpha1.HTTPServer{URL: front.URL + "/mcp"}}})
			s := waitFor(t, c, "the connect to fail", func(s Snapshot) bool { return s.LastError != "" })
			if !strings.Contains(s.LastError, tc.want) {
				t.Fatalf("last error %q does not say %q", s.LastError, tc.want)
			}
		})
	}
}
