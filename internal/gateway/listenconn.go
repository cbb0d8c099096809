package gateway

import (
	"net/http"
	"sync"

	"github.com/dsh-dev/projectmcp/internal/httpserve"
)

// A listen's stream on HTTP/1 leaves net/http once it has begun (httpserve.Take): the header and the
// acknowledgement are net/http's to write, and the stream goes on on the taken connection. An
// idle listening session then holds no goroutine: the connection's reader starts only when the
// client sends something or goes (net/http held its serving goroutine, deep in the handler,
// and a background reader, with 8 KiB of buffers). What the projection and the connections
// deliver starts a writer of the listen's own, which ends once the queue is written, as a
// session's outbox writer does (outbox.go). A stream that cannot be taken (TLS, HTTP/2) stays
// with the handler's goroutine (streamListen).

// detachedListen is a listen's stream on a taken connection.
type detachedListen struct {
	tc *httpserve.Taken
	l  *listen
	// result is the listen's result, written when the endpoint closes.
	result []byte
	// forget forgets the listen once its stream is over (its removal and its subscriptions).
	forget func()

	mu      sync.Mutex
	writing bool // a writer runs
	again   bool // kicked while a writer runs: it looks at the queue once more before it ends
	over    bool // the stream has ended: nothing more is written
	ended   sync.Once
}

// detach takes the listen's connection from net/http (after the header and what the handler
// wrote, which net/http sends first); nil where it cannot be taken, and the handler goes on
// with the stream.
func (p *project) detach(w http.ResponseWriter, r *http.Request, l *listen, forget func()) *detachedListen {
	d := &detachedListen{l: l, result: l.result(p.serverInfo), forget: forget}
	d.tc = httpserve.Take(w, r, p.g.giveBack, p.g.readiness.Load(), func() { d.end(false) })
	if d.tc == nil {
		return nil
	}
	d.tc.Watch() // its gone ends d, whose tc is set now
	l.mu.Lock()
	l.detached = d
	l.mu.Unlock()
	d.kick() // what was queued while the stream began
	return d
}

// kick starts the writer unless one runs or the stream is over. The listen's put and close
// call it after queueing.
func (d *detachedListen) kick() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.writing {
		d.again = true
		return
	}
	if !d.over {
		d.writing = true
		go d.write()
	}
}

// write writes what the listen holds, as one chunk, until nothing is left; the endpoint's
// closing ends the stream with the listen's result, whole.
func (d *detachedListen) write() {
	for {
		queue, closed, ok := d.next()
		if !ok {
			return
		}
		var out []byte
		for _, n := range queue {
			out = append(out, eventFrame(d.l.encode(n))...)
		}
		if closed {
			out = append(out, eventFrame(d.result)...)
		}
		if err := d.tc.Write(out); err != nil || closed {
			d.end(err == nil)
			return
		}
	}
}

// next is what the writer writes next; false when there is nothing (or the stream is over),
// and the writer ends: a kick after the queue was taken makes it look again.
func (d *detachedListen) next() ([]notice, bool, bool) {
	for {
		d.mu.Lock()
		d.again = false
		d.mu.Unlock()
		queue, closed := d.l.take()
		d.mu.Lock()
		if d.over || (len(queue) == 0 && !closed && !d.again) {
			d.writing = false
			d.mu.Unlock()
			return nil, false, false
		}
		d.mu.Unlock()
		if len(queue) > 0 || closed {
			return queue, closed, true
		}
	}
}

// end ends the stream once (whole: after its result), and the listen is forgotten.
func (d *detachedListen) end(whole bool) {
	d.ended.Do(func() {
		d.mu.Lock()
		d.over = true
		d.mu.Unlock()
		d.tc.Finish(whole)
		d.forget()
	})
}
