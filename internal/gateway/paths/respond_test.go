package paths

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/internal/conn"
)

// failureOf is the one mapping of a failed request to the session's answer, for either path.
func TestFailureOf(t *testing.T) {
	refused := invalidInput("the requestState is unknown")
	withheld := &withheldTool{"a__x"}
	unavailable := fmt.Errorf("%w: MCP server %q is not available to this session", conn.ErrUnavailable, "a")
	down := errors.New(`MCP server "a" did not answer within 1s (the gateway's --call-timeout)`)
	wrapped := fmt.Errorf("mount: %w", &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "too many"})
	internal := func(msg string) *jsonrpc.Error { return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: msg} }
	for _, c := range []struct {
		name         string
		err          error
		tool, gaveUp bool
		rpc          *jsonrpc.Error
		text         string
	}{
		{"a refused resumption", refused, true, false, refused.err, ""},
		{"a refused resumption, given up", refused, false, true, refused.err, ""},
		{"input asked after progress", conn.ErrAsksInput, true, false, nil, "projectmcp: the server asks for input after reporting progress; call again without a progress token"},
		{"another revision after progress", conn.ErrOtherRevision, true, false, nil, "projectmcp: the server changed protocol revision during the call; call again"},
		{"typed only after progress", conn.ErrNotRaw, true, false, nil, "projectmcp: the server changed protocol revision during the call; call again"},
		{"a withheld tool", withheld, true, false, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: withheld.Error()}, ""},
		{"a withheld tool, given up", withheld, true, true, internal("request cancelled: " + withheld.Error()), ""},
		{"a server down: a failing tool", unavailable, true, false, nil, unavailable.Error()},
		{"a server down, given up: still a failing tool", unavailable, true, true, nil, unavailable.Error()},
		{"a timeout: a failing tool", down, true, false, nil, down.Error()},
		{"a call given up", down, true, true, internal("request cancelled: " + down.Error()), ""},
		{"a prompt's server down", unavailable, false, false, internal(unavailable.Error()), ""},
		{"a prompt's server down, given up", unavailable, false, true, internal(unavailable.Error()), ""},
		{"a prompt timing out", down, false, false, internal(down.Error()), ""},
		{"a prompt given up", down, false, true, internal("request cancelled: " + down.Error()), ""},
		{"a wrapped JSON-RPC error keeps its code", wrapped, false, false, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: wrapped.Error()}, ""},
		{"a read of a withheld item", withheld, false, false, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: withheld.Error()}, ""},
	} {
		rpc, text := failureOf(c.err, c.tool, c.gaveUp)
		if text != c.text || (rpc == nil) != (c.rpc == nil) || (rpc != nil && (rpc.Code != c.rpc.Code || rpc.Message != c.rpc.Message)) {
			t.Errorf("%s: failureOf = %v, %q; want %v, %q", c.name, rpc, text, c.rpc, c.text)
		}
	}
}

// A 2026-07-28 session gets a JSON-RPC error with the HTTP status SEP-2575 gives its code,
// unless it is an event of a stream; a 2025-11-25 session always with 200.
func TestWriteErrorStatus(t *testing.T) {
	for _, c := range []struct {
		code      int64
		stateless bool
		status    int
	}{
		{jsonrpc.CodeMethodNotFound, true, http.StatusNotFound},
		{jsonrpc.CodeInvalidParams, true, http.StatusBadRequest},
		{mcp.CodeUnsupportedProtocolVersion, true, http.StatusBadRequest},
		{mcp.CodeMissingRequiredClientCapabilities, true, http.StatusBadRequest},
		{jsonrpc.CodeInternalError, true, http.StatusOK},
		{jsonrpc.CodeInvalidParams, false, http.StatusOK},
	} {
		w := httptest.NewRecorder()
		writeError(w, nil, []byte(`1`), &jsonrpc.Error{Code: c.code, Message: "m"}, c.stateless)
		if w.Code != c.status {
			t.Errorf("code %d (stateless %v): status %d, want %d", c.code, c.stateless, w.Code, c.status)
		}
		want := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"error":{"code":%d,"message":"m"}}`, c.code)
		if got := w.Body.String(); got != want {
			t.Errorf("body %s, want %s", got, want)
		}
	}
}
