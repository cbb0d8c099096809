package testutil

import (
	"bytes"
	"runtime/pprof"
	"strings"
	"testing"
)

// GoroutineStacks is the stack of every goroutine of the process, one string each, for tests
// that count what a part keeps running (a reader per taken stream, a watcher per gateway).
func GoroutineStacks(t testing.TB) []string {
	t.Helper()
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 2); err != nil {
		t.Fatal(err)
	}
	return strings.Split(buf.String(), "\n\n")
}

// StacksWith counts the goroutines whose stack holds s (a function, say "pkg.(*T).read(").
func StacksWith(t testing.TB, s string) int {
	t.Helper()
	n := 0
	for _, g := range GoroutineStacks(t) {
		if strings.Contains(g, s) {
			n++
		}
	}
	return n
}
