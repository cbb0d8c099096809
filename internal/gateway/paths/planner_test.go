package paths

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/revision"
)

// stateful is the facts of a 2025-11-25 session's request of method that the forward path
// carries; each row of the planner's table changes what it is about.
func stateful(method string) facts {
	return facts{version: "2025-11-25", content: true, mounted: true, sessionVersion: "2025-11-25",
		method: method, id: []byte("7"), params: true, name: "a__echo", objectArgs: true, routed: true, state: true}
}

// stateless is the same for a 2026-07-28 request.
func stateless(method string) facts {
	f := stateful(method)
	f.stateless, f.version, f.sessionVersion, f.mcpMethod, f.identity = true, revision.Stateless.String(), "", method, true
	if forwardedMethods[method].named {
		f.mcpName = f.name
	}
	return f
}

func with(f facts, change func(*facts)) facts {
	change(&f)
	return f
}

// Every row of decide, and each of its fallbacks.
func TestDecide(t *testing.T) {
	for _, c := range []struct {
		name  string
		facts facts
		path  path
		count bool // counted by metrics.FastPath or metrics.RequestPath
	}{
		// Forwarded: every method of the routing table, from either kind of session.
		{"stateful tools/call", stateful("tools/call"), pathForward, true},
		{"stateful prompts/get", stateful("prompts/get"), pathForward, true},
		{"stateful resources/read", stateful("resources/read"), pathForward, true},
		{"stateful completion/complete", stateful("completion/complete"), pathForward, true},
		{"stateful tasks/get", stateful("tasks/get"), pathForward, true},
		{"stateful tasks/result", stateful("tasks/result"), pathForward, true},
		{"stateful tasks/cancel", stateful("tasks/cancel"), pathForward, true},
		{"a task id not the session's", with(stateful("tasks/get"), func(f *facts) { f.taskRefused = true }), pathRefuse, false},
		{"stateless tools/call", stateless("tools/call"), pathForward, true},
		{"stateless prompts/get", stateless("prompts/get"), pathForward, true},
		{"stateless resources/read", stateless("resources/read"), pathForward, true},
		{"stateless completion/complete, no Mcp-Name", with(stateless("completion/complete"), func(f *facts) { f.mcpName = "" }), pathForward, true},
		{"a connection not up yet: forward waits for it", with(stateful("tools/call"), func(f *facts) { f.takes = conn.ErrUnavailable }), pathForward, true},
		{"a string id", with(stateful("tools/call"), func(f *facts) { f.id = []byte(`"a"`) }), pathForward, true},
		{"a string progress token", with(stateful("tools/call"), func(f *facts) { f.token = []byte(`"t"`) }), pathForward, true},
		{"a numeric progress token", with(stateful("tools/call"), func(f *facts) { f.token = []byte(`-1`) }), pathForward, true},
		{"a stateless call with MRTR fields", with(stateless("tools/call"), func(f *facts) { f.mrtr = true }), pathForward, true},

		// A stateless request's headers and envelope.
		{"a newer revision", with(stateless("tools/call"), func(f *facts) { f.version = "2099-01-01" }), pathTyped, false},
		{"Mcp-Method not forwarded", with(stateless("tools/call"), func(f *facts) { f.mcpMethod = "tools/list" }), pathTyped, false},
		{"no Mcp-Name", with(stateless("prompts/get"), func(f *facts) { f.mcpName = "" }), pathTyped, false},
		{"stateless content type", with(stateless("tools/call"), func(f *facts) { f.content = false }), pathTyped, false},
		{"a body of another method", with(stateless("tools/call"), func(f *facts) { f.method = "prompts/get" }), pathTyped, false},
		{"no envelope", with(stateless("tools/call"), func(f *facts) { f.method = "" }), pathTyped, false},
		{"a null id", with(stateless("tools/call"), func(f *facts) { f.id = []byte("null") }), pathTyped, false},
		{"bad inputResponses", with(stateless("resources/read"), func(f *facts) { f.badInput = true }), pathRefuse, false},

		// A stateful request's session, headers and envelope.
		{"no such session", with(stateful("tools/call"), func(f *facts) { f.mounted = false }), pathTyped, false},
		{"not initialized", with(stateful("tools/call"), func(f *facts) { f.sessionVersion = "" }), pathTyped, false},
		{"a session of the newest revision", with(stateful("tools/call"), func(f *facts) { f.sessionVersion, f.version = revision.Stateless.String(), revision.Stateless.String() }), pathTyped, false},
		{"another version header", with(stateful("tools/call"), func(f *facts) { f.version = "2025-06-18" }), pathTyped, false},
		{"stateful content type", with(stateful("tools/call"), func(f *facts) { f.content = false }), pathTyped, false},
		{"an answer to the gateway's request", with(stateful(""), func(f *facts) { f.answer = true }), pathAnswer, false},
		{"a cancellation of a forwarded call", with(stateful(cancelled), func(f *facts) { f.id, f.cancels = nil, true }), pathCancel, false},
		{"a cancellation of another request", with(stateful(cancelled), func(f *facts) { f.id = []byte("") }), pathTyped, false},
		{"a cancellation with an id", with(stateful(cancelled), func(f *facts) { f.cancels = true }), pathTyped, false},
		{"another method", stateful("tools/list"), pathTyped, false},
		{"a notification of a forwarded method", with(stateful("tools/call"), func(f *facts) { f.id = []byte("") }), pathTyped, false},
		{"an object id", with(stateful("tools/call"), func(f *facts) { f.id = []byte(`{}`) }), pathTyped, false},
		{"an array id", with(stateful("prompts/get"), func(f *facts) { f.id = []byte(`[1]`) }), pathTyped, false},

		// The params, the session as the server sees it, the route.
		{"params the SDK refuses", with(stateful("tools/call"), func(f *facts) { f.params = false }), pathTyped, true},
		{"a stateless _meta the SDK refuses", with(stateless("tools/call"), func(f *facts) { f.identity = false }), pathTyped, true},
		{"Mcp-Name differs", with(stateless("resources/read"), func(f *facts) { f.mcpName = "file:///other" }), pathTyped, true},
		{"a stateless session not mounted yet", with(stateless("tools/call"), func(f *facts) { f.mounted = false }), pathTyped, true},
		{"MRTR fields from a 2025-11-25 session", with(stateful("tools/call"), func(f *facts) { f.mrtr = true }), pathTyped, true},
		{"an object progress token", with(stateful("tools/call"), func(f *facts) { f.token = []byte(`{}`) }), pathTyped, true},
		{"a progress token on a prompt", with(stateful("prompts/get"), func(f *facts) { f.token = []byte(`"t"`) }), pathTyped, true},
		{"a call the gateway holds", with(stateless("tools/call"), func(f *facts) { f.inputState, f.mrtr = true, true }), pathResume, true},
		{"a call the gateway holds, named by another", with(stateless("tools/call"), func(f *facts) { f.inputState, f.mcpName = true, "x" }), pathTyped, true},
		{"a read the gateway holds", with(stateless("resources/read"), func(f *facts) { f.inputState = true }), pathTyped, true},
		{"an unknown tool", with(stateful("tools/call"), func(f *facts) { f.routed = false }), pathTyped, true},
		{"an unknown completion ref", with(stateless("completion/complete"), func(f *facts) { f.routed = false }), pathTyped, true},
		{"Mcp-Param headers", with(stateful("tools/call"), func(f *facts) { f.paramHeaders = true }), pathTyped, true},
		{"arguments not an object", with(stateful("tools/call"), func(f *facts) { f.objectArgs = false }), pathTyped, true},
		{"a prompt ignores objectArgs", with(stateful("prompts/get"), func(f *facts) { f.objectArgs = false }), pathForward, true},
		{"a sealed state that does not open", with(stateless("tools/call"), func(f *facts) { f.state = false }), pathTyped, true},

		// What the connection takes (conn.Takes).
		{"a server of the other revision", with(stateless("tools/call"), func(f *facts) { f.takes = conn.ErrOtherRevision }), pathRevision, true},
		{"a call bridged to a server of the other revision", with(stateless("tools/call"), func(f *facts) { f.takes, f.bridged = conn.ErrOtherRevision, true }), pathForward, true},
		{"MRTR fields to a server of the other revision", with(stateless("tools/call"), func(f *facts) { f.takes, f.bridged, f.mrtr = conn.ErrOtherRevision, true, true }), pathRevision, true},
		{"a prompt from a server of the other revision", with(stateful("prompts/get"), func(f *facts) { f.takes = conn.ErrOtherRevision }), pathRevision, true},
		{"typed requests only", with(stateful("resources/read"), func(f *facts) { f.takes = conn.ErrNotRaw }), pathTyped, true},
		{"a wrapped answer of Takes", with(stateful("tools/call"), func(f *facts) { f.takes = fmt.Errorf("x: %w", conn.ErrNotRaw) }), pathTyped, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := decide(c.facts)
			if got.path != c.path || got.counted != c.count {
				t.Errorf("decide = %q (counted %v, %s), want %q (counted %v)", got.path, got.counted, got.why, c.path, c.count)
			}
			if got.path != pathForward && got.path != pathAnswer && got.path != pathCancel && got.why == "" {
				t.Errorf("no reason for %q", got.path)
			}
		})
	}
}

