package paths

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/gateway/access"
	"github.com/dsh-dev/projectmcp/internal/httpserve"
	"github.com/dsh-dev/projectmcp/internal/jsonrpcwire"
	"github.com/dsh-dev/projectmcp/internal/metrics"
	"github.com/dsh-dev/projectmcp/internal/revision"
)

// The forward path carries a session's request as JSON-RPC bytes: the methods of the routing
// table (planner.go), for a stateful (2025-11-25) session and a stateless (2026-07-28) one.
//
// Through the SDK on both sides, one request would be decoded several times (the envelope,
// the params, the typed result and each content item) and encoded again, and the SDK's JSON
// decoder allocates a 32 KiB buffer per decode; its types also lose what they do not model (a
// server's _meta, fields of newer revisions, unknown content fields). Here the envelope and
// the params are decoded once (conn.DecodeExact), the arguments stay as they came, the
// projected name is replaced by the server's own, and the server's result is written back to
// the session byte for byte (conn.Forward sends it on the shared connection with an id of its
// own). What the forward path does not carry (planner.go: decide) goes to the SDK's server,
// whose validation, limits, error codes and revision translation then apply.
//
// A tools/call with a progress token gets its response as an event stream once the server
// reports progress, the progress relayed with the session's own token; a stateful session's
// call is a resumable stream (resume.go). notifications/cancelled naming a forwarded call
// cancels it (and conn.Forward tells the server), as does the session closing its HTTP
// request.

// envelope is a JSON-RPC message as the forward path reads it.
type envelope struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
}

// callParams are the tools/call params the forward path understands; anything it would have
// to act on beyond these sends the request the typed path.
type callParams struct {
	Name           string          `json:"name"`
	Arguments      json.RawMessage `json:"arguments"`
	InputResponses json.RawMessage `json:"inputResponses"`
	RequestState   json.RawMessage `json:"requestState"`
	// Task asks the server to run the call as a task (2025-11-25, SEP-1686; tasks.go).
	Task json.RawMessage `json:"task"`
	Meta requestMeta     `json:"_meta"`
}

// requestMeta is what the forward path reads of a request's _meta.
type requestMeta struct {
	ProgressToken json.RawMessage `json:"progressToken"`
	// The level of the log lines a 2026-07-28 request asks for with it.
	LogLevel mcp.LoggingLevel `json:"io.modelcontextprotocol/logLevel"`
	// A 2026-07-28 request's own description of its client (SEP-2575).
	ProtocolVersion string          `json:"io.modelcontextprotocol/protocolVersion"`
	ClientInfo      json.RawMessage `json:"io.modelcontextprotocol/clientInfo"`
	Capabilities    json.RawMessage `json:"io.modelcontextprotocol/clientCapabilities"`
	// The session's trace context (SEP-414).
	Traceparent string `json:"traceparent"`
	Tracestate  string `json:"tracestate"`
	Baggage     string `json:"baggage"`
}

// trace reads the session's trace context, for Origin.meta; nil when there is none.
func (m *requestMeta) trace() func(string) string {
	if m.Traceparent == "" {
		return nil
	}
	return func(key string) string {
		switch key {
		case "traceparent":
			return m.Traceparent
		case "tracestate":
			return m.Tracestate
		case "baggage":
			return m.Baggage
		}
		return ""
	}
}

// forwardCaller is the session a forwarded request comes from.
type forwardCaller struct {
	id     string                 // the session's slots' key
	caller conn.Caller            // who answers the server's own requests (stateful sessions)
	rev    conn.Accepts           // the revision the session takes results in
	caps   func() json.RawMessage // its client capabilities, as a 2026-07-28 server is told them
	// resumable: the answer is a resumable event stream (resume.go), kept in replay.
	resumable bool
	replay    *replayStream
	// stateful sessions may cancel a call by notifications/cancelled; a stateless session's
	// call ends with its HTTP request.
	cancellable bool
	stateless   bool // a 2026-07-28 session: it gets its log lines with its requests
}

