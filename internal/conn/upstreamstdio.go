package conn

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/internal/bound"
	"github.com/dsh-dev/projectmcp/internal/jsonrpcwire"
)

// stdioUpstream is a stdio session's upstream. The server's stdin is shared with the SDK
// client (stdin, a locked writer); the responses to forwarded requests are taken out of the
// server's output before the SDK's stdio connection decodes it (it would decode every line
// twice, with a 32 KiB buffer each time): relay reads the server's stdout line by line, hands
// a response to a forwarded request to its caller with the result as received, and passes
// every other line on unchanged to the SDK, which keeps its own framing rules (batches).
//
// Every line, forwarded or not, is held to MaxMessageBytes here, and a list result to
// MaxListItems items: a line over either is read to its end without being kept, and only its
// top level is followed (bound.Top), to learn whose request it answered. That request alone
// fails, with an error naming the bound (a forwarded request's caller is told directly; the
// SDK gets an error response in place of the answer); any other message over the bound is
// dropped. The connection goes on.
type stdioUpstream struct {
	upstreamBase
	resp  *responder // answers the server's sampling and elicitation requests (answerAsked)
	bound int64      // MaxMessageBytes
	items int        // MaxListItems
	log   logr.Logger
	stdin *lockedWriter

	mu      sync.Mutex
	pending map[string]chan *jsonrpc.Response // forwarded requests waiting, by id
	err     error                             // set once the server's output has ended: the connection is gone
}

// split returns the transport the SDK connects through: t with its output split first (relay)
// and its input shared with forwarded requests.
func (u *stdioUpstream) split(t *mcp.IOTransport) *mcp.IOTransport {
	u.stdin = &lockedWriter{w: t.Writer, up: u}
	pr, pw := io.Pipe()
	go u.relay(t.Reader, pw) // ends when the server's output ends or the SDK side closes
	// No line longer than the bound reaches the SDK; its own (smaller) default bound would
	// fail the whole connection on a line the bound allows.
	sdkLimit := bound.ForSDK(u.limit())
	return &mcp.IOTransport{Reader: pr, Writer: u.stdin, MaxLineLength: sdkLimit}
}

func (u *stdioUpstream) ready(s *mcp.ClientSession) { u.agreed(s.InitializeResult().ProtocolVersion) }

// takes: a stdio session takes forwarded requests from the start.
func (u *stdioUpstream) takes() bool { return true }

// probedByRelist: a stdio server is probed as on any revision (a local round trip).
func (u *stdioUpstream) probedByRelist() bool { return false }

// toolHeaders: stdio has no headers.
func (u *stdioUpstream) toolHeaders() bool { return false }

// limit is the bound on one message from the server.
func (u *stdioUpstream) limit() int64 { return u.bound }

// lockedWriter is the server's stdin, shared by the SDK client and forwarded requests: each
// Write is one whole message, and no two interleave.
type lockedWriter struct {
	mu sync.Mutex
	w  io.WriteCloser
	up *stdioUpstream
}

// Write is the SDK client's: its first request after the handshake gives the session's _meta
// members (noteMeta).
func (l *lockedWriter) Write(p []byte) (int, error) {
	if l.up.meta.Load() == nil {
		l.up.noteMeta(p)
	}
	return l.write(p)
}

func (l *lockedWriter) write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) Close() error { return l.w.Close() }

func (u *stdioUpstream) call(ctx context.Context, method string, members, meta []byte) (json.RawMessage, error) {
	id := u.nextID()
	p := u.params(ctx, members, meta)
	ch := make(chan *jsonrpc.Response, 1)
	u.mu.Lock()
	if u.err != nil {
		err := u.err
		u.mu.Unlock()
		return nil, err
	}
	u.pending[id] = ch
	u.mu.Unlock()
	line := append(jsonrpcwire.Request(id, method, p), '\n')
	if _, err := u.stdin.write(line); err != nil {
		u.forget(id)
		return nil, fmt.Errorf("%w: writing to the server: %w", mcp.ErrConnectionClosed, err)
	}
	select {
	case resp, ok := <-ch:
		if !ok {
			u.mu.Lock()
			err := u.err
			u.mu.Unlock()
			return nil, err
		}
		if resp.Error != nil {
			return nil, resp.Error
		}
		if len(resp.Result) == 0 {
			return nil, errors.New("the server's response has neither result nor error")
		}
		return resp.Result, nil
	case <-ctx.Done():
		u.forget(id)
		u.cancel(id, ctx.Err())
		return nil, context.Cause(ctx)
	}
}

func (u *stdioUpstream) forget(id string) {
	u.mu.Lock()
	delete(u.pending, id)
	u.mu.Unlock()
}

// cancel tells the server a forwarded request is abandoned, as the SDK client does for its own.
func (u *stdioUpstream) cancel(id string, why error) {
	_, _ = u.stdin.write(append(jsonrpcwire.Notification("notifications/cancelled", cancelParams(id, why)), '\n'))
}

// cancelParams are the params of notifications/cancelled for request id.
func cancelParams(id string, why error) []byte {
	p, _ := json.Marshal(map[string]any{"requestId": id, "reason": why.Error()})
	return p
}

func (u *stdioUpstream) deliver(id string, resp *jsonrpc.Response) {
	u.mu.Lock()
	ch := u.pending[id]
	delete(u.pending, id)
	u.mu.Unlock()
	if ch != nil {
		ch <- resp // buffered: never blocks the reader
	}
	// A response nobody waits for (the request was cancelled, or never sent) is dropped.
}

