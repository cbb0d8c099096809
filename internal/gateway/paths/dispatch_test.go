package paths

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/metrics"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// A raw result is a tool error when its top-level isError is true, however it is spaced, and
// not when only a nested object says so.
func TestRawIsError(t *testing.T) {
	for res, want := range map[string]bool{
		`{"content":[],"isError":true}`:                                       true,
		`{"isError" : true, "content":[]}`:                                    true,
		`{"content":[],"isError":false}`:                                      false,
		`{"content":[{"type":"text","text":"\"isError\":true"}]}`:             false,
		`{"structuredContent":{"isError":true},"isError":false}`:              false,
		`{"structuredContent":{"isError":true}}`:                              false,
		`{"structuredContent":{"isError":false},"content":[],"isError":true}`: true,
		`{"content":[]}`: false,
	} {
		if got := rawIsError([]byte(res)); got != want {
			t.Errorf("%s: %v, want %v", res, got, want)
		}
		if got := isError(conn.RawResult(res)); got != want {
			t.Errorf("isError(%s): %v, want %v", res, got, want)
		}
	}
	if !isError(&mcp.CallToolResult{IsError: true}) || isError(&mcp.CallToolResult{}) || isError((*mcp.CallToolResult)(nil)) {
		t.Error("a typed result's IsError")
	}
}

func TestOutcomeOf(t *testing.T) {
	live := context.Background()
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range []struct {
		session  context.Context
		err      error
		timedOut bool
		want     metrics.Outcome
	}{
		{live, nil, false, metrics.OK},
		{live, fmt.Errorf("%w: down", conn.ErrUnavailable), false, metrics.Unavailable},
		{live, errors.New("did not answer"), true, metrics.Timeout},
		{gone, context.Canceled, false, metrics.Cancelled},
		{live, errors.New("protocol error"), false, metrics.Error},
	} {
		if got := outcomeOf(c.session, c.err, c.timedOut); got != c.want {
			t.Errorf("%v (timed out %v): %s, want %s", c.err, c.timedOut, got, c.want)
		}
	}
}
