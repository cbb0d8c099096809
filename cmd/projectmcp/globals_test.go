package main

import (
	"os"
	"path/filepath"
	"testing"
)

// A --kubeconfig file gives a client that does not throttle itself, as the in-cluster config
// does (controller-runtime's loader): client-go's default of 5 requests per second held the
// status writes of many projects back (the scale benchmark).
func TestRestConfigFromKubeconfigIsNotThrottled(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	kubeconfig := `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := (&globalFlags{kubeconfig: path}).restConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.QPS >= 0 || cfg.RateLimiter != nil {
		t.Fatalf("QPS %v, rate limiter %v: want no client-side throttling", cfg.QPS, cfg.RateLimiter)
	}
}