// incoming is one POST as read for the planner: its facts, and what the forward path sends.
type incoming struct {
	facts
	who     access.Identity // who sent it, as the gateway authenticated them
	row     forwardedMethod
	env     envelope
	call    callParams                 // a tools/call's params
	members map[string]json.RawMessage // another method's params but _meta, as the server gets them
	meta    *requestMeta               // the params' _meta
	args    json.RawMessage            // a tools/call's arguments, an object
	state   json.RawMessage            // the requestState as the server gets it (opened), or none
	target  target
	caller  forwardCaller
	// declared: a bridged request's client capabilities, as the session declares them (bridge.go)
	declared mcp.ClientCapabilities
	binding  stateBinding
	// bridgeTask: the tool runs only as a task, which the gateway runs for the session
	// (taskbridge.go); taskRoute: a request naming a task the session was given (tasks.go), or
	// refusal, the answer to one naming a task it was not.
	bridgeTask bool
	taskRoute  *taskRoute
	refusal    *jsonrpc.Error
	ref        string // a stateful session's ref
	// answer: the session's answer to a request of the gateway's, by its id; cancel: the call
	// a notifications/cancelled names.
	answerID string
	answer   answer
	cancel   context.CancelFunc
}

// target is where a forwarded request goes: the server, the name it has there (a tool's or
// prompt's own; "" for a URI) and the item as RBAC names it.
type target struct {
	server, raw string
	item        access.Item
}

// ServeForward executes the plan for a session's POST (ref: a stateful session's; "" for a
// 2026-07-28 request): true when the gateway has answered it, false for the SDK's server to.
func (p *Paths) ServeForward(w http.ResponseWriter, r *http.Request, ref string, who access.Identity) bool {
	in := p.read(r, ref, who)
	pl := decide(in.facts)
	switch pl.path {
	case pathAnswer:
		if !p.asks.deliver(ref, in.answerID, in.answer) {
			return false // another POST answered it meanwhile: the SDK answers this one as any stray response
		}
		w.WriteHeader(http.StatusAccepted)
		return true
	case pathCancel:
		in.cancel()
		w.WriteHeader(http.StatusAccepted)
		return true
	case pathRefuse:
		refusal := in.refusal
		if refusal == nil {
			refusal = &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams,
				Message: "inputResponses must be an object of answers, each an object, by the keys of the input requests"}
		}
		writeError(w, nil, in.env.ID, refusal, in.stateless)
		return true
	case pathForward:
		if in.stateless {
			p.ep.Touch(in.caller.id)
		}
		if in.row.tool {
			pl.path = p.forwardCall(w, r, in)
		} else {
			pl.path = p.forwardRequest(w, r, in)
		}
	}
	if pl.counted && in.row.tool {
		metrics.FastPath.WithLabelValues(string(pl.path)).Inc()
	} else if pl.counted {
		metrics.RequestPath.WithLabelValues(in.method, string(pl.path)).Inc()
	}
	return pl.path == pathForward
}

// statefulMethods are the methods a stateful session's body is read for, tools/call first
// (the most frequent); quotedMethods has each as a JSON string, which readEnvelope looks for
// in a body before it decodes it.
var (
	statefulMethods = func() []string {
		methods := []string{"tools/call"}
		for _, m := range slices.Sorted(maps.Keys(forwardedMethods)) {
			if m != "tools/call" {
				methods = append(methods, m)
			}
		}
		return append(methods, cancelled)
	}()
	quotedMethods = func() map[string][]byte {
		q := map[string][]byte{}
		for _, m := range statefulMethods {
			q[m] = []byte(`"` + m + `"`)
		}
		return q
	}()
)

