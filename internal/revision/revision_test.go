package revision

import "testing"

func TestOf(t *testing.T) {
	for version, want := range map[string]Revision{
		"":           Older,
		"2024-11-05": Older,
		"2025-06-18": Older,
		"2025-11-25": Stateful,
		"2026-01-01": Stateful,
		"2026-07-28": Stateless,
		"2027-03-01": Stateless, // a later date: the newest revision projectmcp knows
		"garbage":    Stateless, // not a date; orders after every digit, as a string compare did
	} {
		if got := Of(version); got != want {
			t.Errorf("Of(%q) = %v, want %v", version, got, want)
		}
	}
}

func TestIsAndString(t *testing.T) {
	for _, c := range []struct {
		version string
		r       Revision
		is      bool
	}{
		{"2026-07-28", Stateless, true},
		{"2027-03-01", Stateless, false},
		{"2025-11-25", Stateful, true},
		{"2025-11-25", Stateless, false},
		{"", Older, false},
	} {
		if got := Is(c.version, c.r); got != c.is {
			t.Errorf("Is(%q, %v) = %v, want %v", c.version, c.r, got, c.is)
		}
	}
	if Stateful.String() != "2025-11-25" || Stateless.String() != "2026-07-28" || Revision(9).String() != "" {
		t.Errorf("names: %q %q %q", Stateful, Stateless, Revision(9))
	}
	if !(Older < Stateful && Stateful < Stateless && Newest == Stateless) {
		t.Error("revisions are not ordered by date")
	}
}