// fail ends every forwarded request waiting: the server's output has ended.
func (u *stdioUpstream) fail(err error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.err == nil {
		u.err = fmt.Errorf("%w: %w", mcp.ErrConnectionClosed, err)
	}
	for id, ch := range u.pending {
		close(ch)
		delete(u.pending, id)
	}
}

// relay copies the server's output to the SDK's connection, minus the responses to forwarded
// requests.
func (u *stdioUpstream) relay(out io.ReadCloser, sdk *io.PipeWriter) {
	defer out.Close()
	r := bufio.NewReaderSize(out, 64<<10)
	marker := []byte(`"` + forwardIDPrefix)
	for {
		line, err := r.ReadSlice('\n')
		var werr error
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			err, werr = u.relayLong(r, line, sdk)
		case err != nil && len(line) == 0:
		case bytes.Contains(line, marker) && u.divert(line):
		case asks(line) && u.answerAsked(line):
		default:
			_, werr = sdk.Write(u.checked(line))
		}
		if werr != nil {
			return // the SDK side closed
		}
		if err != nil { // the output ended (a last line without a newline was passed on)
			u.fail(err)
			sdk.CloseWithError(err)
			return
		}
	}
}

// relayLong handles a line longer than the reader's buffer: collected up to the bound and then
// handled as any line. It is followed as it comes (bound.Top): past the bound, or once it is a
// list result holding more items than the bound, it is read to its end without being kept
// (oversized). It returns the error that ended reading, if any, and the error of writing to
// the SDK.
func (u *stdioUpstream) relayLong(r *bufio.Reader, first []byte, sdk io.Writer) (readErr, writeErr error) {
	limit, items := u.limit(), u.items
	var top bound.Top
	top.Feed(first)
	line := append(make([]byte, 0, 2*len(first)), first...)
	for {
		more, err := r.ReadSlice('\n')
		top.Feed(more)
		why := ""
		switch what, n := top.Items(); {
		case int64(len(line)+len(more)) > limit:
			why = bound.TooLargeMessage(limit)
		case top.Listing() && n > items:
			why = bound.ListMessage(what, items)
		}
		if why != "" {
			for errors.Is(err, bufio.ErrBufferFull) {
				more, err = r.ReadSlice('\n')
				top.Feed(more)
			}
			return err, u.oversized(&top, why, sdk)
		}
		line = append(line, more...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if !u.divert(line) {
			if _, werr := sdk.Write(line); werr != nil {
				return err, werr
			}
		}
		return err, nil
	}
}

// checked is a line for the SDK, or an error in its place when it is a list result holding
// more items than the bound (the SDK would decode them all first).
func (u *stdioUpstream) checked(line []byte) []byte {
	if answer := bound.OverList(line, u.items); answer != nil {
		return append(answer, '\n')
	}
	return line
}

// oversized answers for a message over a bound (why says which) that was read without being
// kept: the request it answers fails; anything else is dropped (and logged, without its
// content).
func (u *stdioUpstream) oversized(top *bound.Top, why string, sdk io.Writer) error {
	id, ok := top.Response()
	var sid string
	if ok && json.Unmarshal(id, &sid) == nil && strings.HasPrefix(sid, forwardIDPrefix) {
		u.deliver(sid, &jsonrpc.Response{Error: &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: why}})
		return nil
	}
	if ok {
		_, err := sdk.Write(append(bound.ErrorResponse(id, why), '\n'))
		return err
	}
	bound.Dropped(u.log, top, why)
	return nil
}

// asks reports whether line may be a server's sampling or elicitation request (most lines are
// not, and are not decoded for it).
func asks(line []byte) bool {
	return bytes.Contains(line, []byte(`"elicitation/create"`)) || bytes.Contains(line, []byte(`"sampling/createMessage"`))
}

// answerAsked answers a server's sampling or elicitation request itself (serverRequest, as on
// an HTTP call's stream), in place of the SDK's client: that one would judge the session's
// answer first (it holds an elicitation's content to the requested schema and fills in its
// defaults), and the answer is the server's to judge, as it is for a direct client. The
// answer goes back on stdin; the connection's end (c.ctx) and ServerRequestTimeout bound it.
func (u *stdioUpstream) answerAsked(line []byte) bool {
	var r struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	if json.Unmarshal(line, &r) != nil || len(r.ID) == 0 || (r.Method != "elicitation/create" && r.Method != "sampling/createMessage") {
		return false
	}
	go func() {
		result, rpcErr := u.resp.serverRequest(u.resp.ctx, r.Method, r.Params)
		_, _ = u.stdin.write(append(jsonrpcwire.ResponseTo(r.ID, result, rpcErr), '\n'))
	}()
	return true
}

// divert delivers line when it is the response to a forwarded request.
func (u *stdioUpstream) divert(line []byte) bool {
	var r upstreamResponse
	if json.Unmarshal(line, &r) != nil || r.Method != "" {
		return false
	}
	var id string
	if json.Unmarshal(r.ID, &id) != nil || len(id) <= len(forwardIDPrefix) || id[:len(forwardIDPrefix)] != forwardIDPrefix {
		return false
	}
	resp := &jsonrpc.Response{Result: r.Result}
	if r.Error != nil { // Response.Error is an interface: never a typed nil
		resp.Error = r.Error
	}
	u.deliver(id, resp)
	return true
}
