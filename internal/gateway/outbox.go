package gateway

import (
	"context"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/internal/recovery"
)

// What the shared connections deliver to a session outside its own requests (log lines,
// resource updates, list_changed) is written by that session's own writer, never by the
// goroutine that received it: that goroutine (a connection's notification reader, the SDK's
// list_changed timer, another session's call reading its stream) serves every session of the
// project, and a session that stops reading would stall them all.
//
// The outboxes hold, per session, what waits for its writer. A writer runs while its session's
// outbox holds something and ends once it is empty, when the outbox goes too, so an idle
// session costs nothing. A writer waits on a session that stops reading at most
// StreamWriteTimeout a write (then its stream is broken and the rest fail at once), and its
// outbox drops meanwhile: log lines first, oldest first; a list_changed or a resource's update
// already waiting is not queued twice.

// outboxSize bounds the messages waiting for one session.
const outboxSize = 256

// queuedNotices are the notifications a session's writer sends. Progress is not one of them:
// it belongs to a call, and the call's own writer writes it (relayCall).
var queuedNotices = map[string]bool{
	"notifications/message":                true,
	"notifications/resources/updated":      true,
	"notifications/tools/list_changed":     true,
	"notifications/prompts/list_changed":   true,
	"notifications/resources/list_changed": true,
}

// notice is one message waiting for a session's writer.
type notice struct {
	method string
	uri    string // a resource update's URI: one waiting update per URI is enough
	send   func()
	meta   mcp.Meta // a resource update's _meta as its server sent it, for a listen (listen.go)
}

// outbox is one session's queue.
type outbox struct {
	queue   []notice
	dropped int
}

// outboxes are a project's per-session queues and their writers.
type outboxes struct {
	mu    sync.Mutex
	boxes map[*mcp.ServerSession]*outbox
}

// put queues n for ss and starts the session's writer if none runs.
func (t *outboxes) put(ss *mcp.ServerSession, n notice) {
	t.mu.Lock()
	defer t.mu.Unlock()
	o := t.boxes[ss]
	if o == nil {
		if t.boxes == nil {
			t.boxes = map[*mcp.ServerSession]*outbox{}
		}
		o = &outbox{}
		t.boxes[ss] = o
		go t.drain(ss, o)
	}
	o.add(n)
}

// add queues n unless the same change already waits, making room first.
func (o *outbox) add(n notice) {
	if n.method != "notifications/message" {
		for _, q := range o.queue {
			if q.method == n.method && q.uri == n.uri {
				return
			}
		}
	}
	if len(o.queue) >= outboxSize {
		o.queue = dropOne(o.queue)
		o.dropped++
	}
	o.queue = append(o.queue, n)
}

// dropOne removes the oldest log line from a full queue, or else its oldest message.
func dropOne(queue []notice) []notice {
	i := 0
	for j, q := range queue {
		if q.method == "notifications/message" {
			i = j
			break
		}
	}
	return append(queue[:i], queue[i+1:]...)
}

// drain writes what o holds, in order, and ends (dropping o) once it is empty.
func (t *outboxes) drain(ss *mcp.ServerSession, o *outbox) {
	for {
		t.mu.Lock()
		if len(o.queue) == 0 {
			delete(t.boxes, ss)
			t.mu.Unlock()
			return
		}
		n := o.queue[0]
		o.queue[0] = notice{}
		o.queue = o.queue[1:]
		t.mu.Unlock()
		n.send()
	}
}

// queueNotices is a sending middleware of the project's MCP server: it hands the notifications
// in queuedNotices to the session's writer and returns at once, whoever sends them (the
// gateway's notice, the SDK's list_changed timer, the SDK's ResourceUpdated). The send keeps
// the context's values (the stream a 2026-07-28 listen writes to) but not its end: the SDK
// cancels its notification context once it has gone round every session.
func (p *project) queueNotices(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		ss, _ := req.GetSession().(*mcp.ServerSession)
		if !queuedNotices[method] || ss == nil {
			return next(ctx, method, req)
		}
		n := notice{method: method, send: func() {
			recovery.Run(p.g.opts.Log, method, func() { _, _ = next(context.WithoutCancel(ctx), method, req) })
		}}
		if u, ok := req.GetParams().(*mcp.ResourceUpdatedNotificationParams); ok && u != nil {
			if !p.updateTo(ss) {
				return nil, nil // another connection's update (notify.go's updated)
			}
			n.uri = u.URI
		}
		p.outboxes.put(ss, n)
		return nil, nil
	}
}
