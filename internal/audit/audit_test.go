package audit

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Records reach the file as JSON lines, in order, with mode 0600; Close writes what is queued;
// a Write after Close is dropped quietly.
func TestLogWritesLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	var dropped atomic.Int32
	l, err := Open(path, func() { dropped.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		l.Write(Record{Time: time.Unix(int64(i), 0), Principal: "user:a/1", Method: "tools/call", Tool: "echo", Outcome: "ok", Decision: "allow"})
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l.Write(Record{Method: "late"})
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	f, _ := os.Open(path)
	defer f.Close()
	n := 0
	for sc := bufio.NewScanner(f); sc.Scan(); n++ {
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("line %d: %v", n, err)
		}
		if r.Time.Unix() != int64(n) || r.Arguments != nil {
			t.Fatalf("line %d: %+v", n, r)
		}
	}
	if n+int(dropped.Load()) != 101 {
		t.Errorf("%d lines and %d dropped, want 100 and the late one in all", n, dropped.Load())
	}
}

// A log that cannot be opened says which flag named it.
func TestOpenNamesTheFlag(t *testing.T) {
	_, err := Open(filepath.Join(t.TempDir(), "missing", "audit.log"), nil)
	if err == nil || !strings.HasPrefix(err.Error(), "--audit-log:") {
		t.Fatalf("error %v", err)
	}
}
