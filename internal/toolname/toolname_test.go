package toolname

import (
	"strings"
	"testing"
)

func TestProject(t *testing.T) {
	long := strings.Repeat("x", 200)
	cases := map[string]struct{ server, raw, want string }{
		"plain":                 {"github", "search_issues", "github__search_issues"},
		"dots and dashes":       {"my-srv", "v1.get", "my-srv__v1.get"},
		"bad characters":        {"fs", "read file/ü", "fs__read_file__"},
		"empty raw":             {"fs", "", "fs___"},
		"exactly 128":           {"s", strings.Repeat("y", 125), "s__" + strings.Repeat("y", 125)},
		"shortened with a hash": {"srv", long, ""},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := Project(tc.server, tc.raw)
			if len(got) > MaxLength {
				t.Fatalf("%q is %d characters", got, len(got))
			}
			if tc.want != "" && got != tc.want {
				t.Fatalf("Project(%q, %q) = %q, want %q", tc.server, tc.raw, got, tc.want)
			}
			if got != Project(tc.server, tc.raw) {
				t.Fatal("not a pure function")
			}
		})
	}
	a, b := Project("srv", long+"a"), Project("srv", long+"b")
	if a == b || len(a) != MaxLength || !strings.HasPrefix(a, "srv__xxx") {
		t.Fatalf("long names must stay distinct and capped: %q %q", a, b)
	}
}
