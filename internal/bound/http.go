package bound

import (
	"bytes"
	"context"
	"errors"
	"io"
	"mime"
	"net/http"
	"sync"

	"github.com/go-logr/logr"
)

// Bodies holds every answer of an HTTP or SSE server to Limit per message (MaxMessageBytes),
// under both readers of them: the SDK's client (which reads a JSON body whole with io.ReadAll,
// and fails the whole connection on a body it cannot read or an event over its own bound) and
// the upstream's forwarded requests. A message over the bound is never kept:
//
//   - A JSON body over the bound (by its Content-Length, or once that many bytes came) is
//     closed unread past the bound and replaced by a JSON-RPC error answering the request's
//     id: that request fails with an error naming the bound, and the connection goes on.
//   - An event stream is passed on event by event. An event over the bound is not passed
//     on: on the stream of a request (a POST), the request fails the same way and the stream
//     ends there; on a stream of its own (the GET stream, legacy SSE), the rest of the event
//     is read without being kept, and when it was an answer (its id is followed as it goes
//     by, Top) an error answering it takes its place; anything else is dropped.
//   - An error status's body is cut at ErrorBodyBytes (only a JSON-RPC error in it is read).
type Bodies struct {
	Base  http.RoundTripper
	Limit int64
	Items int // MaxListItems: a list result holding more is refused before the SDK decodes it
	Log   logr.Logger
}

func (t *Bodies) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.Base.RoundTrip(req)
	if err != nil || resp.Body == nil || resp.Body == http.NoBody || IsByReader(req.Context()) {
		return resp, err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		resp.Body = &cutBody{r: io.LimitReader(resp.Body, min(t.Limit, ErrorBodyBytes)), c: resp.Body}
		return resp, nil
	}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch ct {
	case "application/json":
		switch {
		case resp.ContentLength > t.Limit:
			resp.Body.Close() // never read
			resp.Body = io.NopCloser(t.answer(req))
			resp.ContentLength = -1
		case resp.ContentLength < 0 || resp.ContentLength > int64(2*t.Items):
			// Chunked or decompressed (counted as it comes), or large enough to be a list
			// result over the bound on items.
			resp.Body = &jsonBody{src: resp.Body, t: t, req: req}
			resp.ContentLength = -1
		}
	case "text/event-stream":
		resp.Body = &eventBody{src: resp.Body, t: t, req: req}
	default:
		resp.Body = &cutBody{r: io.LimitReader(resp.Body, t.Limit), c: resp.Body}
	}
	return resp, nil
}

// byReader marks the requests whose answers their reader bounds itself, with the same bound
// and error: a connection's forwarded requests of methods that answer no list, whose every
// event a second watch here would read twice.
type byReader struct{}

// ByReader marks the requests sent with the context it returns as bounded by their reader:
// Bodies passes their answers on as they come.
func ByReader(ctx context.Context) context.Context { return context.WithValue(ctx, byReader{}, true) }

// IsByReader reports whether ByReader marked ctx's requests.
func IsByReader(ctx context.Context) bool { return ctx.Value(byReader{}) != nil }

// requestID is the id of the JSON-RPC request req carries (as JSON), when it is one: the SDK
// and the upstream put the id near the start, so only the first bytes are looked at.
func requestID(req *http.Request) ([]byte, bool) {
	if req.Method != http.MethodPost || req.GetBody == nil {
		return nil, false
	}
	body, err := req.GetBody()
	if err != nil {
		return nil, false
	}
	defer body.Close()
	var top Top
	buf := make([]byte, 4096)
	for read := 0; read < 64<<10; {
		n, err := body.Read(buf)
		top.Feed(buf[:n])
		read += n
		if id, ok := top.ID(); ok && top.method {
			return id, true
		}
		if err != nil {
			break
		}
	}
	id, ok := top.ID()
	return id, ok && top.method
}

