package buckets

import (
	"bytes"
	"io"
	"net/http"
)

// maxKept bounds the body a request may be sent again with: past it, an attempt that did
// nothing with the request is not retried, and the client gets 503 with Retry-After. The
// gateway's own bound on a body (--max-request-bytes) is smaller by default.
const maxKept = 16 << 20

// kept is a request's body that can be read again from its first byte: what an attempt read
// of it is kept, so the next attempt reads that first and then the rest. Nothing is read
// ahead: an attempt reads the body as it would the client's.
//
// A body of a declared length ends there: its client's body is not read past it. An HTTP/1.x
// server may close a request's body once the handler has written its response's header, which
// a proxied stream does while the transport may still look past the declared length for more;
// that look would fail, and the transport close the connection the answer is still streaming
// on.
type kept struct {
	src    io.ReadCloser
	buf    bytes.Buffer
	pos    int   // where the current attempt reads in buf
	read   int64 // what was read of src
	length int64 // the declared length, or -1
	spoilt bool  // more than maxKept was read: no second attempt
}

// keep makes r's body one that can be read again (rewind).
func keep(r *http.Request) *kept {
	k := &kept{src: r.Body, length: r.ContentLength}
	if r.Body == nil || r.Body == http.NoBody {
		k.src = http.NoBody
	}
	r.Body = k
	return k
}

func (k *kept) Read(p []byte) (int, error) {
	if k.pos < k.buf.Len() {
		n := copy(p, k.buf.Bytes()[k.pos:])
		k.pos += n
		return n, nil
	}
	if k.length >= 0 && k.read >= k.length {
		return 0, io.EOF
	}
	n, err := k.src.Read(p)
	k.read += int64(n)
	if !k.spoilt {
		if k.buf.Len()+n > maxKept {
			k.spoilt = true
			k.buf = bytes.Buffer{}
		} else {
			k.buf.Write(p[:n])
			k.pos += n
		}
	}
	return n, err
}

// Close is the attempt's: the client's body stays open for the next (the server closes it).
func (k *kept) Close() error { return nil }

// rewind has the next read start from the body's first byte again; false when the body is
// lost to a second attempt (spoilt).
func (k *kept) rewind() bool {
	k.pos = 0
	return !k.spoilt
}

// catcher is the gateway's ResponseWriter for one attempt: an answer marked HeaderMoved is
// dropped (moved), and the headers the gateway set for it are taken back (restore).
type catcher struct {
	http.ResponseWriter
	before http.Header // the headers before the attempt, when there were any
	moved  bool
	wrote  bool
}

func (c *catcher) WriteHeader(code int) {
	if !c.wrote && code == http.StatusServiceUnavailable && c.Header().Get(HeaderMoved) != "" {
		c.moved = true
		return
	}
	c.wrote = true
	c.ResponseWriter.WriteHeader(code)
}

func (c *catcher) Write(p []byte) (int, error) {
	if c.moved {
		return len(p), nil
	}
	c.wrote = true
	return c.ResponseWriter.Write(p)
}

// Flush and Unwrap keep streaming and http.ResponseController working through the catcher.
func (c *catcher) Flush() {
	if !c.moved {
		c.wrote = true
		_ = http.NewResponseController(c.ResponseWriter).Flush() // as http.Flusher: nothing to report
	}
}

// FlushError is Flush with the writer's error (http.ResponseController).
func (c *catcher) FlushError() error {
	if c.moved {
		return nil
	}
	c.wrote = true
	return http.NewResponseController(c.ResponseWriter).Flush()
}

func (c *catcher) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// restore takes back the headers the dropped answer set.
func (c *catcher) restore() {
	h := c.Header()
	for name := range h {
		if _, ok := c.before[name]; !ok {
			delete(h, name)
		}
	}
	for name, v := range c.before {
		h[name] = v
	}
}
