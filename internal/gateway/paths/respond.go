package paths

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/gateway/access"
)

// How the gateway answers a session for what failed: the one mapping from errors to the
// JSON-RPC errors, failing tool results and HTTP statuses it writes, whichever path the
// request took.

// failureOf is a session's answer for a request that failed with err: a JSON-RPC error, or
// (tool, a tools/call) the text of a failing tool's result. gaveUp: the session's request
// ended first (its context's error).
//
//   - A resumption the gateway refuses (*inputError) is its invalid-params error.
//   - A forwarded call whose event stream is under way when Forward answers what retry would
//     carry the typed way is a failing tool saying why: the typed path cannot answer it then.
//   - The server's own JSON-RPC error (conn.UpstreamError), or the error for an item the
//     session may not use or the server withholds, is the session's as it is, unless the
//     session gave up.
//   - The gateway's own failures (a server down, a timeout, a bound) are a failing tool,
//     named in its result, as any failing tool is; for another method, a JSON-RPC error
//     with the code of the error it wraps, if any, else an internal error.
//   - A request the session gave up on is an internal error saying so, but for a server
//     that is unavailable, which the session is told whatever it did.
func failureOf(err error, tool, gaveUp bool) (*jsonrpc.Error, string) {
	var refused *inputError
	switch {
	case errors.As(err, &refused):
		return refused.err, ""
	case tool && errors.Is(err, conn.ErrAsksInput):
		return nil, "projectmcp: the server asks for input after reporting progress; call again without a progress token"
	case tool && (errors.Is(err, conn.ErrOtherRevision) || errors.Is(err, conn.ErrNotRaw)):
		return nil, "projectmcp: the server changed protocol revision during the call; call again"
	}
	if rpcErr := rpcErrorOf(err); rpcErr != nil && !gaveUp {
		return rpcErr, ""
	}
	unavailable := errors.Is(err, conn.ErrUnavailable)
	switch {
	case tool && (unavailable || !gaveUp):
		return nil, err.Error()
	case gaveUp && !unavailable:
		return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "request cancelled: " + err.Error()}, ""
	}
	return protocolError(err), ""
}

// RequestError is the JSON-RPC error a typed handler of a method other than tools/call
// returns for err (failureOf).
func RequestError(ctx interface{ Err() error }, err error) error {
	rpcErr, _ := failureOf(err, false, ctx.Err() != nil)
	return rpcErr
}

// protocolError is the JSON-RPC error for a failed request: the upstream's own when it
// answered with one (so "not found" stays "not found"), else one with the code of a JSON-RPC
// error err wraps, or an internal error; the message names the server and carries no secret
// (conn scrubs).
func protocolError(err error) *jsonrpc.Error {
	if rpcErr := rpcErrorOf(err); rpcErr != nil {
		return rpcErr
	}
	code := int64(jsonrpc.CodeInternalError)
	if own := (*jsonrpc.Error)(nil); errors.As(err, &own) {
		code = own.Code
	}
	return &jsonrpc.Error{Code: code, Message: err.Error()}
}

// rpcErrorOf is the JSON-RPC error a session gets for err when the server answered with one:
// the server's own answer as it gave it (code, message, data; conn.UpstreamError), or the
// error for a tool its filter withholds; nil for the gateway's own failures (a server down, a
// timeout, a bound), which a tool call reports as a failing tool naming the server.
func rpcErrorOf(err error) *jsonrpc.Error {
	if wire, ok := conn.UpstreamError(err); ok {
		return wire
	}
	if w := (*withheldTool)(nil); errors.As(err, &w) {
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: w.Error()}
	}
	if d := (*access.DeniedItem)(nil); errors.As(err, &d) {
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: d.Error()}
	}
	return nil
}

// withheldTool is a call on a tool the server's filter withholds, answered as the SDK's server
// answers a call on a tool it does not have.
type withheldTool struct{ name string }

func (w *withheldTool) Error() string { return fmt.Sprintf("unknown tool %q", w.name) }

func errorResult(msg string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: msg}}}
}

// ownResult is a tool result the gateway makes (a failing tool saying why), encoded for the
// session's revision: a 2026-07-28 result names its resultType, as every result of that
// revision does.
func ownResult(msg string, newest bool) json.RawMessage {
	res, _ := json.Marshal(errorResult(msg))
	if newest {
		res = append([]byte(`{"resultType":"complete",`), res[1:]...)
	}
	return res
}

// writeError writes a JSON-RPC error response. A 2026-07-28 session gets it with the HTTP
// status the revision gives its code when it is not an event of a stream (SEP-2575), as the
// SDK's server writes it.
func writeError(w http.ResponseWriter, stream *sseWriter, id json.RawMessage, rpcErr *jsonrpc.Error, stateless bool) {
	if status := errorStatus(rpcErr.Code); stateless && stream == nil && status != 0 {
		w.WriteHeader(status)
	}
	writeResponse(w, stream, id, nil, rpcErr)
}

// errorStatus is the HTTP status SEP-2575 gives a JSON-RPC error's code (0: 200, the default).
func errorStatus(code int64) int {
	switch code {
	case jsonrpc.CodeMethodNotFound:
		return http.StatusNotFound
	case jsonrpc.CodeInvalidParams, mcp.CodeUnsupportedProtocolVersion, mcp.CodeMissingRequiredClientCapabilities:
		return http.StatusBadRequest
	}
	return 0
}

// writeResponse writes a JSON-RPC response with the result as the server sent it: as the last
// event of stream when the response is one, else as a JSON body.
func writeResponse(w http.ResponseWriter, stream *sseWriter, id json.RawMessage, result json.RawMessage, rpcErr *jsonrpc.Error) {
	buf := encodeResponse(id, result, rpcErr)
	if stream != nil {
		stream.answer(id, buf)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(buf)))
	_, _ = w.Write(buf)
}

// encodeResponse is a JSON-RPC response to id: the result as it is, or the error.
func encodeResponse(id json.RawMessage, result json.RawMessage, rpcErr *jsonrpc.Error) []byte {
	buf := make([]byte, 0, len(result)+len(id)+40)
	buf = append(buf, `{"jsonrpc":"2.0","id":`...)
	buf = append(buf, id...)
	if rpcErr != nil {
		e, _ := json.Marshal(rpcErr)
		buf = append(buf, `,"error":`...)
		buf = append(buf, e...)
	} else {
		buf = append(buf, `,"result":`...)
		buf = append(buf, result...)
	}
	return append(buf, '}')
}

// Refuse answers a request with an error status; 429 and 503 say when to retry.
func Refuse(w http.ResponseWriter, msg string, status int) {
	if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	http.Error(w, msg, status)
}

// NotFound answers a request for a session the caller does not own, as the SDK answers one
// for a session that does not exist.
func NotFound(w http.ResponseWriter) {
	http.Error(w, "session not found", http.StatusNotFound)
}
