package gateway

import (
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// A listen's stream on HTTP/1 leaves net/http once it has begun: the connection is taken
// (hijacked) after the header and the acknowledgement, which net/http writes, and the stream
// goes on in the same chunked framing, written by the listen itself. An idle listening session
// then holds one goroutine, which reads its connection to notice the client leaving (net/http
// held its serving goroutine, deep in the handler, and a background reader, with 8 KiB of
// buffers); what the projection and the connections deliver starts a writer of the listen's
// own, which ends once the queue is written, as a session's outbox writer does (outbox.go).
// An HTTP/2 stream cannot be taken, and stays with the handler's goroutine (streamListen).

// detachedListen is a listen's stream on a connection taken from net/http.
type detachedListen struct {
	conn net.Conn
	l    *listen
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
// wrote, which net/http sends first) and starts its reader; nil where the connection cannot be
// taken (HTTP/2), and the handler goes on with the stream.
func detach(w http.ResponseWriter, l *listen, result []byte, forget func()) *detachedListen {
	c, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return nil
	}
	d := &detachedListen{conn: c, l: l, result: result, forget: forget}
	l.mu.Lock()
	l.detached = d
	l.mu.Unlock()
	go d.read()
	d.kick() // what was queued while the stream began
	return d
}

// read reads the connection until the client goes (a listening client sends nothing more on
// it), then ends the stream.
func (d *detachedListen) read() {
	var buf [64]byte
	for {
		if _, err := d.conn.Read(buf[:]); err != nil {
			d.end()
			return
		}
	}
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

// write writes what the listen holds, one chunk per event, until nothing is left; the
// endpoint's closing ends the stream with the listen's result and the last chunk.
func (d *detachedListen) write() {
	for {
		queue, closed, ok := d.next()
		if !ok {
			return
		}
		var out []byte
		for _, n := range queue {
			out = appendChunk(out, eventFrame(d.l.encode(n)))
		}
		if closed {
			out = append(appendChunk(out, eventFrame(d.result)), "0\r\n\r\n"...)
		}
		_ = d.conn.SetWriteDeadline(time.Now().Add(StreamWriteTimeout))
		if _, err := d.conn.Write(out); err != nil || closed {
			d.end()
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

// end ends the stream once: the connection closes, and the listen is forgotten.
func (d *detachedListen) end() {
	d.ended.Do(func() {
		d.mu.Lock()
		d.over = true
		d.mu.Unlock()
		_ = d.conn.Close()
		d.forget()
	})
}

// appendChunk appends one chunk of HTTP/1.1's chunked transfer coding, as net/http writes one.
func appendChunk(out, data []byte) []byte {
	out = strconv.AppendInt(out, int64(len(data)), 16)
	out = append(append(out, "\r\n"...), data...)
	return append(out, "\r\n"...)
}