// read gathers the facts of a POST (read already: readBody), and what the forward path needs
// to send it. It decides nothing: it stops where a fact's prerequisite is missing, and the
// facts it leaves unset are the ones decide reads as the typed path's.
func (p *Paths) read(r *http.Request, ref string, who access.Identity) *incoming {
	in := &incoming{who: who, ref: ref}
	f := &in.facts
	f.stateless, f.version, f.content = ref == "", r.Header.Get("Mcp-Protocol-Version"), acceptedContent(r)
	body := httpserve.Body(r)
	var env envelope
	var ok bool
	var ss *mcp.ServerSession
	if f.stateless {
		f.mcpMethod, f.mcpName = r.Header.Get("Mcp-Method"), r.Header.Get("Mcp-Name")
		if _, known := forwardedMethods[f.mcpMethod]; !known {
			return in
		}
		env, ok = readEnvelope(body, f.mcpMethod)
	} else {
		if ss = p.ep.Stateful(ref); ss == nil {
			return in
		}
		f.mounted = true
		if ip := ss.InitializeParams(); ip != nil {
			f.sessionVersion = ip.ProtocolVersion
		}
		if id, ans, isAnswer := answerOf(body); isAnswer {
			in.answerID, in.answer, f.answer = id, ans, p.asks.awaits(ref, id)
		}
		env, ok = readEnvelope(body, statefulMethods...)
	}
	if !ok {
		return in
	}
	in.env, f.method, f.id = env, env.Method, env.ID
	if f.method == cancelled {
		if !f.stateless && len(f.id) == 0 {
			in.cancel = p.cancelOf(ref, env.Params)
			f.cancels = in.cancel != nil
		}
		return in
	}
	in.row = forwardedMethods[f.method]
	if f.stateless {
		f.badInput = badInputResponses(env.Params)
	}
	if !p.readParams(in) {
		return in
	}
	// The session, as the server sees it.
	if f.stateless {
		var id string
		if id, f.identity = identify(who, r.Header, in.meta); !f.identity {
			return in
		}
		f.mounted = p.ep.Mounted(id)
		in.caller = forwardCaller{id: id, rev: conn.AcceptsStateless, caps: requestCapabilities(in.meta.Capabilities), stateless: true}
	} else {
		in.caller = forwardCaller{id: ref, caller: sessionCaller{ss}, rev: acceptsOf(false, in.row.tool), caps: sessionCapabilities(ss),
			cancellable: true, resumable: in.row.tool && revision.Of(f.sessionVersion) >= revision.Stateful}
	}
	if !f.routed || !f.mounted {
		return in
	}
	// The state it resumes, and the connection that takes it.
	in.binding = p.binding(Origin{method: f.method, name: f.name}, in.caller.id, in.target.server)
	f.state = true
	if len(in.state) > 0 {
		in.state, f.state = openStateJSON(in.binding, in.state)
	}
	if c := p.ep.Lookup(in.caller.id, in.target.server); c != nil {
		f.takes = c.Takes(in.caller.rev)
		in.bridgeTask = in.row.tool && c.TaskSupport(in.target.raw) == conn.TaskRequired
		if f.bridged = f.stateless && errors.Is(f.takes, conn.ErrOtherRevision) && c.Takes(conn.AcceptsStatefulOnly) == nil; f.bridged {
			in.caller.rev = conn.AcceptsStatefulOnly // the request as the server's revision has it (bridge.go)
			// The capabilities the session declares decide what the server may ask it; ones
			// the SDK's types refuse are the SDK's to answer.
			d := declaredCaps.of(in.meta.Capabilities)
			in.declared, f.bridged = d.caps, d.ok
		}
	} else {
		f.takes = conn.ErrUnavailable
	}
	return in
}

// readParams reads a request's params into in (false: they do not decode), and routes what
// they name (the method's row).
func (p *Paths) readParams(in *incoming) bool {
	f := &in.facts
	if in.row.tool {
		c := &in.call
		f.params = jsonrpcwire.DecodeExact(in.env.Params, c) == nil && c.Name != ""
		in.meta, in.state = &c.Meta, c.RequestState
		f.mrtr = len(c.InputResponses) > 0 || len(c.RequestState) > 0
		in.args = c.Arguments
		if len(in.args) == 0 || string(in.args) == "null" {
			in.args = json.RawMessage("{}")
		}
		f.objectArgs = in.args[0] == '{'
	} else {
		in.meta = &requestMeta{}
		f.params = jsonrpcwire.DecodeExact(in.env.Params, &in.members) == nil && in.members != nil
		if m, ok := in.members["_meta"]; ok && jsonrpcwire.DecodeExact(m, in.meta) != nil {
			f.params = false
		}
		delete(in.members, "_meta")
		in.state = in.members["requestState"]
	}
	f.token = in.meta.ProgressToken
	f.inputState = isInputStateJSON(in.state)
	f.params = f.params && in.row.route(p, in)
	return f.params
}

// identify names a 2026-07-28 request's session (see SessionHeader) by its headers and its
// _meta's client info; false when the _meta is not what the SDK's stateless handler takes (the
// request's revision, the client's capabilities and info as objects).
func identify(who access.Identity, h http.Header, m *requestMeta) (string, bool) {
	if m.ProtocolVersion != h.Get("Mcp-Protocol-Version") || len(m.Capabilities) == 0 || m.Capabilities[0] != '{' ||
		(len(m.ClientInfo) > 0 && m.ClientInfo[0] != '{') {
		return "", false
	}
	var info struct {
		Name string `json:"name"`
	}
	if len(m.ClientInfo) > 0 && jsonrpcwire.DecodeExact(m.ClientInfo, &info) != nil {
		return "", false
	}
	return StatelessID(who, h.Get(SessionHeader), info.Name), true
}

