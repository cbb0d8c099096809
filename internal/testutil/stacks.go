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

// StacksWith is the stacks of the goroutines with call in them.
func StacksWith(call string) string {
	var found []string
	for _, g := range strings.Split(Stacks(), "\n\n") {
		if strings.Contains(g, call) {
			found = append(found, g)
		}
	}
	return strings.Join(found, "\n\n")
}
