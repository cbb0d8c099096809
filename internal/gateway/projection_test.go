package gateway

import (
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/registry"
)

// The projection itself is tested in internal/projection; these are what the gateway adds.

// The projection's input keeps the tools of Ready and Disconnected connections only.
func TestOffered(t *testing.T) {
	echo := []*mcp.Tool{{Name: "echo", InputSchema: map[string]any{"type": "object"}}}
	state := func(phase v1alpha1.ServerPhase) registry.ServerState {
		return registry.ServerState{HasConn: true, Conn: conn.Snapshot{Phase: phase, Tools: echo}}
	}
	got := offered(map[string]registry.ServerState{
		"ready": state(v1alpha1.PhaseReady),
		"down":  state(v1alpha1.PhaseDisconnected),
		"dead":  state(v1alpha1.PhaseFailed),
		"idle":  {Reclaimed: true},
	})
	for server, want := range map[string]int{"ready": 1, "down": 1, "dead": 0, "idle": 0} {
		if len(got[server]) != want {
			t.Errorf("%s offers %d tools, want %d", server, len(got[server]), want)
		}
	}
}

// A schema the server library would panic on is refused by addTool, not by a crash.
func TestAddToolRecovers(t *testing.T) {
	s := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	if err := addTool(s, &mcp.Tool{Name: "x"}, nil); err == nil {
		t.Fatal("a nil schema must be an error")
	}
}
