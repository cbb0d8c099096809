package paths

import (
	"errors"

	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/revision"
)

// The path a session's POST takes through the gateway is decided in one place.
//
// read (forward.go) gathers what matters about the request: its headers, its session's
// record, its JSON-RPC envelope and params, the route of what it names, and whether the
// connection takes a forwarded request of the session's revision ((*conn.Conn).Takes). decide
// reads those facts alone and returns a plan, which serveForward executes without deciding
// again. Two things are known only once a forwarded request is under way: the connection may
// reconnect between the plan and the send (to a server of the other revision, or to one that
// takes typed requests only), and a 2026-07-28 server may answer a 2025-11-25 session's call
// by asking for input. Forward answers those before anything reaches the session, and retry,
// the forward plan's fallback, names the typed path that takes the request then.

// forwardedMethod is a row of the routing table: how the forward path carries one method.
type forwardedMethod struct {
	// tool: tools/call, whose params are a call's (callParams), whose answer may be an event
	// stream (progress, log lines, the server's own requests; resumable), and whose failing
	// server is a failing tool.
	tool bool
	// named: a 2026-07-28 request of the method carries the name or URI its params name in
	// Mcp-Name, which must match them.
	named bool
	// route reads the params as the SDK's types take them (false: they refuse them, and the
	// typed path answers) and routes what they name: it sets in.name, in.target and
	// in.routed, and rewrites in.members for the server (forwardrequest.go).
	route func(p *Paths, in *incoming) bool
}

// forwardedMethods is the routing table: the methods the forward path carries. Any other
// goes the typed path.
var forwardedMethods = map[string]forwardedMethod{
	"tools/call":          {tool: true, named: true, route: routeTool},
	"prompts/get":         {named: true, route: routePrompt},
	"resources/read":      {named: true, route: routeResource},
	"completion/complete": {route: routeCompletion},
	"tasks/get":           {route: routeTask}, // tasks.go: a stateful session's only
	"tasks/result":        {route: routeTask},
	"tasks/cancel":        {route: routeTask},
}

// path is how the gateway carries a request. The values of the counted paths are the path
// label of metrics.FastPath and metrics.RequestPath, which dashboards read: they stay as
// they are.
type path string

const (
	// pathForward: forwarded, sent to the server as JSON-RPC bytes on the session's slot, its
	// answer returned undecoded.
	pathForward path = "raw"
	// The typed paths: the SDK's server decodes the request and its handlers call the server
	// through the SDK's types.
	pathRevision path = "revision" // the server speaks the other revision, which the SDK translates
	pathInput    path = "input"    // a 2026-07-28 server asks a 2025-11-25 session for input: the SDK calls again and asks it
	pathResume   path = "resume"   // a stateless session's answers for a call the gateway holds (input.go)
	pathTyped    path = "sdk"      // the request needs what only the typed path does
	// Answered by the gateway itself.
	pathAnswer path = "answer" // the session answers a request the gateway sent it on a call's stream (asks.go)
	pathCancel path = "cancel" // notifications/cancelled naming a forwarded call in flight
	pathRefuse path = "refuse" // a protocol error the gateway answers as a server of the revision does
)

// typed reports whether the SDK's server handles a request on path.
func (pt path) typed() bool {
	return pt == pathRevision || pt == pathInput || pt == pathResume || pt == pathTyped
}

// plan is what decide makes of a request.
type plan struct {
	path path
	why  string // what sent a request on a typed path there (tests, and a reader of the table)
	// counted: a request of a forwarded method the planner got as far as routing, counted by
	// its final path (metrics.FastPath for tools/call, metrics.RequestPath for the others).
	counted bool
}

// facts are what decide reads of a request. A fact read left unset (its prerequisite failed)
// is the one that sends the request the typed way, which an earlier row has decided already.
type facts struct {
	// The request's headers.
	stateless bool   // a 2026-07-28 request: no Mcp-Session-Id, the request names its session
	version   string // Mcp-Protocol-Version
	mcpMethod string // Mcp-Method (2026-07-28)
	mcpName   string // Mcp-Name (2026-07-28)
	content   bool   // the Content-Type and Accept headers are ones the SDK takes

	// The session's record.
	mounted        bool   // stateful: the table holds the session; stateless: the registry has it mounted
	sessionVersion string // a stateful session's revision, as it initialized ("" before)

	// The body.
	answer   bool   // it answers a request the gateway sent the session, which waits for it
	method   string // its method, when it is a JSON-RPC 2.0 message the forward path reads; else ""
	id       []byte // its id as sent (none: a notification)
	cancels  bool   // notifications/cancelled whose requestId names a forwarded call of the session in flight
	badInput bool   // 2026-07-28 inputResponses that are not an object of answers that are objects

	// The params.
	params     bool   // they decode as the forward path reads them and as the SDK's types take them
	name       string // the tool's or prompt's name, or the URI, they name
	identity   bool   // 2026-07-28: their _meta describes the client as the SDK's stateless handler requires
	mrtr       bool   // they carry inputResponses or a requestState
	token      []byte // their progress token as sent (none: no token)
	inputState bool   // their requestState is one the gateway issued (input.go)
	objectArgs bool   // a tool call's arguments are an object (or null, or absent)

	// The route.
	routed       bool  // a server offers what the params name
	paramHeaders bool  // the tool's schema asks for Mcp-Param headers, which only the typed path checks
	state        bool  // the requestState, if any, goes to the server (a sealed one opens for this call)
	takes        error // (*conn.Conn).Takes for the session's revision: nil, ErrOtherRevision, ErrNotRaw, ErrUnavailable
	// bridged: a stateless session's request to a server speaking 2025-11-25 on a connection
	// that takes raw requests of that revision: forwarded, its envelope made 2026-07-28's
	// (bridge.go).
	bridged bool
	// taskRefused: a request naming a task id the session was not given (tasks.go)
	taskRefused bool
}

