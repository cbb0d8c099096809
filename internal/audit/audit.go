// Package audit writes the gateway's audit log: one JSON line per use of a tool, prompt or
// resource, saying who used what, how it ended and what decided it.
package audit

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Record is one audited request. It never holds a secret or a session id: Session is a hash
// that tells a session's records together, and Arguments are there only when the operator
// asks for them (--audit-arguments).
type Record struct {
	Time      time.Time `json:"time"`
	Principal string    `json:"principal"`
	Project   string    `json:"project"`
	Server    string    `json:"server"`
	Method    string    `json:"method"`
	Tool      string    `json:"tool,omitempty"`
	Prompt    string    `json:"prompt,omitempty"`
	URI       string    `json:"uri,omitempty"`
	// Outcome is how the request ended: ok, tool_error, error, unavailable, timeout,
	// cancelled, or denied.
	Outcome    string  `json:"outcome"`
	DurationMs float64 `json:"durationMs"`
	Session    string  `json:"session,omitempty"`
	// Policy is the project's tool authorization (Project or RBAC); Decision is allow or deny.
	Policy    string          `json:"policy"`
	Decision  string          `json:"decision"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// queueLength bounds the records waiting for the writer: a log that cannot keep up drops
// records (counted by the caller's onDrop) rather than slowing every session's calls.
const queueLength = 4096

// Log writes records as JSON lines, in the order they were given, from one goroutine of its
// own: Write never waits for the disk.
type Log struct {
	queue  chan Record
	onDrop func()
	done   chan struct{}
	mu     sync.RWMutex // Write holds it shared, Close exclusively: nothing is sent on a closed queue
	closed bool
	out    io.Writer
	closer io.Closer // nil for stdout
}

// Open starts a log writing to path ("-" for standard output), appending to the file (created
// with mode 0600: the records name who used what). onDrop is called for each record dropped.
func Open(path string, onDrop func()) (*Log, error) {
	l := &Log{queue: make(chan Record, queueLength), onDrop: onDrop, done: make(chan struct{}), out: os.Stdout}
	if path != "-" {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return nil, fmt.Errorf("--audit-log: %w", err)
		}
		l.out, l.closer = f, f
	}
	go l.run()
	return l, nil
}

// Write queues a record; it drops it when the queue is full.
func (l *Log) Write(r Record) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		if l.onDrop != nil {
			l.onDrop() // a request that outlived the gateway's shutdown
		}
		return
	}
	select {
	case l.queue <- r:
	default:
		if l.onDrop != nil {
			l.onDrop()
		}
	}
}

// Close writes what is queued and closes the file. Records given after Close are lost.
func (l *Log) Close() error {
	l.mu.Lock()
	if !l.closed {
		l.closed = true
		close(l.queue)
	}
	l.mu.Unlock()
	<-l.done
	if l.closer != nil {
		return l.closer.Close()
	}
	return nil
}

func (l *Log) run() {
	defer close(l.done)
	w := bufio.NewWriter(l.out)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for r := range l.queue {
		_ = enc.Encode(r)
		if len(l.queue) == 0 { // a burst is written at once, a lone record without delay
			_ = w.Flush()
		}
	}
	_ = w.Flush()
}
