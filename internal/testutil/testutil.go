// Package testutil holds the small helpers the project's tests share: polling for a condition,
// a buffer that a command's output goroutines and the test may use at once, the goroutines'
// stacks, the call benchmarks' measures and bare proxy, and a scripted stand-in for an agent's
// model (MessagesAPI). It needs no API server and imports nothing from Kubernetes.
package testutil

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// PollInterval is how often Eventually and EventuallyOK check their condition.
const PollInterval = 50 * time.Millisecond

// Eventually checks cond every PollInterval until it returns true, and fails the test with what
// it was waiting for when timeout passes first. cond runs on the test's goroutine, so it may
// call t.Fatal itself.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(PollInterval)
	}
}

// EventuallyOK is Eventually for a check that explains itself: it is retried until it returns
// nil, and on timeout the failure names what it was waiting for and the check's last error
// (for example the object's status at the deadline).
func EventuallyOK(t testing.TB, timeout time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s: %v", timeout, what, err)
		}
		time.Sleep(PollInterval)
	}
}

// SyncBuffer is a bytes.Buffer safe for concurrent use: give it to exec.Cmd as Stdout and
// Stderr (os/exec copies from goroutines) and read it from the test at any time.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Len is the number of bytes written so far.
func (b *SyncBuffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Len()
}

// NpmCacheVar is npm's variable for its download cache.
const NpmCacheVar = "npm_config_cache"

// ShareNpmCache makes servers started through npx reuse the user's npm cache although each
// runs with a HOME of its own: it sets npm_config_cache to ~/.npm in this process when it is
// unset, and returns the name for the controller to pass through to servers (the setting
// docs/security.md suggests for clusters). Without it every npx server would download its
// package again.
func ShareNpmCache() []string {
	if _, ok := os.LookupEnv(NpmCacheVar); !ok {
		if home, err := os.UserHomeDir(); err == nil {
			_ = os.Setenv(NpmCacheVar, filepath.Join(home, ".npm"))
		}
	}
	return []string{NpmCacheVar}
}

// FreeAddr is a loopback address with a port free at the time of asking.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
