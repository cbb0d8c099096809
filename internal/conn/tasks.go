package conn

import (
	"bytes"
	"encoding/json"
)

// A 2025-11-25 server may run a tool as a task (SEP-1686, the experimental Tasks of that
// revision): a tools/call with a "task" member is answered at once with the task, whose status
// the client polls (tasks/get) and whose result it fetches (tasks/result, which waits for the
// end). A tool lists whether it runs so in execution.taskSupport: "required" (it runs only so),
// "optional", or "forbidden" (the default). Sessions are not shown the member (listitems.go:
// itemMembers), so the gateway keeps it per tool to know which calls it runs as tasks for them.

// A tool's task support, as RawItem.TaskSupport holds it.
const (
	TaskRequired = "required"
	TaskOptional = "optional"
)

// taskSupportOf reads a listed tool's execution.taskSupport: TaskRequired or TaskOptional, ""
// for any other value, any other kind, and a 2026-07-28 server (whose Tasks extension is
// another protocol).
func taskSupportOf(kind Kind, raw json.RawMessage, newest bool) string {
	if kind != KindTool || newest || !bytes.Contains(raw, []byte(`"taskSupport"`)) {
		return ""
	}
	var item struct {
		Execution struct {
			TaskSupport string `json:"taskSupport"`
		} `json:"execution"`
	}
	if json.Unmarshal(raw, &item) != nil {
		return ""
	}
	switch ts := item.Execution.TaskSupport; ts {
	case TaskRequired, TaskOptional:
		return ts
	}
	return ""
}

// TaskSupport is the task support the server's tool (by its own name) was last listed with:
// TaskRequired, TaskOptional, or "" (forbidden, unknown, or not listed raw).
func (c *Conn) TaskSupport(tool string) string {
	c.mu.Lock()
	cat := c.state.catalog
	c.mu.Unlock()
	if cat == nil {
		return ""
	}
	if it := cat.raw[KindTool][tool]; it != nil {
		return it.TaskSupport
	}
	return ""
}
