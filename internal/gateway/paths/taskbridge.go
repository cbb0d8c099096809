package paths

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/jsonrpcwire"
)

// A tool whose server lists it with execution.taskSupport "required" runs only as a task
// (conn/tasks.go), which a session that declares no Tasks cannot start: Claude Code has none,
// and such a tool would fail at its every call. The gateway runs the task on the session's
// behalf, within the session's own tools/call: it sends the call with a task, waits for the
// task's result (tasks/result, which the server answers once the task ends) and answers the
// session's call with it, as if the tool had answered directly. What the server asks meanwhile
// (an input_required task's elicitation) comes on the tasks/result stream, so it goes to the
// session as any server's request during a call does (asks.go, input.go). While it waits, and
// when the session asked for progress, it polls the task's status (tasks/get) at the server's
// pollInterval and relays each status message as a progress notification of the call: a client
// that gives up on a call silent too long (Claude Code's idle timeout) then waits for as long
// as the task works. A call that ends before the task's result (the session cancelled it, went
// away, or the call timed out) cancels the task (tasks/cancel), so nothing runs on for no one.

// Bounds on the server's pollInterval, and what the gateway polls at without one: a server's
// value is a hint, and an interval of 0 would poll without rest, one of a day never.
const (
	minTaskPoll     = 100 * time.Millisecond
	maxTaskPoll     = 30 * time.Second
	defaultTaskPoll = time.Second
	// taskKeepAlive is how long a task's status may stay the same before the session is sent
	// its progress again: well under Claude Code's idle timeout of 300 s.
	taskKeepAlive = 30 * time.Second
	// taskCancelTimeout bounds the tasks/cancel sent after the call ended.
	taskCancelTimeout = 10 * time.Second
)

// relatedTaskKey is the _meta member that ties a message to its task (SEP-1686).
const relatedTaskKey = "io.modelcontextprotocol/related-task"

// taskStatus is what the gateway reads of a task: the server's CreateTaskResult.task, or its
// tasks/get result.
type taskStatus struct {
	TaskID        string `json:"taskId"`
	Status        string `json:"status"`
	StatusMessage string `json:"statusMessage"`
	PollInterval  *int64 `json:"pollInterval"` // milliseconds
}

// terminal reports whether the task has ended (its result is ready, or it will have none).
func (t taskStatus) terminal() bool {
	switch t.Status {
	case "completed", "failed", "cancelled":
		return true
	}
	return false
}

// pollEvery is how long to wait before polling the task again: its pollInterval, bounded.
func (t taskStatus) pollEvery() time.Duration {
	if t.PollInterval == nil {
		return defaultTaskPoll
	}
	return min(max(time.Duration(*t.PollInterval)*time.Millisecond, minTaskPoll), maxTaskPoll)
}

// taskLimit bounds each request of a task the gateway runs for a call of o: the call timeout,
// which dispatch does not apply to the call itself (Origin.task); 0 when dispatch does.
func (p *Paths) taskLimit(o Origin) time.Duration {
	if !o.task {
		return 0
	}
	return p.opts.CallTimeout
}

// callAsTask runs a tools/call (members as Forward takes them) as a task of the server's, and
// returns the task's result as the call's. onProgress, when not nil, takes the task's status
// as progress. limit, when not 0, bounds each request but tasks/result, which waits as long as
// the task works: while it waits, the task's status is polled, and a poll that fails ends the
// call with its error (the server no longer answers for the task).
func callAsTask(ctx context.Context, c *conn.Conn, members []byte, onProgress func(*mcp.ProgressNotificationParams), rev conn.Accepts, limit time.Duration) (conn.RawResult, error) {
	created, err := forwardWithin(ctx, limit, c, "tools/call", append(members[:len(members):len(members)], `,"task":{}`...), rev)
	if err != nil {
		return nil, err
	}
	var cr struct {
		Task *taskStatus `json:"task"`
	}
	if json.Unmarshal(created, &cr) != nil || cr.Task == nil || cr.Task.TaskID == "" {
		return created, nil // the server answered the call without a task: that is its result
	}
	id := jsonrpcwire.AppendMember(nil, "taskId", jsonrpcwire.AppendQuoted(nil, cr.Task.TaskID))
	waiting, giveUp := context.WithCancelCause(ctx)
	defer giveUp(nil)
	stop := pollTask(ctx, taskPoll{c: c, id: id, rev: rev, limit: limit, onProgress: onProgress, failed: giveUp}, *cr.Task)
	res, err := c.Forward(waiting, "tasks/result", id, nil, rev)
	stop()
	if err != nil && ctx.Err() == nil && waiting.Err() != nil {
		err = context.Cause(waiting) // a poll failed
	}
	if cancelsTask(err) {
		cancelTask(ctx, c, id, rev, limit)
	}
	if err != nil {
		return nil, err
	}
	return withoutRelatedTask(res), nil
}

