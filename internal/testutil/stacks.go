package testutil

import (
	"runtime"
	"strings"
)

// Stacks is the stacks of every goroutine of the process.
func Stacks() string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return string(buf[:n])
		}
		buf = make([]byte, 2*len(buf))
	}
}

// Goroutines is Stacks one goroutine each, for tests that count what a part keeps running
// (a reader per taken stream, a watcher per gateway).
func Goroutines() []string { return strings.Split(Stacks(), "\n\n") }

// StacksWith is the stacks of the goroutines with call in them.
func StacksWith(call string) string {
	var found []string
	for _, g := range Goroutines() {
		if strings.Contains(g, call) {
			found = append(found, g)
		}
	}
	return strings.Join(found, "\n\n")
}

// CountStacks counts the goroutines with call in them (a function, say "pkg.(*T).read(").
func CountStacks(call string) int {
	n := 0
	for _, g := range Goroutines() {
		if strings.Contains(g, call) {
			n++
		}
	}
	return n
}
