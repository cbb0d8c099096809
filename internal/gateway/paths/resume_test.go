package paths

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

func TestParseReplayID(t *testing.T) {
	for _, c := range []struct {
		in     string
		stream string
		n      int
		ok     bool
	}{
		{"pmcp-0a1b_0", "0a1b", 0, true},
		{"pmcp-0a1b_17", "0a1b", 17, true},
		{"0a1b_17", "", 0, false},   // the SDK's own
		{"pmcp-0a1b", "", 0, false}, // no index
		{"pmcp-_3", "", 0, false},   // no stream
		{"pmcp-0a1b_-1", "", 0, false},
		{"pmcp-0a1b_x", "", 0, false},
	} {
		stream, n, ok := parseReplayID(c.in)
		if stream != c.stream || n != c.n || ok != c.ok {
			t.Errorf("parseReplayID(%q) = %q, %d, %v", c.in, stream, n, ok)
		}
	}
}

// A stream's events are found by their ids, by its own session only; past the bound the
// oldest go and a resumption from before them is refused; a session's end drops its streams.
func TestReplayStream(t *testing.T) {
	var rs replays
	s := rs.open("s-1", "u")
	if rs.find("s-2", s.id) != nil || rs.find("s-1", s.id) != s {
		t.Fatal("a stream is its session's alone")
	}
	ids := []string{s.add([]byte("one"), nil), s.add([]byte("two"), nil)}
	if _, n, ok := parseReplayID(ids[1]); !ok || n != 2 {
		t.Fatalf("ids %q", ids)
	}
	events, last, done, wake, ok := s.after(1)
	if !ok || done || last != 2 || len(events) != 1 || string(events[0]) != "two" {
		t.Fatalf("after 1: %q %d %v %v", events, last, done, ok)
	}
	s.add([]byte("three"), nil)
	select {
	case <-wake:
	default:
		t.Fatal("an event wakes a reader")
	}
	if events, _, _, _, _ := s.after(0); fmt.Sprintf("%s", events) != "[one two three]" {
		t.Fatalf("after the priming event: %s", events)
	}

	big := []byte(strings.Repeat("x", maxReplayBytes/2+1))
	s.add(big, nil)
	s.add(big, nil)
	if _, _, _, _, ok := s.after(1); ok {
		t.Fatal("a resumption from before the events kept must be refused")
	}
	if events, _, _, _, ok := s.after(4); !ok || len(events) != 1 {
		t.Fatalf("the newest events are kept: %d %v", len(events), ok)
	}

	rs.close(s, true) // its reader went away: kept for a while
	if _, _, done, _, _ := s.after(5); !done || rs.find("s-1", s.id) == nil {
		t.Fatal("an ended stream is kept for a resumption")
	}
	rs.dropSession("s-1")
	if rs.find("s-1", s.id) != nil {
		t.Fatal("a session's end drops its streams")
	}
	other := rs.open("s-3", "u")
	rs.close(other, false)
	if rs.find("s-3", other.id) != nil {
		t.Fatal("a stream its reader read to the end is dropped at once")
	}
}

func TestWithMode(t *testing.T) {
	for in, want := range map[string]string{
		`{"message":"m"}`:                   `{"mode":"form","message":"m"}`,
		`{}`:                                `{"mode":"form"}`,
		`{"url":"https://x"}`:               `{"mode":"url","url":"https://x"}`,
		`{"elicitationId":"e"}`:             `{"mode":"url","elicitationId":"e"}`,
		`{"mode":"form","url":"https://x"}`: `{"mode":"form","url":"https://x"}`,
		`{"mode":"","message":"m"}`:         `{"message":"m","mode":"form"}`,
	} {
		got, ok := withMode(json.RawMessage(in))
		if !ok || string(got) != want || !json.Valid(got) {
			t.Errorf("withMode(%s) = %s, %v; want %s", in, got, ok, want)
		}
	}
	if _, ok := withMode(json.RawMessage(`[1]`)); ok {
		t.Error("params that are not an object")
	}
}
