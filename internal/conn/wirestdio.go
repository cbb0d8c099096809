package conn

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// On stdio the responses to raw requests are taken out of the server's output before the
// SDK's stdio connection decodes it (it would decode every line twice, with a 32 KiB buffer
// each time): split reads the server's stdout line by line, hands a response to a raw request
// to its caller with the result still raw, and passes every other line on unchanged to the
// SDK, which keeps its own framing rules (batches, line limits).

// splitStdio returns the transport the SDK connects through: t with its output split first.
func splitStdio(w *wire, t *mcp.IOTransport) *mcp.IOTransport {
	pr, pw := io.Pipe()
	go w.split(t.Reader, pw) // ends when the server's output ends or the SDK side closes
	return &mcp.IOTransport{Reader: pr, Writer: t.Writer, MaxLineLength: t.MaxLineLength}
}

// split copies the server's output to the SDK's connection, minus the raw responses.
func (w *wire) split(out io.ReadCloser, sdk *io.PipeWriter) {
	defer out.Close()
	r := bufio.NewReaderSize(out, 64<<10)
	marker := []byte(`"` + wireIDPrefix)
	for {
		line, err := r.ReadSlice('\n')
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			// A long line: a raw response is collected up to the bound, anything else is
			// streamed on as it comes.
			if bytes.Contains(line, marker) {
				if werr := w.splitLong(r, line, sdk); werr != nil {
					return
				}
				continue
			}
			if _, werr := sdk.Write(line); werr != nil {
				return
			}
			continue
		case err != nil && len(line) == 0:
			w.fail(err)
			sdk.CloseWithError(err)
			return
		}
		if bytes.Contains(line, marker) && w.divert(line) {
			continue
		}
		if _, werr := sdk.Write(line); werr != nil {
			return // the SDK side closed
		}
		if err != nil { // the last line had no newline
			w.fail(err)
			sdk.CloseWithError(err)
			return
		}
	}
}

// splitLong collects a long line that may be a raw response, up to MaxMessageBytes; past it,
// the response's caller gets an error naming the bound and the rest of the line is dropped.
func (w *wire) splitLong(r *bufio.Reader, first []byte, sdk *io.PipeWriter) error {
	line := append([]byte(nil), first...)
	for {
		more, err := r.ReadSlice('\n')
		if int64(len(line)+len(more)) > MaxMessageBytes {
			id := rawID(line)
			for errors.Is(err, bufio.ErrBufferFull) { // drop the rest of the line
				_, err = r.ReadSlice('\n')
			}
			if id != "" {
				w.deliver(id, &jsonrpc.Response{Error: &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: tooLarge().Error()}})
			}
			return err
		}
		line = append(line, more...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if !w.divert(line) {
			if _, werr := sdk.Write(line); werr != nil {
				return werr
			}
		}
		return err
	}
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

// rawID finds the raw request id at the start of a message too large to decode.
func rawID(prefix []byte) string {
	i := bytes.Index(prefix, []byte(`"id":"`+wireIDPrefix))
	if i < 0 {
		return ""
	}
	rest := prefix[i+len(`"id":"`):]
	end := bytes.IndexByte(rest, '"')
	if end < 0 {
		return ""
	}
	return string(rest[:end])
}
