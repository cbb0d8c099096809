package conn

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// MaxMessageBytes bounds one message a server sends in answer to a forwarded request: a
// result larger than this fails that request (the agent gets an error naming the limit)
// instead of being read into the controller's memory, which every project shares.
var MaxMessageBytes int64 = 64 << 20

// direct lets raw requests be POSTed by the wire itself once the session agreed on a
// 2025-11-25 (or older) revision over streamable HTTP. The SDK's client would read the
// response on a goroutine of its own, decode it into a message and pass it through two
// channels before the caller sees it; reading it in the caller's goroutine saves those hand-
// offs and the decode. 2026-07-28 requests stay on the SDK's transport, which sets the
// per-request headers that revision defines.
func (w *wire) direct(version string) {
	if w.http == nil || version == "" || version >= "2026-07-28" {
		return
	}
	w.version.Store(&version)
}

// post sends one raw request on its own POST and reads its response: JSON, or an event
// stream whose other messages (the server's own requests, notifications) go to the SDK
// client as if they had come on its own streams.
func (w *wire) post(ctx context.Context, version, id, method string, params json.RawMessage) (json.RawMessage, error) {
	body := make([]byte, 0, len(params)+len(id)+len(method)+48)
	body = append(body, `{"jsonrpc":"2.0","id":`...)
	body = appendQuoted(body, id)
	body = append(body, `,"method":`...)
	body = appendQuoted(body, method)
	body = append(body, `,"params":`...)
	body = append(body, params...)
	body = append(body, '}')
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", version)
	sid := w.inner.SessionID()
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
	}
	resp, err := w.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			w.cancel(id, ctx.Err())
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("sending %q: %w", method, err)
	}
	defer resp.Body.Close()
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch {
	case resp.StatusCode == http.StatusNotFound && sid != "":
		return nil, fmt.Errorf("sending %q: the server no longer knows the session: %w", method, mcp.ErrSessionMissing)
	case resp.StatusCode < 200 || resp.StatusCode >= 300:
		// A JSON-RPC error in the body is the server's answer; any other body is not
		// repeated (it may be anything, and errors reach status and the agent).
		if ct == "application/json" {
			if r, err := readResponse(io.LimitReader(resp.Body, 1<<20), id); err == nil && r.Error != nil {
				return nil, r.Error
			}
		}
		return nil, fmt.Errorf("sending %q: the server answered HTTP %d (%s)", method, resp.StatusCode, orNone(ct))
	case ct == "application/json":
		r, err := readResponse(limited(resp.Body), id)
		if err != nil {
			return nil, err
		}
		return r.result()
	case ct == "text/event-stream":
		res, err := w.readStream(ctx, resp.Body, id)
		if err == nil {
			// The server ends the stream right after the response; reading to its end lets
			// the HTTP client keep the TCP connection for the next request.
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainBytes))
		}
		return res, err
	}
	return nil, fmt.Errorf("sending %q: the server answered with content type %s, not JSON or an event stream", method, orNone(ct))
}

// wireResponse is a response as the wire reads it: the result stays raw.
type wireResponse struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Result json.RawMessage `json:"result"`
	Error  *jsonrpc.Error  `json:"error"`
}

func (r *wireResponse) result() (json.RawMessage, error) {
	if r.Error != nil {
		return nil, r.Error
	}
	if len(r.Result) == 0 {
		return nil, errors.New("the server's response has neither result nor error")
	}
	return r.Result, nil
}

// readResponse reads one JSON response, which must answer id.
func readResponse(r io.Reader, id string) (*wireResponse, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > MaxMessageBytes {
		return nil, tooLarge()
	}
	var resp wireResponse
	if err := json.Unmarshal(data, &resp); err != nil {
		return nil, fmt.Errorf("the server's response is not JSON-RPC: %v", err)
	}
	if !sameID(resp.ID, id) {
		return nil, fmt.Errorf("the server answered a request it was not sent (id %s)", resp.ID)
	}
	return &resp, nil
}

// readStream reads an event stream until the response to id; every other message goes to
// the SDK client.
func (w *wire) readStream(ctx context.Context, body io.Reader, id string) (json.RawMessage, error) {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 4096), int(min(MaxMessageBytes, 1<<31-1)))
	var data []byte
	for {
		more := sc.Scan()
		line := sc.Bytes()
		if more && len(line) > 0 {
			if rest, ok := bytes.CutPrefix(line, []byte("data:")); ok {
				rest = bytes.TrimPrefix(rest, []byte(" "))
				if len(data) > 0 {
					data = append(data, '\n')
				}
				data = append(data, rest...)
			}
			continue // event:, id:, retry: and comments need nothing here
		}
		if len(data) > 0 { // an event ends at a blank line (or the end of the stream)
			if res, done, err := w.event(ctx, data, id); done {
				return res, err
			}
			data = data[:0]
		}
		if !more {
			break
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, tooLarge()
		}
		if ctx.Err() != nil {
			w.cancel(id, ctx.Err())
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("reading the server's event stream: %w", err)
	}
	return nil, fmt.Errorf("the server's event stream ended without a response: %w", mcp.ErrConnectionClosed)
}

// event handles one event of a raw request's stream; done when it was the response.
func (w *wire) event(ctx context.Context, data []byte, id string) (json.RawMessage, bool, error) {
	var r wireResponse
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, true, fmt.Errorf("the server sent an event that is not JSON-RPC: %v", err)
	}
	if r.Method == "" && sameID(r.ID, id) {
		res, err := r.result()
		return res, true, err
	}
	msg, err := jsonrpc.DecodeMessage(data)
	if err != nil {
		return nil, true, fmt.Errorf("the server sent an event that is not JSON-RPC: %v", err)
	}
	select {
	case w.injected <- msg:
	case <-ctx.Done():
	case <-w.stop:
	}
	return nil, false, nil
}

func sameID(raw json.RawMessage, id string) bool {
	var s string
	return json.Unmarshal(raw, &s) == nil && s == id
}

func appendQuoted(dst []byte, s string) []byte {
	q, _ := json.Marshal(s)
	return append(dst, q...)
}

// drainBytes bounds what is read after a response to let its connection be reused.
const drainBytes = 64 << 10

func limited(r io.Reader) io.Reader { return io.LimitReader(r, MaxMessageBytes+1) }

func tooLarge() error {
	return fmt.Errorf("the server's answer exceeds %d MiB, the gateway's bound on one message", MaxMessageBytes>>20)
}

func orNone(ct string) string {
	if ct == "" {
		return "no content type"
	}
	return ct
}