// answer is what stands in for an answer over the bound to req: a JSON-RPC error answering
// its id. Without one (not a request of ours) the body cannot be read at all.
func (t *Bodies) answer(req *http.Request) io.Reader {
	if id, ok := requestID(req); ok {
		return bytes.NewReader(ErrorResponse(id, TooLargeMessage(t.Limit)))
	}
	return &failedReader{err: TooLarge(t.Limit)}
}

// cutBody ends (with EOF) where its limit is reached.
type cutBody struct {
	r io.Reader
	c io.Closer
}

func (b *cutBody) Read(p []byte) (int, error) { return b.r.Read(p) }
func (b *cutBody) Close() error               { return b.c.Close() }

// jsonBody reads a JSON body whole, up to the bound, before handing it on; it is followed as
// it comes (Top), so that a list result holding more items than the bound is refused as
// soon as it is known, before the rest is read.
type jsonBody struct {
	src  io.ReadCloser
	t    *Bodies
	req  *http.Request
	once sync.Once
	r    io.Reader
}

func (b *jsonBody) Read(p []byte) (int, error) {
	b.once.Do(func() { b.r = b.read() })
	return b.r.Read(p)
}

func (b *jsonBody) read() io.Reader {
	var top Top
	var data []byte
	chunk := chunks.Get().(*[]byte)
	defer chunks.Put(chunk)
	for {
		n, err := b.src.Read(*chunk)
		data = append(data, (*chunk)[:n]...)
		top.Feed((*chunk)[:n])
		what, items := top.Items()
		switch {
		case int64(len(data)) > b.t.Limit:
			b.src.Close() // the rest is never read
			return b.t.answer(b.req)
		case top.Listing() && items > b.t.Items:
			b.src.Close()
			msg := ListMessage(what, b.t.Items)
			if id, ok := requestID(b.req); ok {
				return bytes.NewReader(ErrorResponse(id, msg))
			}
			return &failedReader{err: errors.New(msg)}
		case err == io.EOF:
			return bytes.NewReader(data)
		case err != nil:
			return io.MultiReader(bytes.NewReader(data), &failedReader{err: err})
		}
	}
}

func (b *jsonBody) Close() error { return b.src.Close() }

// chunks are the read buffers of bodies being read (most answers are small: a buffer each
// would be most of what a forwarded call allocates).
var chunks = sync.Pool{New: func() any { b := make([]byte, 16<<10); return &b }}

type failedReader struct{ err error }

func (r *failedReader) Read([]byte) (int, error) { return 0, r.err }

// minCallerRead is the smallest buffer of its reader's that an eventBody reads into; a smaller
// one is read through a pooled chunk.
const minCallerRead = 512

// eventBody passes an event stream on whole events at a time, each at most the bound. Each
// event's data is followed as it comes (Top), so that a list result holding more items
// than the bound is refused as soon as it is known, before the rest is read.
type eventBody struct {
	src io.ReadCloser
	t   *Bodies
	req *http.Request

	buf []byte // whole events not yet handed on (buf[off:out]), then the event being read
	off int
	out int
	err error // what ended reading (handed on once the events before it are)

	lineLen int  // bytes of the current line so far, without its newline
	lineCR  bool // and the current line so far is just "\r"

	top  Top    // following the current event's data
	head []byte // the first bytes of the current line
	kind int    // what that line is: 0 not known yet, 1 data, 2 anything else

	skip string // why the current event is being read without being kept ("": it is kept)
}

func (b *eventBody) Read(p []byte) (int, error) {
	for {
		if b.off < b.out {
			n := copy(p, b.buf[b.off:b.out])
			b.off += n
			return n, nil
		}
		if b.err != nil {
			return 0, b.err
		}
		// Everything handed on: keep only the event being read.
		rest := copy(b.buf, b.buf[b.out:])
		b.buf, b.off, b.out = b.buf[:rest], 0, 0
		// The bytes are read into the caller's buffer (take copies what it keeps before
		// anything is handed on into it) when it is not tiny: a stream that waits holds no
		// buffer of its own while it waits. A long-lived stream (the GET stream, a
		// subscriptions/listen) waits almost all the time, and a pooled 16 KB chunk held
		// through that wait was 15 KB per connection (the scale benchmark's heap profile).
		into := p
		var chunk *[]byte
		if len(into) < minCallerRead {
			chunk = chunks.Get().(*[]byte)
			into = *chunk
		}
		n, err := b.src.Read(into)
		b.take(into[:n])
		if chunk != nil {
			chunks.Put(chunk)
		}
		if err != nil && b.err == nil {
			b.err = err
			b.ended() // an event the stream ends inside is handed on as it is
		}
	}
}

