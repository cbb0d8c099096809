package conn

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/internal/jsonrpcwire"
)

// On stdio the responses to raw requests are taken out of the server's output before the
// SDK's stdio connection decodes it (it would decode every line twice, with a 32 KiB buffer
// each time): split reads the server's stdout line by line, hands a response to a raw request
// to its caller with the result still raw, and passes every other line on unchanged to the
// SDK, which keeps its own framing rules (batches).
//
// Every line, raw or not, is held to MaxMessageBytes here, and a list result to MaxListItems
// items: a line over either is read to its end without being kept, and only its top level is
// followed (jsonTop), to learn whose request it answered. That request alone fails, with an
// error naming the bound (a raw request's caller is told directly; the SDK gets an error
// response in place of the answer); any other message over the bound is dropped. The
// connection goes on.

// splitStdio returns the transport the SDK connects through: t with its output split first
// and its input shared with raw requests.
func splitStdio(w *wire, t *mcp.IOTransport) *mcp.IOTransport {
	pr, pw := io.Pipe()
	go w.split(t.Reader, pw) // ends when the server's output ends or the SDK side closes
	// No line longer than the bound reaches the SDK; its own (smaller) default bound would
	// fail the whole connection on a line the bound allows.
	sdkLimit := sdkBound(w.limit())
	return &mcp.IOTransport{Reader: pr, Writer: w.stdin, MaxLineLength: sdkLimit}
}

// split copies the server's output to the SDK's connection, minus the raw responses.
func (w *wire) split(out io.ReadCloser, sdk *io.PipeWriter) {
	defer out.Close()
	r := bufio.NewReaderSize(out, 64<<10)
	marker := []byte(`"` + wireIDPrefix)
	for {
		line, err := r.ReadSlice('\n')
		var werr error
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			err, werr = w.splitLong(r, line, sdk)
		case err != nil && len(line) == 0:
		case bytes.Contains(line, marker) && w.divert(line):
		case asks(line) && w.answerAsked(line):
		default:
			_, werr = sdk.Write(w.checked(line))
		}
		if werr != nil {
			return // the SDK side closed
		}
		if err != nil { // the output ended (a last line without a newline was passed on)
			w.fail(err)
			sdk.CloseWithError(err)
			return
		}
	}
}

// splitLong handles a line longer than the reader's buffer: collected up to the bound and then
// handled as any line. It is followed as it comes (jsonTop): past the bound, or once it is a
// list result holding more items than the bound, it is read to its end without being kept
// (oversized). It returns the error that ended reading, if any, and the error of writing to
// the SDK.
func (w *wire) splitLong(r *bufio.Reader, first []byte, sdk io.Writer) (readErr, writeErr error) {
	limit, items := w.limit(), w.c.opts.MaxListItems
	var top jsonTop
	top.feed(first)
	line := append(make([]byte, 0, 2*len(first)), first...)
	for {
		more, err := r.ReadSlice('\n')
		top.feed(more)
		why := ""
		switch what, n := top.Items(); {
		case int64(len(line)+len(more)) > limit:
			why = tooLargeMessage(limit)
		case top.list != "" && n > items:
			why = listMessage(what, items)
		}
		if why != "" {
			for errors.Is(err, bufio.ErrBufferFull) {
				more, err = r.ReadSlice('\n')
				top.feed(more)
			}
			return err, w.oversized(&top, why, sdk)
		}
		line = append(line, more...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if !w.divert(line) {
			if _, werr := sdk.Write(line); werr != nil {
				return err, werr
			}
		}
		return err, nil
	}
}

// checked is a line for the SDK, or an error in its place when it is a list result holding
// more items than the bound (the SDK would decode them all first).
func (w *wire) checked(line []byte) []byte {
	if answer := overList(line, w.c.opts.MaxListItems); answer != nil {
		return append(answer, '\n')
	}
	return line
}

// oversized answers for a message over a bound (why says which) that was read without being
// kept: the request it answers fails; anything else is dropped (and logged, without its
// content).
func (w *wire) oversized(top *jsonTop, why string, sdk io.Writer) error {
	id, ok := top.Response()
	var raw string
	if ok && json.Unmarshal(id, &raw) == nil && strings.HasPrefix(raw, wireIDPrefix) {
		w.deliver(raw, &jsonrpc.Response{Error: &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: why}})
		return nil
	}
	if ok {
		_, err := sdk.Write(append(errorResponse(id, why), '\n'))
		return err
	}
	w.c.dropped(top, why)
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
func (w *wire) answerAsked(line []byte) bool {
	var r struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	if json.Unmarshal(line, &r) != nil || len(r.ID) == 0 || (r.Method != "elicitation/create" && r.Method != "sampling/createMessage") {
		return false
	}
	go func() {
		result, rpcErr := w.c.serverRequest(w.c.ctx, r.Method, r.Params)
		_, _ = w.stdin.write(append(jsonrpcwire.ResponseTo(r.ID, result, rpcErr), '\n'))
	}()
	return true
}

// divert delivers line when it is the response to a raw request.
func (w *wire) divert(line []byte) bool {
	var r wireResponse
	if json.Unmarshal(line, &r) != nil || r.Method != "" {
		return false
	}
	var id string
	if json.Unmarshal(r.ID, &id) != nil || len(id) <= len(wireIDPrefix) || id[:len(wireIDPrefix)] != wireIDPrefix {
		return false
	}
	resp := &jsonrpc.Response{Result: r.Result}
	if r.Error != nil { // Response.Error is an interface: never a typed nil
		resp.Error = r.Error
	}
	w.deliver(id, resp)
	return true
}
