package controllers_test

import (
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dsh-dev/projectmcp/internal/testenv/harness"
)

// The reconciling tests run the real reconciler and registry against a real kube-apiserver,
// with real fixture MCP server processes (harness); its status writes go through faultyClient,
// so that a test can make them fail (failStatusWrites).
func TestMain(m *testing.M) {
	harness.Main(m, harness.Options{WrapClient: func(c client.Client) client.Client { return faultyClient{c} }})
}
