package gateway

import (
	"maps"
	"slices"
	"testing"
)

func TestParseExcept(t *testing.T) {
	for _, tc := range []struct {
		raw, canon string
		set        []string
		bad        bool
	}{
		{raw: "", canon: ""},
		{raw: ",,", canon: ""},
		{raw: "a", canon: "a", set: []string{"a"}},
		{raw: "b,a,b", canon: "a,b", set: []string{"a", "b"}},
		{raw: "memory,git-hub_2", canon: "git-hub_2,memory", set: []string{"git-hub_2", "memory"}},
		{raw: "a,../b", bad: true},
		{raw: "a b", bad: true},
	} {
		canon, set, err := parseExcept(tc.raw)
		if (err != nil) != tc.bad {
			t.Errorf("parseExcept(%q): error %v, want error %v", tc.raw, err, tc.bad)
			continue
		}
		if got := slices.Sorted(maps.Keys(set)); canon != tc.canon || !slices.Equal(got, tc.set) {
			t.Errorf("parseExcept(%q) = %q %v, want %q %v", tc.raw, canon, got, tc.canon, tc.set)
		}
	}
}
