package paths

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// A task id the gateway gave opens only for the project and session it was given to, as it
// was given, and under the claim it was given under; everything else is a task not found,
// which says nothing of whose it is, but a moved project, which says so.
func TestOpenTaskID(t *testing.T) {
	b := stateBinding{Project: "ns/p", Session: "s-1", Server: "everything", Call: taskCall, now: time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)}
	sealed := sealTaskID(b, "c0ffee", "task-1")
	with := func(change func(*stateBinding)) stateBinding { c := b; change(&c); return c }
	theirs := sealTaskID(with(func(c *stateBinding) { c.Epoch = 5 }), "c0ffee", "task-1")
	state := sealState(with(func(c *stateBinding) { c.Call = `"x" (tools/call)` }), "c0ffee/task-1")
	for _, c := range []struct {
		what string
		b    stateBinding
		id   string
		want string // the error's words; "" opens
	}{
		{"its own", b, sealed, ""},
		{"its own, asked for with the server unknown", with(func(c *stateBinding) { c.Server = "" }), sealed, ""},
		{"another session's", with(func(c *stateBinding) { c.Session = "s-2" }), sealed, "Task not found"},
		{"another project's", with(func(c *stateBinding) { c.Project = "ns/q" }), sealed, "Task not found"},
		{"given under an earlier claim", with(func(c *stateBinding) { c.Epoch = 2 }), sealed, "moved between replicas (epoch 0, now 2)"},
		{"given by another replica", b, flipLast(theirs), "moved between replicas (epoch 5, now 0)"},
		{"altered", b, flipLast(sealed), "Task not found"},
		{"a server's own id", b, "task-1", "Task not found"},
		{"a sealed requestState", b, taskIDPrefix + strings.TrimPrefix(state, serverStatePrefix), "Task not found"},
		{"no mac", b, taskIDPrefix + "e30", "Task not found"},
	} {
		got, err := openTaskID(c.b, c.id)
		switch {
		case c.want == "" && (err != nil || got != sealedTask{server: "everything", conn: "c0ffee", id: "task-1"}):
			t.Errorf("%s: %+v (%v), want it opened", c.what, got, err)
		case c.want != "" && (err == nil || err.Code != -32602 || !strings.Contains(err.Message, c.want)):
			t.Errorf("%s: %+v (%v), want an invalid-params error saying %q", c.what, got, err, c.want)
		}
	}
}

// The server's task id is swapped for the session's wherever a taskId member holds it: a
// created task, a task's status, a result's related-task _meta; other members stay.
func TestSwapTaskID(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"task":{"taskId":"u1","status":"working"}}`, `{"task":{"status":"working","taskId":"s1"}}`},
		{`{"taskId":"u1","status":"completed"}`, `{"status":"completed","taskId":"s1"}`},
		{`{"content":[{"type":"text","text":"u1"}],"_meta":{"io.modelcontextprotocol/related-task":{"taskId":"u1"}}}`,
			`{"_meta":{"io.modelcontextprotocol/related-task":{"taskId":"s1"}},"content":[{"type":"text","text":"u1"}]}`},
		{`{"taskId":"u2"}`, `{"taskId":"u2"}`},
		{`["u1"]`, `["u1"]`},
	} {
		got := swapTaskID(json.RawMessage(c.in), "u1", "s1")
		if string(got) != c.want {
			t.Errorf("%s: %s, want %s", c.in, got, c.want)
		}
	}
}
