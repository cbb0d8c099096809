package policy

import "testing"

// '*' matches any run of characters and '?' any one; nothing else is special.
func TestGlob(t *testing.T) {
	cases := []struct {
		pattern, name string
		want          bool
	}{
		{"*", "anything", true}, {"search_*", "search_issues", true}, {"search_*", "get_issue", false},
		{"*delete*", "bulk_delete_all", true}, {"get_?", "get_a", true}, {"get_?", "get_ab", false},
		{"a*b*c", "axxbyyc", true}, {"a*b*c", "axxbyy", false}, {"[x]", "[x]", true}, {"", "", true}, {"", "a", false},
	}
	for _, c := range cases {
		if got := Glob(c.pattern, c.name); got != c.want {
			t.Errorf("Glob(%q, %q) = %v", c.pattern, c.name, got)
		}
	}
}

// The allowlist checks the command as it will run: a clean path, '*' within one segment; and
// refuses variables that make a runtime load other code.
func TestCommandAllowed(t *testing.T) {
	patterns := []string{"/opt/mcp/*", "npx", "/usr/bin/node"}
	for command, want := range map[string]bool{
		"/opt/mcp/server": true, "npx": true, "/usr/bin/node": true,
		"/opt/mcp/../../bin/sh": false, "/opt/mcp/sub/server": false, "/opt/mcp//server": false,
		"/opt/mcp/./server": false, "/bin/sh": false, "": false, "npx2": false,
	} {
		if got := CommandAllowed(patterns, command); got != want {
			t.Errorf("CommandAllowed(%q) = %v, want %v", command, got, want)
		}
	}
	for name, want := range map[string]bool{"LD_PRELOAD": true, "DYLD_INSERT_LIBRARIES": true, "NODE_OPTIONS": true, "PYTHONPATH": true, "API_TOKEN": false, "PATH": false} {
		if LoaderVariable(name) != want {
			t.Errorf("LoaderVariable(%q) != %v", name, want)
		}
	}
}
