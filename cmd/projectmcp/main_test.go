package main

import (
	"os"
	"testing"

	"github.com/dsh-dev/projectmcp/internal/testenv"
	"github.com/dsh-dev/projectmcp/test/fixture"
)

// mainEnvVar makes the test binary behave as the projectmcp command, so the controller test
// runs the real main, flags and signal handling in a separate process.
const mainEnvVar = "PROJECTMCP_TEST_MAIN"

// controlPlane is the package's one kube-apiserver, started by the first test that calls
// apiServer: `go test -run TestRender` starts none, and `make unit` skips the tests that need it.
// TestDevEndToEnd is apart: `projectmcp dev` starts its own.
var controlPlane testenv.Lazy

// apiServer returns the shared control plane (see testenv.Lazy.Get). Tests remove what they
// create (Env.DeleteOnCleanup) so that the next test's controller does not reconcile it.
func apiServer(t testing.TB) *testenv.Env {
	t.Helper()
	return controlPlane.Get(t)
}

func TestMain(m *testing.M) {
	switch {
	case os.Getenv(fixture.EnvVar) != "":
		fixture.Main()
	case os.Getenv(mainEnvVar) != "":
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	case os.Getenv(bareProxyEnvVar) != "":
		serveBareProxy(os.Getenv(bareProxyEnvVar))
	}
	code := isolatedConfig(m)
	controlPlane.Stop()
	os.Exit(code)
}

// isolatedConfig runs the tests with a config folder of their own: connect and adopt keep the
// gateways they trust there, and a test must neither read nor change the user's.
func isolatedConfig(m *testing.M) int {
	dir, err := os.MkdirTemp("", "projectmcp-config-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	os.Setenv("XDG_CONFIG_HOME", dir)
	return m.Run()
}
