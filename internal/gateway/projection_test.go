package gateway

import (
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The projection itself is tested in internal/projection; these are what the gateway adds.

// A schema the server library would panic on is refused by addTool, not by a crash.
func TestAddToolRecovers(t *testing.T) {
	s := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "1"}, nil)
	if err := addTool(s, &mcp.Tool{Name: "x"}, nil); err == nil {
		t.Fatal("a nil schema must be an error")
	}
}
