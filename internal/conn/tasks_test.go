package conn

import "testing"

// A tool's execution.taskSupport as a 2025-11-25 server lists it: "required" and "optional" are
// kept, anything else is the default (forbidden), and so is every item of a 2026-07-28 server
// or of another kind.
func TestTaskSupportOf(t *testing.T) {
	for _, c := range []struct {
		name   string
		kind   Kind
		raw    string
		newest bool
		want   string
	}{
		{"required", KindTool, `{"name":"t","execution":{"taskSupport":"required"}}`, false, TaskRequired},
		{"optional", KindTool, `{"name":"t","execution":{"taskSupport":"optional"}}`, false, TaskOptional},
		{"forbidden", KindTool, `{"name":"t","execution":{"taskSupport":"forbidden"}}`, false, ""},
		{"absent", KindTool, `{"name":"t"}`, false, ""},
		{"not a string", KindTool, `{"name":"t","execution":{"taskSupport":1}}`, false, ""},
		{"an unknown value", KindTool, `{"name":"t","execution":{"taskSupport":"always"}}`, false, ""},
		{"a 2026-07-28 server", KindTool, `{"name":"t","execution":{"taskSupport":"required"}}`, true, ""},
		{"a prompt", KindPrompt, `{"name":"t","execution":{"taskSupport":"required"}}`, false, ""},
	} {
		if got := taskSupportOf(c.kind, []byte(c.raw), c.newest); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}
