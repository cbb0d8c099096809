//go:build faults

package faults

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// perPrincipalConnections is --max-connections-per-principal's default.
const perPrincipalConnections = 20

// sessionServer is a stdio fixture server shared per session.
func (s *suite) sessionServer(name string, args ...string) v1alpha1.MCPServer {
	srv := s.stdio(name, args...)
	srv.Share = v1alpha1.ShareSession
	return srv
}

func (s *suite) sessionServerCrash(t *testing.T) {
	s.fault(t, row{fault: "kill -9 of one session's own server (`share: session`)",
		sees:       "that session's next calls wait for its restarted server (same tool names); the other session's server, its process and its calls are untouched",
		guaranteed: "each session of a `share: session` server has a connection and a process of its own; a dead one is restarted for its session alone",
	}, func(t *testing.T, r *row) {
		key := s.project(t, "mine", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{s.sessionServer("s")}}, false)
		a := s.mustConnect(t, key, "2025-11-25", nil)
		b := s.mustConnect(t, key, "2025-11-25", nil)
		pa, errA := pids(a, "s__pids")
		pb, errB := pids(b, "s__pids")
		if errA != nil || errB != nil || pa.PID == 0 || pa.PID == pb.PID {
			t.Fatalf("two sessions of a share: session server: processes %d and %d (%v, %v), want two", pa.PID, pb.PID, errA, errB)
		}
		killed := time.Now()
		if err := syscall.Kill(pa.PID, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, 30*time.Second, "the killed session's server answering again", func() bool {
			p, err := pids(a, "s__pids")
			return err == nil && p.PID != pa.PID && p.PID != pb.PID
		})
		r.figure("answering again %s after the kill", ms(time.Since(killed)))
		if p, err := pids(b, "s__pids"); err != nil || p.PID != pb.PID {
			t.Errorf("the other session's server: process %d (%v), want %d untouched", p.PID, err, pb.PID)
		}
		obj := s.waitStatus(t, key, 30*time.Second, "two connections", func(o *v1alpha1.ProjectMCP) bool {
			return serverStatus(o, "s").Connections == 2
		})
		r.figure("status: share %s, %d connections", serverStatus(obj, "s").Share, serverStatus(obj, "s").Connections)
	})
}

func (s *suite) principalConnections(t *testing.T) {
	s.fault(t, row{fault: fmt.Sprintf("one identity opening %d sessions on a `share: session` server", perPrincipalConnections+1),
		sees:       fmt.Sprintf("its sessions past `--max-connections-per-principal` (%d) get a tool error naming the server, its scope and the bound, never another session's connection; another identity's session calls the server", perPrincipalConnections),
		guaranteed: "an identity holds at most that many of a server's connections (and a server at most `--max-connections-per-server`); the sessions within the bound are served",
	}, func(t *testing.T, r *row) {
		key := s.project(t, "hoard", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{s.sessionServer("s")}}, false)
		hoarder, _ := s.revocableToken(t, "hoarder")
		served, refused := 0, 0
		for i := range perPrincipalConnections + 1 {
			cs := s.mustConnectWith(t, key, hoarder)
			got, err := call(cs, 30*time.Second, "s__echo", map[string]any{"text": "mine"})
			switch {
			case err == nil && got == "mine":
				served++
			case err != nil && strings.Contains(err.Error(), "--max-connections-per-principal") && strings.Contains(err.Error(), `"s"`):
				refused++
				r.figure("session %d: %v", i+1, err)
			default:
				t.Errorf("session %d: %q %v", i+1, got, err)
			}
		}
		if served != perPrincipalConnections || refused != 1 {
			t.Errorf("one identity: %d sessions served and %d refused naming the bound, want %d and 1", served, refused, perPrincipalConnections)
		}
		other := s.mustConnect(t, key, "2025-11-25", nil)
		if got, err := call(other, 30*time.Second, "s__echo", map[string]any{"text": "theirs"}); err != nil || got != "theirs" {
			t.Errorf("another identity's session: %q %v", got, err)
		}
		r.figure("one identity: %d sessions served, %d refused; another identity served", served, refused)
	})
}

// mustConnectWith opens a 2025-11-25 session on a project as the holder of token, closed when
// the fault ends.
func (s *suite) mustConnectWith(t *testing.T, key types.NamespacedName, token string) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hc := &http.Client{Transport: bearer{token, http.DefaultTransport}}
	c := mcp.NewClient(&mcp.Implementation{Name: "fault-agent", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: s.endpoint(key), HTTPClient: hc},
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatalf("connect to %s: %v", key, err)
	}
	s.undo = append(s.undo, func() { _ = cs.Close() })
	return cs
}
