package main

import (
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dsh-dev/projectmcp/internal/config"
)

// configReporter says in dev's terminal when the project's config file is refused, with the
// reader's errors (file, line, column, the nearest known key), and when it is applied again:
// without it, a refused file shows only as a wait for a ProjectMCP that never comes.
type configReporter struct {
	file  string // the file as dev shows it
	mu    sync.Mutex
	w     io.Writer
	last  string // the refusal printed last, "" while the file is accepted
	shown string // the message of the accepted file read last
}

// check reads the file once, before the control plane starts, so a refused file is named
// within moments of starting dev rather than after the control plane is up.
func (r *configReporter) check() {
	data, err := os.ReadFile(r.file)
	if err != nil {
		return // a missing or unreadable file is the mirror's to report
	}
	if _, err := config.Parse(config.DefaultPath, data); err != nil {
		r.refused(err.Error())
	}
}

// onRead is the mirror's report of each read of the file.
func (r *configReporter) onRead(cond metav1.Condition) {
	if cond.Status == metav1.ConditionFalse {
		r.refused(strings.TrimSuffix(cond.Message, stillInEffect))
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last != "" || (cond.Message != r.shown && !plainApplied.MatchString(cond.Message)) {
		fmt.Fprintf(r.w, "%s: %s\n", r.file, cond.Message)
	}
	r.last, r.shown = "", cond.Message
}

// plainApplied matches the mirror's message of an accepted file that has nothing more to say;
// one with more (what the controller does not act on yet) is printed each time it changes.
var plainApplied = regexp.MustCompile(`^\S+ (applied: \d+ servers|does not exist: the project has no servers)$`)

// stillInEffect ends the mirror's message of a refused file.
const stillInEffect = " (the last valid configuration stays in effect)"

// refused prints the reader's errors once per change of them: each edit that leaves the file
// refused for another reason is printed again.
func (r *configReporter) refused(msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if msg == r.last {
		return
	}
	r.last = msg
	fmt.Fprintf(r.w, "%s is refused; nothing of it is applied until it is fixed:\n%s\n", r.file, indent(msg))
}

// isRefused reports whether the file's last read was refused.
func (r *configReporter) isRefused() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last != ""
}

func indent(s string) string { return "  " + strings.ReplaceAll(s, "\n", "\n  ") }

// lockedWriter serializes writes to one writer from dev's goroutines (the mirror's reports,
// the first-run lines).
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