// cancelled is the one notification the forward path reads.
const cancelled = "notifications/cancelled"

// decide is the planner: the path of a request, from its facts alone.
func decide(f facts) plan {
	typed := func(why string) plan { return plan{path: pathTyped, why: why} }
	m, forwarded := forwardedMethods[f.method]
	if f.stateless {
		row, known := forwardedMethods[f.mcpMethod]
		switch {
		case !revision.Is(f.version, revision.Stateless):
			return typed("a protocol revision newer than the gateway's")
		case !known:
			return typed("Mcp-Method names a method the forward path does not carry")
		case row.named && f.mcpName == "":
			return typed("no Mcp-Name")
		case !f.content:
			return typed("a content type or Accept header the SDK answers")
		case f.method != f.mcpMethod || !requestID(f.id):
			return typed("the body is not a JSON-RPC request of the method Mcp-Method names")
		case f.badInput:
			return plan{path: pathRefuse, why: "inputResponses must be an object of objects"}
		}
	} else {
		switch {
		case !f.mounted:
			return typed("not a session of this endpoint")
		case f.sessionVersion == "" || revision.Of(f.sessionVersion) >= revision.Stateless:
			return typed("a session not initialized, or of the stateless revision")
		case f.version != f.sessionVersion:
			return typed("Mcp-Protocol-Version is not the session's")
		case !f.content:
			return typed("a content type or Accept header the SDK answers")
		case f.answer:
			return plan{path: pathAnswer}
		case f.method == cancelled && len(f.id) == 0 && f.cancels:
			return plan{path: pathCancel}
		case f.method == cancelled:
			return typed("a cancellation of a request the typed path carries")
		case !forwarded || !requestID(f.id):
			return typed("not a request of a forwarded method")
		}
	}
	counted := func(pt path, why string) plan { return plan{path: pt, why: why, counted: true} }
	switch {
	case !f.params:
		return counted(pathTyped, "params the SDK's types refuse")
	case f.taskRefused:
		return plan{path: pathRefuse, why: "a task id not given to this session"}
	case f.stateless && !f.identity:
		return counted(pathTyped, "a _meta the SDK's stateless handler refuses")
	case f.stateless && m.named && f.mcpName != f.name:
		return counted(pathTyped, "Mcp-Name differs from the params")
	case f.stateless && !f.mounted:
		return counted(pathTyped, "a stateless session's first request: the typed path mounts it")
	case m.tool && !f.stateless && f.mrtr:
		return counted(pathTyped, "MRTR fields from a 2025-11-25 session")
	case m.tool && len(f.token) > 0 && !progressToken(f.token):
		return counted(pathTyped, "a progress token that is neither a string nor a number")
	case !m.tool && len(f.token) > 0:
		return counted(pathTyped, "a progress token")
	case m.tool && f.inputState:
		return counted(pathResume, "answers for a call the gateway holds")
	case f.inputState:
		return counted(pathTyped, "answers for a request the gateway holds")
	case !f.routed:
		return counted(pathTyped, "no server offers it")
	case f.paramHeaders:
		return counted(pathTyped, "a tool whose schema asks for Mcp-Param headers")
	case m.tool && !f.objectArgs:
		return counted(pathTyped, "arguments that are not an object")
	case !f.state:
		return counted(pathTyped, "a requestState the typed path refuses")
	case errors.Is(f.takes, conn.ErrOtherRevision) && (!f.bridged || f.mrtr):
		return counted(pathRevision, "the server speaks the other revision")
	case errors.Is(f.takes, conn.ErrNotRaw):
		return counted(pathTyped, "a connection that takes typed requests only")
	}
	// Takes nil, or ErrUnavailable: forward waits for the connection and answers as the
	// typed path would, and retry covers what the connection turns out to be; or a call
	// bridged between the revisions.
	return counted(pathForward, "")
}

// retry is the forward plan's fallback: the typed path that carries a request Forward
// answered, before anything reached the session, with what Takes could not tell (the
// connection reconnected since) or only the server's answer tells (it asks a 2025-11-25
// session for input); false for any other error, which is the session's answer (respond.go).
func retry(err error) (path, bool) {
	switch {
	case errors.Is(err, conn.ErrOtherRevision):
		return pathRevision, true
	case errors.Is(err, conn.ErrNotRaw):
		return pathTyped, true
	case errors.Is(err, conn.ErrAsksInput):
		return pathInput, true
	}
	return "", false
}

// retried reports whether the typed path carries a request Forward answered with err (retry).
func retried(err error) bool {
	_, again := retry(err)
	return again
}

// acceptsOf is the revision a forwarded request takes results in: a stateless session's
// 2026-07-28; a stateful session's tools/call 2025-11-25 from a server of either (conn
// reshapes a 2026-07-28 result); its other requests only from a server of its own revision,
// whose results are passed back whole.
func acceptsOf(stateless, tool bool) conn.Accepts {
	switch {
	case stateless:
		return conn.AcceptsStateless
	case tool:
		return conn.AcceptsStateful
	}
	return conn.AcceptsStatefulOnly
}

// requestID reports whether a request's id, as sent, is one the forward path answers under:
// a string or a number (the SDK answers any other).
func requestID(id []byte) bool {
	return len(id) > 0 && id[0] != '{' && id[0] != '[' && string(id) != "null"
}

// progressToken reports whether a progress token, as sent, is a string or a number.
func progressToken(token []byte) bool {
	return token[0] == '"' || token[0] == '-' || (token[0] >= '0' && token[0] <= '9')
}