// Every method of the routing table has its row in TestDecide, forwarded from both kinds of
// session; a method added to the table without one fails here.
func TestRoutingTableRows(t *testing.T) {
	for _, m := range slices.Sorted(maps.Keys(forwardedMethods)) {
		if forwardedMethods[m].route == nil {
			t.Errorf("%s has no route", m)
		}
		for _, f := range []facts{stateful(m), stateless(m)} {
			if got := decide(f); got.path != pathForward {
				t.Errorf("%s (stateless %v): %q (%s), want forwarded", m, f.stateless, got.path, got.why)
			}
		}
	}
}

// The forward plan's fallback: what Forward answers before anything reaches the session, and
// what it answers otherwise.
func TestRetry(t *testing.T) {
	for _, c := range []struct {
		err   error
		path  path
		again bool
	}{
		{conn.ErrOtherRevision, pathRevision, true},
		{conn.ErrNotRaw, pathTyped, true},
		{conn.ErrAsksInput, pathInput, true},
		{fmt.Errorf("wrapped: %w", conn.ErrAsksInput), pathInput, true},
		{nil, "", false},
		{conn.ErrUnavailable, "", false},
		{conn.ErrStreamEnded, "", false},
		{errors.New("other"), "", false},
	} {
		got, again := retry(c.err)
		if got != c.path || again != c.again || retried(c.err) != c.again {
			t.Errorf("retry(%v) = %q, %v; want %q, %v", c.err, got, again, c.path, c.again)
		}
		if again && !got.typed() {
			t.Errorf("retry(%v) = %q, not a typed path", c.err, got)
		}
	}
}

// The revision each kind of forwarded request takes its result in.
func TestRevisionOf(t *testing.T) {
	if acceptsOf(true, true) != conn.AcceptsStateless || acceptsOf(true, false) != conn.AcceptsStateless ||
		acceptsOf(false, true) != conn.AcceptsStateful || acceptsOf(false, false) != conn.AcceptsStatefulOnly {
		t.Error("acceptsOf: wrong revision")
	}
}
