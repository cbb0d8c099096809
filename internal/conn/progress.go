package conn

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// progressRelay hands the server's progress notifications to the requests that asked for
// them. Each request gets a progress token of its own on the connection (sessions' tokens
// could collide on it): the connection's id and a number.
type progressRelay struct {
	prefix string // the connection's id
	next   atomic.Uint64

	mu      sync.Mutex
	watches map[string]*progressWatch // by token
}

func newProgressRelay(prefix string) *progressRelay {
	return &progressRelay{prefix: prefix, watches: map[string]*progressWatch{}}
}

// progressWatch is one request's progress callback; fn is nil once the request is done. Its
// lock is taken after the relay's is released, never under it.
type progressWatch struct {
	mu sync.Mutex
	fn func(*mcp.ProgressNotificationParams)
}

// watch gives a request a token and sends the server's progress for it to onProgress until
// done. Once done has returned, onProgress is never called again: the SDK's client runs its
// notification handler beside the call's return, so without that a progress the server sent
// before its result could reach the session after the result, which the protocol forbids.
func (r *progressRelay) watch(onProgress func(*mcp.ProgressNotificationParams)) (token string, done func()) {
	token = fmt.Sprintf("%s-%d", r.prefix, r.next.Add(1))
	w := &progressWatch{fn: onProgress}
	r.mu.Lock()
	r.watches[token] = w
	r.mu.Unlock()
	return token, func() {
		r.mu.Lock()
		delete(r.watches, token)
		r.mu.Unlock()
		w.mu.Lock() // waits for a relay under way
		w.fn = nil
		w.mu.Unlock()
	}
}

// relay hands a progress notification from the server to the request that asked for it.
func (r *progressRelay) relay(p *mcp.ProgressNotificationParams) {
	token, ok := p.ProgressToken.(string) // ours are strings; a server may send anything
	if !ok {
		return
	}
	r.mu.Lock()
	w := r.watches[token]
	r.mu.Unlock()
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fn != nil {
		w.fn(p)
	}
}
