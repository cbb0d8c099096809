package testutil

import (
	"strings"
	"sync"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
)

// LogLines is a logger that keeps what it is given, for tests that look at what was logged.
type LogLines struct {
	mu    sync.Mutex
	lines []string
}

// Logger logs into l.
func (l *LogLines) Logger() logr.Logger {
	return funcr.New(func(_, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, args)
	}, funcr.Options{})
}

// Matching are the lines logged so far that hold s.
func (l *LogLines) Matching(s string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}

// Lines are every line logged so far.
func (l *LogLines) Lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}