// forwardWithin is Forward without progress, bounded by limit when it is not 0.
func forwardWithin(ctx context.Context, limit time.Duration, c *conn.Conn, method string, members []byte, rev conn.Accepts) (conn.RawResult, error) {
	if limit > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, limit)
		defer cancel()
	}
	res, err := c.Forward(ctx, method, members, nil, rev)
	if err != nil && limit > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return nil, fmt.Errorf("MCP server %q did not answer %s within %s (the gateway's --call-timeout)", c.Server(), method, limit)
	}
	return res, err
}

// cancelsTask reports whether a tasks/result that ended with err leaves the task to be
// cancelled: it ended without the server's answer (the session's cancel, its end, a timeout, a
// broken connection). A server's error answers for the task, which it has ended or will end.
func cancelsTask(err error) bool {
	var rpcErr *jsonrpc.Error
	return err != nil && !errors.As(err, &rpcErr)
}

// cancelTask asks the server to cancel the task, after the call it ran for ended: with the
// call's values (its session's turn on the connection), not its cancellation.
func cancelTask(ctx context.Context, c *conn.Conn, id []byte, rev conn.Accepts, limit time.Duration) {
	if limit <= 0 {
		limit = taskCancelTimeout
	}
	// A task that ended meanwhile is the server's to refuse.
	_, _ = forwardWithin(context.WithoutCancel(ctx), min(limit, taskCancelTimeout), c, "tasks/cancel", id, rev)
}

// taskPoll is what polling a task needs: its connection and id (tasks/get's members), the bound
// on each poll, where its status goes, and whom a failed poll tells.
type taskPoll struct {
	c          *conn.Conn
	id         []byte
	rev        conn.Accepts
	limit      time.Duration
	onProgress func(*mcp.ProgressNotificationParams)
	failed     func(error)
}

// pollTask polls the task's status on a goroutine of its own until stop, which returns once
// the goroutine ended, or until the task ended or a poll failed (tp.failed is told), relaying
// its status through tp.onProgress when it is not nil.
func pollTask(ctx context.Context, tp taskPoll, first taskStatus) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var pr taskProgress
		for t := first; ; {
			if p := pr.next(t); p != nil && tp.onProgress != nil {
				tp.onProgress(p)
			}
			if t.terminal() || !sleep(ctx, t.pollEvery()) {
				return
			}
			pr.waited += t.pollEvery()
			now, err := getTask(ctx, tp)
			if err != nil {
				if ctx.Err() == nil {
					tp.failed(err)
				}
				return
			}
			now.PollInterval = keptInterval(now.PollInterval, t.PollInterval)
			t = now
		}
	}()
	return func() { cancel(); <-done }
}

// keptInterval is a task's pollInterval as last reported: a tasks/get result without one keeps
// the one before.
func keptInterval(now, before *int64) *int64 {
	if now == nil {
		return before
	}
	return now
}

// getTask is the task's status now.
func getTask(ctx context.Context, tp taskPoll) (taskStatus, error) {
	raw, err := forwardWithin(ctx, tp.limit, tp.c, "tasks/get", tp.id, tp.rev)
	if err != nil {
		return taskStatus{}, err
	}
	var t taskStatus
	if err := json.Unmarshal(raw, &t); err != nil || t.Status == "" {
		return taskStatus{}, fmt.Errorf("MCP server %q answered tasks/get with no task status", tp.c.Server())
	}
	return t, nil
}

// sleep waits d, false when ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// taskProgress turns a task's successive statuses into the call's progress notifications.
type taskProgress struct {
	sent   int           // notifications sent: the progress of the next is one more
	last   string        // the status and message of the last one
	waited time.Duration // since the last one
}

// next is the notification for the task's status t, or nil: one when its status or message
// changed, or when the last is taskKeepAlive old; its message is the task's, or its status.
func (p *taskProgress) next(t taskStatus) *mcp.ProgressNotificationParams {
	msg := t.StatusMessage
	if msg == "" {
		msg = t.Status
	}
	now := t.Status + "\x00" + msg
	if p.sent > 0 && now == p.last && p.waited < taskKeepAlive {
		return nil
	}
	p.sent, p.last, p.waited = p.sent+1, now, 0
	return &mcp.ProgressNotificationParams{Progress: float64(p.sent), Message: msg}
}

// withoutRelatedTask is a task's result as the call's: without the _meta member naming the task,
// which the session did not start and cannot use.
func withoutRelatedTask(res conn.RawResult) conn.RawResult {
	var top map[string]json.RawMessage
	if json.Unmarshal(res, &top) != nil {
		return res
	}
	var meta map[string]json.RawMessage
	if m, ok := top["_meta"]; !ok || json.Unmarshal(m, &meta) != nil {
		return res
	}
	if _, ok := meta[relatedTaskKey]; !ok {
		return res
	}
	delete(meta, relatedTaskKey)
	if len(meta) == 0 {
		delete(top, "_meta")
	} else {
		top["_meta"], _ = json.Marshal(meta) // members as received: cannot fail
	}
	out, err := json.Marshal(top)
	if err != nil {
		return res
	}
	return out
}
