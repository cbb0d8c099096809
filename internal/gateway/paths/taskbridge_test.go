package paths

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A task's status becomes a progress notification when it changes, and again after
// taskKeepAlive without a change; its progress counts the notifications, its message is the
// task's status message, or its status without one.
func TestTaskProgress(t *testing.T) {
	type step struct {
		status, message string
		waited          time.Duration
		want            *mcp.ProgressNotificationParams
	}
	for _, c := range []struct {
		name  string
		steps []step
	}{
		{"the first status is sent, its status without a message", []step{
			{"working", "", 0, &mcp.ProgressNotificationParams{Progress: 1, Message: "working"}},
		}},
		{"a status unchanged is not sent again", []step{
			{"working", "Gathering sources...", 0, &mcp.ProgressNotificationParams{Progress: 1, Message: "Gathering sources..."}},
			{"working", "Gathering sources...", time.Second, nil},
			{"working", "Analyzing content...", time.Second, &mcp.ProgressNotificationParams{Progress: 2, Message: "Analyzing content..."}},
		}},
		{"a status change alone is sent", []step{
			{"working", "x", 0, &mcp.ProgressNotificationParams{Progress: 1, Message: "x"}},
			{"input_required", "x", time.Second, &mcp.ProgressNotificationParams{Progress: 2, Message: "x"}},
		}},
		{"a status unchanged for taskKeepAlive is sent again", []step{
			{"working", "x", 0, &mcp.ProgressNotificationParams{Progress: 1, Message: "x"}},
			{"working", "x", taskKeepAlive - time.Second, nil},
			{"working", "x", taskKeepAlive, &mcp.ProgressNotificationParams{Progress: 2, Message: "x"}},
			{"working", "x", time.Second, nil},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var pr taskProgress
			for i, s := range c.steps {
				pr.waited = s.waited
				got := pr.next(taskStatus{Status: s.status, StatusMessage: s.message})
				if fmt.Sprint(got) != fmt.Sprint(s.want) {
					t.Errorf("step %d: %+v, want %+v", i, got, s.want)
				}
			}
		})
	}
}

// The server's pollInterval, bounded; a second without one.
func TestTaskPollEvery(t *testing.T) {
	ms := func(v int64) *int64 { return &v }
	for _, c := range []struct {
		interval *int64
		want     time.Duration
	}{
		{nil, defaultTaskPoll},
		{ms(1000), time.Second},
		{ms(0), minTaskPoll},
		{ms(-5), minTaskPoll},
		{ms(86_400_000), maxTaskPoll},
		{ms(250), 250 * time.Millisecond},
	} {
		if got := (taskStatus{PollInterval: c.interval}).pollEvery(); got != c.want {
			t.Errorf("pollInterval %v: %s, want %s", c.interval, got, c.want)
		}
	}
	if !(taskStatus{Status: "failed"}).terminal() || (taskStatus{Status: "input_required"}).terminal() {
		t.Error("failed ends a task, input_required does not")
	}
}

// A call that ended without the server's answer cancels its task; a server's error does not.
func TestCancelsTask(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{&jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "Task not found"}, false},
		{fmt.Errorf("wrapped: %w", &jsonrpc.Error{Code: 1}), false},
		{context.Canceled, true},
		{errors.New("connection reset"), true},
	} {
		if got := cancelsTask(c.err); got != c.want {
			t.Errorf("%v: %t, want %t", c.err, got, c.want)
		}
	}
}

// The task's result is the call's without the _meta member naming the task.
func TestWithoutRelatedTask(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"content":[],"_meta":{"io.modelcontextprotocol/related-task":{"taskId":"t1"}}}`, `{"content":[]}`},
		{`{"content":[],"_meta":{"io.modelcontextprotocol/related-task":{"taskId":"t1"},"k":1}}`, `{"_meta":{"k":1},"content":[]}`},
		{`{"content":[],"_meta":{"k":1}}`, `{"content":[],"_meta":{"k":1}}`},
		{`{"content":[]}`, `{"content":[]}`},
		{`not json`, `not json`},
	} {
		if got := string(withoutRelatedTask([]byte(c.in))); got != c.want {
			t.Errorf("%s: %s, want %s", c.in, got, c.want)
		}
	}
}
