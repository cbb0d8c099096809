package conn

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
)

// scrubber keeps a connection's secret values (what ${VAR} references expanded to in a URL,
// a header, a command line or an environment) out of the errors and log lines it writes.
type scrubber struct {
	server string // the server's name, which errors for the agent carry (callError)

	mu     sync.Mutex
	values []string
}

// add records values that must never appear in errors or logs.
func (s *scrubber) add(values []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, v := range values {
		if len(v) >= 3 && !slices.Contains(s.values, v) {
			s.values = append(s.values, v)
		}
	}
}

// scrub removes secret values from a message and bounds its length.
func (s *scrubber) scrub(msg string) string {
	msg = s.redact(msg)
	if len(msg) > v1alpha1.MaxErrorLength {
		msg = msg[:v1alpha1.MaxErrorLength-3] + "..."
	}
	return msg
}

// redact replaces the secret values in msg.
func (s *scrubber) redact(msg string) string {
	s.mu.Lock()
	values := s.values
	s.mu.Unlock()
	for _, v := range values {
		msg = strings.ReplaceAll(msg, v, "[redacted]")
	}
	return msg
}

// callError names the server and scrubs secret values (a URL or header value may appear in
// a transport error) from an error that goes back to the agent; errors.Is still sees the cause.
func (s *scrubber) callError(err error) error {
	se := &scrubbedError{msg: fmt.Sprintf("MCP server %q: %s", s.server, s.scrub(err.Error())), err: err}
	if answer := (*jsonrpc.Error)(nil); errors.As(err, &answer) {
		se.answer = &jsonrpc.Error{Code: answer.Code, Message: s.redact(answer.Message)}
		if data := json.RawMessage(s.redact(string(answer.Data))); len(data) > 0 && json.Valid(data) {
			se.answer.Data = data // else a secret was part of a token: no data rather than a broken one
		}
	}
	return se
}

type scrubbedError struct {
	msg    string
	err    error
	answer *jsonrpc.Error // the server's own answer, when it answered with a JSON-RPC error
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.err }

// UpstreamError is the JSON-RPC error a server answered a request with (code, message and data
// as it sent them, with the connection's secret values redacted), or false when err is not
// one: the gateway's own failure (the server is down, the call timed out).
func UpstreamError(err error) (*jsonrpc.Error, bool) {
	var se *scrubbedError
	if errors.As(err, &se) && se.answer != nil {
		return se.answer, true
	}
	return nil, false
}