// badInputResponses reports whether a 2026-07-28 request's params carry inputResponses that
// are not an object of answers that are objects (null included): a protocol error the gateway
// answers itself, whichever server the request is for, as a server of that revision does.
func badInputResponses(params json.RawMessage) bool {
	if !bytes.Contains(params, []byte(`"inputResponses"`)) { // a call's params are decoded once more only if they may
		return false
	}
	var p struct {
		InputResponses json.RawMessage `json:"inputResponses"`
	}
	if json.Unmarshal(params, &p) != nil || len(p.InputResponses) == 0 {
		return false
	}
	var answers map[string]json.RawMessage
	if p.InputResponses[0] != '{' || json.Unmarshal(p.InputResponses, &answers) != nil {
		return true
	}
	for _, a := range answers {
		if len(a) == 0 || a[0] != '{' {
			return true
		}
	}
	return false
}

// readEnvelope reads the JSON-RPC envelope of a body when it is a message of one of the
// methods named (of statefulMethods); false otherwise.
func readEnvelope(body []byte, methods ...string) (env envelope, ok bool) {
	if !slices.ContainsFunc(methods, func(m string) bool { return bytes.Contains(body, quotedMethods[m]) }) {
		return env, false // most bodies of other methods are not decoded
	}
	if jsonrpcwire.DecodeExact(body, &env) != nil || env.JSONRPC != "2.0" || !slices.Contains(methods, env.Method) {
		return env, false
	}
	return env, true
}

// acceptedContent reports whether the request's content type and Accept header are ones the
// SDK accepts.
func acceptedContent(r *http.Request) bool {
	if ct := r.Header.Get("Content-Type"); ct != "application/json" && !strings.HasPrefix(ct, "application/json;") {
		return false
	}
	accept := strings.Join(r.Header.Values("Accept"), ",")
	return strings.Contains(accept, "application/json") && strings.Contains(accept, "text/event-stream")
}

// forwardCall forwards one tools/call and answers pathForward, or the typed path that is to
// carry it when Forward answered so before anything was written (retry).
func (p *Paths) forwardCall(w http.ResponseWriter, r *http.Request, in *incoming) path {
	fc, t, env, meta := in.caller, in.target, in.env, in.meta
	members := callMembers(t.raw, in.args, in.call.InputResponses, in.state)
	// A stateful session that starts a task of a server of its revision gets it (tasks.go).
	carried := len(in.call.Task) > 0 && string(in.call.Task) != "null" && !fc.stateless
	if carried {
		members = append(append(members, `,"task":`...), in.call.Task...)
	}
	token := meta.ProgressToken

	unanswered := false // the stream ends without an answer: a client that resumes it learns so
	if fc.resumable {
		fc.replay = p.replays.open(fc.id, in.who.Principal)
		defer func() {
			p.replays.close(fc.replay, fc.replay.primed.Load() && (r.Context().Err() != nil || unanswered))
		}()
	}
	open := func() *sseWriter { return newSSEWriter(w, fc.replay) }
	ctx, cancel := p.track(r, fc, env.ID)
	defer cancel()
	ctx, note := withStateNote(ctx) // a bridged round's state, which is not sealed

	o := Origin{method: "tools/call", session: fc.id, caller: fc.caller, name: in.name, raw: t.raw, meta: meta.trace(), caps: fc.caps,
		who: in.who, header: r.Header, traced: true, item: t.item, args: in.args, task: in.bridgeTask && !carried}
	logs := fc.stateless && meta.LogLevel != ""
	send := func(ctx context.Context, put func(relayed)) (conn.RawResult, error) {
		if logs {
			ctx = logsTo(ctx, put, meta.LogLevel)
		}
		o := o
		if sc, ok := fc.caller.(sessionCaller); ok && fc.replay != nil && put != nil {
			o.caller = &callStream{sessionCaller: sc, asks: &p.asks, ref: fc.id, put: put} // on the call's stream
		}
		call := func(ctx context.Context, c *conn.Conn) (conn.RawResult, error) {
			if t.item.Unlisted && !c.Offers(t.raw) {
				return nil, &withheldTool{in.name} // as if it did not exist
			}
			if carried {
				res, err := c.Forward(ctx, "tools/call", members, progressTo(put, len(token) > 0), conn.AcceptsStatefulOnly)
				if err != nil {
					return nil, err
				}
				return carryTask(p.taskBinding(fc.id, t.server), c, res), nil
			}
			if c.TaskSupport(t.raw) == conn.TaskRequired { // the session did not start a task: the gateway runs it
				return callAsTask(ctx, c, members, progressTo(put, len(token) > 0), fc.rev, p.taskLimit(o))
			}
			return c.Forward(ctx, "tools/call", members, progressTo(put, len(token) > 0), fc.rev)
		}
		if in.bridged {
			return p.bridge(ctx, o, t.server, in.declared, call)
		}
		return dispatch(ctx, p, o, t.server, call)
	}
	var res conn.RawResult
	var err error
	var stream *sseWriter
	if len(token) > 0 || logs || fc.replay != nil {
		stream, res, err = withEvents(ctx, open, token, send)
	} else {
		res, err = send(ctx, nil)
	}
	if again, ok := retry(err); ok && stream == nil {
		return again // nothing was written
	}
	if errors.Is(err, ErrMoved) && stream == nil {
		p.ep.MovedAway(w)
		return pathForward
	}
	final := func() *sseWriter { // the answer's stream: a resumable session gets one
		if stream == nil && fc.replay != nil { // opened for the answer alone: sent with its end
			stream = newHeldSSEWriter(w, fc.replay)
		}
		return stream
	}
	switch {
	case err == nil:
		res = sealResultJSON(in.binding, res, note.issued)
	case errors.Is(err, conn.ErrStreamEnded) && fc.replay != nil && ctx.Err() == nil:
		// The server ended the call's stream for good before answering: the session's stream
		// ends unanswered too, as it would have directly (the call may or may not have run).
		final()
		unanswered = true
		return pathForward
	default:
		rpcErr, text := failureOf(err, true, ctx.Err() != nil)
		if rpcErr != nil {
			writeError(w, final(), env.ID, rpcErr, fc.stateless)
			return pathForward
		}
		res = ownResult(text, fc.stateless)
		if in.bridged { // with the endpoint's serverInfo, as every result of a bridged call
			res, _ = statelessShape(ownResult(text, false), p.opts.ServerInfo, "") // the gateway's own object: cannot fail
		}
	}
	writeResponse(w, final(), env.ID, res, nil)
	return pathForward
}

