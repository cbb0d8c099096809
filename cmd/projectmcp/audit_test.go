package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/dsh-dev/projectmcp/internal/gateway"
	"github.com/dsh-dev/projectmcp/internal/registry"
)

// --audit-arguments without --audit-log is refused, saying what it needs; with --audit-log
// the gateway is built and the log is there, readable by the controller's user alone.
func TestAuditFlags(t *testing.T) {
	build := func(args ...string) (*gateway.Gateway, error) {
		t.Helper()
		cfg := &rest.Config{Host: "https://127.0.0.1:1"} // never asked: building the gateway reads nothing
		mgr, err := ctrl.NewManager(cfg, ctrl.Options{Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
		if err != nil {
			t.Fatal(err)
		}
		reg := registry.New(clock.RealClock{}, logr.Discard())
		t.Cleanup(reg.Shutdown)
		return parseControllerFlags(t, args...).gateway(cfg, mgr, reg, "127.0.0.1:8484", nil)
	}
	if _, err := build("--audit-arguments"); err == nil || err.Error() != "--audit-arguments needs --audit-log" {
		t.Errorf("--audit-arguments alone: %v, want it refused as needing --audit-log", err)
	}
	path := filepath.Join(t.TempDir(), "audit.log")
	if _, err := build("--audit-log", path, "--audit-arguments"); err != nil {
		t.Fatalf("--audit-log with --audit-arguments: %v", err)
	}
	if info, err := os.Stat(path); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("the audit log: %v, %v; want a file of mode 0600", info, err)
	}
}