func (b *eventBody) Close() error { return b.src.Close() }

// take sorts bytes read into events.
func (b *eventBody) take(p []byte) {
	for len(p) > 0 && b.err == nil {
		seg := p
		i := bytes.IndexByte(p, '\n')
		if i >= 0 {
			seg = p[:i+1]
		}
		p = p[len(seg):]
		content := seg
		if i >= 0 {
			content = seg[:i]
		}
		blank := i >= 0 && (b.lineLen+len(content) == 0 ||
			(b.lineLen+len(content) == 1 && (b.lineCR || (len(content) == 1 && content[0] == '\r'))))
		if len(content) > 0 {
			b.lineCR = b.lineLen == 0 && len(content) == 1 && content[0] == '\r'
		}
		b.lineLen += len(content)
		if i >= 0 {
			b.lineLen, b.lineCR = 0, false
		}
		if blank {
			if b.skip == "" {
				b.buf = append(b.buf, seg...)
			}
			b.ended()
			continue
		}
		b.follow(seg, i >= 0)
		if b.skip != "" {
			continue
		}
		b.buf = append(b.buf, seg...)
		switch what, n := b.top.Items(); {
		case int64(len(b.buf)-b.out) > b.t.Limit:
			b.startSkip(TooLargeMessage(b.t.Limit))
		case b.top.Listing() && n > b.t.Items:
			b.startSkip(ListMessage(what, b.t.Items))
		}
	}
}

// follow feeds a piece of a line of the current event to the follower: the data lines'
// contents; whatever else is not looked at.
func (b *eventBody) follow(seg []byte, ends bool) {
	if b.kind == 0 {
		take := min(6-len(b.head), len(seg))
		b.head = append(b.head, seg[:take]...)
		seg = seg[take:]
		if len(b.head) < 6 && !ends {
			return
		}
		if rest, ok := bytes.CutPrefix(b.head, []byte("data:")); ok {
			b.kind = 1
			b.top.Feed(bytes.TrimPrefix(rest, []byte(" ")))
		} else {
			b.kind = 2
		}
		b.head = b.head[:0]
	}
	if b.kind == 1 {
		b.top.Feed(seg)
	}
	if ends {
		b.kind = 0
		b.top.step('\n') // data lines join with a newline
	}
}

// startSkip drops the event being read, over a bound (why says which). On the stream of a
// request that request fails at once and the stream ends; elsewhere the rest of the event is
// read without being kept, and followed.
func (b *eventBody) startSkip(why string) {
	b.buf = b.buf[:b.out]
	if id, ok := requestID(b.req); ok {
		b.emit(ErrorResponse(id, why))
		b.err = io.EOF
		b.src.Close() // the rest is never read
		return
	}
	b.skip = why
}

// ended ends the current event: a kept one is handed on; in place of a skipped one that
// answered a request an error is handed on, anything else skipped is dropped.
func (b *eventBody) ended() {
	switch id, ok := b.top.Response(); {
	case b.skip == "":
		b.out = len(b.buf)
	case ok:
		b.emit(ErrorResponse(id, b.skip))
	default:
		Dropped(b.t.Log, &b.top, b.skip)
	}
	b.skip, b.top, b.head, b.kind = "", Top{}, b.head[:0], 0
}

// emit hands on an event holding msg (an error standing in for an answer over a bound).
func (b *eventBody) emit(msg []byte) {
	b.buf = append(b.buf, "event: message\ndata: "...)
	b.buf = append(b.buf, msg...)
	b.buf = append(b.buf, "\n\n"...)
	b.out = len(b.buf)
}
