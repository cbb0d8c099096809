package gateway

import (
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// outboxSize bounds the messages waiting for one session: past it the oldest goes (log lines
// are the only messages queued so, and a session that reads this slowly has lost them anyway).
const outboxSize = 256

// outbox is one session's queue of what the shared connections deliver to it outside its own
// requests (log lines). The goroutines that serve every session of a project only put into
// it; its own writer, started while it holds something and gone once it is empty, writes to
// the session. So a session that stops reading delays only itself: its writer waits on it, at
// most StreamWriteTimeout a write, and the queue drops its oldest meanwhile.
type outbox struct {
	mu      sync.Mutex
	queue   []func()
	running bool
	dropped int
}

// put queues send, dropping the oldest past outboxSize, and starts the writer if none runs.
func (o *outbox) put(send func()) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.queue) >= outboxSize {
		o.queue[0] = nil
		o.queue = o.queue[1:]
		o.dropped++
	}
	o.queue = append(o.queue, send)
	if !o.running {
		o.running = true
		go o.drain()
	}
}

// drain writes what is queued, in order, and ends when the queue is empty.
func (o *outbox) drain() {
	for {
		o.mu.Lock()
		if len(o.queue) == 0 {
			o.running = false
			o.mu.Unlock()
			return
		}
		send := o.queue[0]
		o.queue[0] = nil
		o.queue = o.queue[1:]
		o.mu.Unlock()
		send()
	}
}

// outboxOf is a stateful session's outbox, made on first use; ended drops it. nil once the
// session has ended.
func (p *project) outboxOf(ss *mcp.ServerSession) *outbox {
	ref := sessionRef(ss.ID())
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.statefuls[ref] != ss {
		return nil
	}
	o := p.outboxes[ss]
	if o == nil {
		o = &outbox{}
		p.outboxes[ss] = o
	}
	return o
}
