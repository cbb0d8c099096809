package gateway_test

import (
	"testing"

	"github.com/dsh-dev/projectmcp/internal/testenv/harness"
)

// The endpoint tests (endpoint_*_test.go) serve agent sessions through the gateway of the real
// controller: its reconciler, registry and gateway against a real kube-apiserver, with real
// fixture MCP server processes (harness). The package's unit tests run in the same binary and
// need none of it: the API server starts with the first endpoint test.
func TestMain(m *testing.M) {
	harness.Main(m, harness.Options{})
}