// track gives a forwarded request its context: cancelled when the session's HTTP request ends
// (for a resumable stream, only while no event id has reached the client: resume.go) or, for
// a stateful session, by its notifications/cancelled naming id (cancelForwarded) and by its end.
func (p *Paths) track(r *http.Request, fc forwardCaller, id json.RawMessage) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(r.Context())
	if fc.replay != nil {
		ctx, cancel = context.WithCancel(context.WithoutCancel(r.Context()))
		stop := context.AfterFunc(r.Context(), func() {
			if !fc.replay.primed.Load() {
				cancel()
			}
		})
		cancel = func(cancel context.CancelFunc) context.CancelFunc { return func() { stop(); cancel() } }(cancel)
	}
	if !fc.cancellable {
		return ctx, cancel
	}
	key := string(id)
	p.ep.AddCall(fc.id, key, cancel)
	return ctx, func() {
		cancel()
		p.ep.DropCall(fc.id, key)
	}
}

// callMembers are the members of a tools/call's params as Forward takes them: the server's own
// tool name, the arguments (an object), and a 2026-07-28 session's answers to the server's
// input requests with the state they resume, when there are any.
func callMembers(raw string, args, inputResponses, requestState json.RawMessage) []byte {
	name, _ := json.Marshal(raw)
	members := make([]byte, 0, len(name)+len(args)+len(inputResponses)+len(requestState)+64)
	members = append(members, `"name":`...)
	members = append(members, name...)
	members = append(members, `,"arguments":`...)
	members = append(members, args...)
	if len(inputResponses) > 0 {
		members = append(append(members, `,"inputResponses":`...), inputResponses...)
	}
	if len(requestState) > 0 {
		members = append(append(members, `,"requestState":`...), requestState...)
	}
	return members
}

// cancelOf is the cancel function of the forwarded call a session's notifications/cancelled
// names (its params), or nil: a cancellation of any other request goes to the SDK.
func (p *Paths) cancelOf(ref string, raw json.RawMessage) context.CancelFunc {
	var params struct {
		RequestID json.RawMessage `json:"requestId"`
	}
	if jsonrpcwire.DecodeExact(raw, &params) != nil || len(params.RequestID) == 0 {
		return nil
	}
	return p.ep.Call(ref, string(params.RequestID))
}
