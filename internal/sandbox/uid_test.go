package sandbox

import (
	"errors"
	"testing"
)

func TestParseRange(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Range
		err  bool
	}{
		{"100000-165535", Range{100000, 165535}, false},
		{"7-7", Range{7, 7}, false},
		{"0-10", Range{}, true},
		{"10-9", Range{}, true},
		{"100000", Range{}, true},
		{"a-b", Range{}, true},
		{"1-4294967296", Range{}, true},
	} {
		got, err := ParseRange(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("ParseRange(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestPick(t *testing.T) {
	r := Range{First: 1000, Last: 1003}
	home := r.home("team-a/web")
	next := func(id uint32) uint32 { return r.First + (id-r.First+1)%4 }
	for _, tc := range []struct {
		name  string
		taken []uint32
		want  uint32
		ok    bool
	}{
		{"its own hash's", nil, home, true},
		{"the next one when another project holds it", []uint32{home}, next(home), true},
		{"past every one held, wrapping", []uint32{home, next(home), next(next(home))}, next(next(next(home))), true},
		{"none when all are held", []uint32{1000, 1001, 1002, 1003}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			held := map[uint32]bool{}
			for _, id := range tc.taken {
				held[id] = true
			}
			got, ok := pick(r, "team-a/web", func(id uint32) bool { return held[id] })
			if got != tc.want || ok != tc.ok {
				t.Errorf("pick = %d, %v; want %d, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestUIDsPerProject(t *testing.T) {
	r := Range{First: 5000, Last: 5001}
	u := NewUIDs(r)
	a, err := u.Acquire("ns/a")
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := u.Acquire("ns/a"); again != a {
		t.Fatalf("a project's second server got uid %d, its first %d", again, a)
	}
	b, err := u.Acquire("ns/b")
	if err != nil || b == a {
		t.Fatalf("a second project got uid %d (%v), the first holds %d", b, err, a)
	}
	if _, err := u.Acquire("ns/c"); !errors.Is(err, ErrRangeFull) {
		t.Fatalf("a third project in a range of two: %v, want ErrRangeFull", err)
	}
	u.Release("ns/a")
	if _, err := u.Acquire("ns/c"); !errors.Is(err, ErrRangeFull) {
		t.Fatal("a's uid was freed while its second server still holds it")
	}
	u.Release("ns/a")
	if c, err := u.Acquire("ns/c"); err != nil || c != a {
		t.Fatalf("after a's last release c got %d (%v), want the freed %d", c, err, a)
	}
	// The same projects asking in the same order get the same uids.
	v := NewUIDs(r)
	if a2, _ := v.Acquire("ns/a"); a2 != a {
		t.Errorf("ns/a got %d in a second controller, %d in the first", a2, a)
	}
}
