package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/metrics"
	"github.com/dsh-dev/projectmcp/internal/recovery"
)

// The fast path forwards a stateful session's tools/call at the JSON-RPC message level.
//
// Why: through the SDK on both sides, one forwarded call decodes its request and its result
// several times (the envelope, the params, the typed result and each content item) and
// encodes them again, and the SDK's JSON decoder allocates a 32 KiB buffer per decode; that
// made a forwarded call cost about as much again as a direct one. Here the envelope and the
// params are decoded once (conn.DecodeExact), the arguments stay raw, the projected
// name is replaced by the server's own, and the server's result is written back to the
// session byte for byte (conn.Forward sends it on the shared connection with an id of its
// own). A server that speaks 2026-07-28 is called through the SDK, which translates its
// results for a 2025-11-25 session. Anything unusual goes to the SDK server exactly as
// before, so its validation, limits and error codes still apply: a batch, another method (but
// prompts/get, resources/read and completion/complete: rawrequest.go), an
// unknown tool or session, a request with MRTR fields or an odd progress token, a protocol
// version header other than the session's, a content type or Accept header the SDK would
// refuse. A call with a progress
// token gets its response as an event stream once the server reports progress, the progress
// relayed with the session's own token.
//
// Cancellation keeps working: notifications/cancelled naming a fast-path call cancels it (and
// conn.Forward tells the server), as does the session closing its HTTP request.

// envelope is a JSON-RPC message as the fast path reads it.
type envelope struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
}

// callParams are the tools/call params the fast path understands; anything it would have
// to act on beyond these sends the request to the SDK.
type callParams struct {
	Name           string          `json:"name"`
	Arguments      json.RawMessage `json:"arguments"`
	InputResponses json.RawMessage `json:"inputResponses"`
	RequestState   json.RawMessage `json:"requestState"`
	Meta           requestMeta        `json:"_meta"`
}

// requestMeta is what the fast path reads of a request's _meta.
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

// trace reads the session's trace context, for origin.meta; nil when there is none.
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

// forwardCaller is the session a fast-path call comes from.
type forwardCaller struct {
	id     string                 // the session's slots' key
	caller conn.Caller            // who answers the server's own requests (stateful sessions)
	rev    conn.Revision          // the revision the session takes results in
	caps   func() json.RawMessage // its client capabilities, as a 2026-07-28 server is told them
	// resumable: the answer is a resumable event stream (resume.go), kept in replay.
	resumable bool
	replay    *replayStream
	// stateful sessions may cancel a call by notifications/cancelled; a stateless session's
	// call ends with its HTTP request.
	cancellable bool
	stateless   bool // a 2026-07-28 session: it gets its log lines with its requests
}

// serveForward handles a stateful session's request and returns true, or restores its body and
// returns false for the SDK server to handle it.
func (p *project) serveForward(w http.ResponseWriter, r *http.Request, ref string) bool {
	ss := p.session(ref)
	if ss == nil || !sessionHeaders(r, ss) {
		return false
	}
	if id, ans, ok := answerOf(bodyOf(r)); ok && p.asks.deliver(ref, id, ans) {
		w.WriteHeader(http.StatusAccepted) // an answer to the gateway's request on a call's stream
		return true
	}
	env, ok := readEnvelope(r, "tools/call", "notifications/cancelled", "prompts/get", "resources/read", "completion/complete")
	switch {
	case !ok:
		return false
	case env.Method == "notifications/cancelled" && len(env.ID) == 0:
		return p.cancelForwarded(w, ref, env.Params)
	case env.Method == "tools/call":
		fc := forwardCaller{id: ref, caller: sessionCaller{ss}, rev: conn.Legacy, caps: sessionCapabilities(ss), cancellable: true,
			resumable: ss.InitializeParams().ProtocolVersion >= "2025-11-25"}
		return p.countPath(p.forwardCall(w, r, env, func(*callParams) (forwardCaller, bool) { return fc, true }))
	case forwardedMethods[env.Method]:
		// Only from a server speaking the session's revision: results are passed back whole.
		fc := forwardCaller{id: ref, caller: sessionCaller{ss}, rev: conn.LegacyExact, caps: sessionCapabilities(ss), cancellable: true}
		return p.countRequest(env.Method, p.forwardRequest(w, r, env, func(*requestMeta, string) (forwardCaller, bool) { return fc, true }))
	}
	return false
}

// serveStatelessForward is serveForward for a 2026-07-28 (stateless) request: its session is named
// by the request itself (see SessionHeader), and must have been mounted by an earlier request.
func (p *project) serveStatelessForward(w http.ResponseWriter, r *http.Request) bool {
	version, method := r.Header.Get("Mcp-Protocol-Version"), r.Header.Get("Mcp-Method")
	named := method != "completion/complete" // the methods whose name (or URI) is in Mcp-Name
	if version != "2026-07-28" || (method != "tools/call" && !forwardedMethods[method]) || (named && r.Header.Get("Mcp-Name") == "") || !acceptedContent(r) {
		return false
	}
	env, ok := readEnvelope(r, method)
	if !ok {
		return false
	}
	if badInputResponses(env.Params) {
		writeError(w, nil, env.ID, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams,
			Message: "inputResponses must be an object of answers, each an object, by the keys of the input requests"}, true)
		return true
	}
	identify := func(m *requestMeta, name string) (forwardCaller, bool) {
		// What the SDK's stateless handler checks (the _meta triple, the standard headers),
		// else it answers with its own error.
		if m.ProtocolVersion != version || len(m.Capabilities) == 0 || m.Capabilities[0] != '{' ||
			(len(m.ClientInfo) > 0 && m.ClientInfo[0] != '{') || (named && r.Header.Get("Mcp-Name") != name) {
			return forwardCaller{}, false
		}
		var info struct {
			Name string `json:"name"`
		}
		if len(m.ClientInfo) > 0 && conn.DecodeExact(m.ClientInfo, &info) != nil {
			return forwardCaller{}, false
		}
		id := statelessID(r.Header, info.Name)
		if !p.g.opts.Registry.Mounted(p.key, id) {
			return forwardCaller{}, false // the SDK path mounts it
		}
		p.sessions.touch(id, p.g.opts.Clock.Now())
		return forwardCaller{id: id, rev: conn.Newest, caps: requestCapabilities(m.Capabilities), stateless: true}, true
	}
	if method != "tools/call" {
		return p.countRequest(method, p.forwardRequest(w, r, env, identify))
	}
	return p.countPath(p.forwardCall(w, r, env, func(params *callParams) (forwardCaller, bool) {
		return identify(&params.Meta, params.Name)
	}))
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

func (p *project) countPath(path string) bool {
	metrics.FastPath.WithLabelValues(path).Inc()
	return path == pathForward
}

func (p *project) countRequest(method, path string) bool {
	metrics.RequestPath.WithLabelValues(method, path).Inc()
	return path == pathForward
}

// readEnvelope reads the JSON-RPC envelope of a request's body (read already: readBody) when it
// is one of the methods named; !ok: the SDK is to handle the request.
func readEnvelope(r *http.Request, methods ...string) (env envelope, ok bool) {
	body := bodyOf(r)
	if !slices.ContainsFunc(methods, func(m string) bool { return bytes.Contains(body, []byte(`"`+m+`"`)) }) {
		return env, false
	}
	if conn.DecodeExact(body, &env) != nil || env.JSONRPC != "2.0" || !slices.Contains(methods, env.Method) {
		return env, false
	}
	if (env.Method == "tools/call" || forwardedMethods[env.Method]) && (len(env.ID) == 0 || env.ID[0] == '{' || env.ID[0] == '[' || string(env.ID) == "null") {
		return env, false
	}
	return env, true
}

// How a tools/call went (metrics.FastPath).
const (
	pathForward      = "raw"
	pathRevision = "revision"
	pathInput    = "input"
	pathResume   = "resume"
	pathTyped      = "sdk"
)

// sessionHeaders reports whether the request's headers are ones the SDK would accept for this
// session, so that answering without it changes nothing.
func sessionHeaders(r *http.Request, ss *mcp.ServerSession) bool {
	ip := ss.InitializeParams()
	if ip == nil || ip.ProtocolVersion == "" || ip.ProtocolVersion >= "2026-07-28" {
		return false
	}
	return r.Header.Get("Mcp-Protocol-Version") == ip.ProtocolVersion && acceptedContent(r)
}

// acceptedContent reports whether the request's content type and Accept header are ones the SDK
// accepts.
func acceptedContent(r *http.Request) bool {
	if ct := r.Header.Get("Content-Type"); ct != "application/json" && !strings.HasPrefix(ct, "application/json;") {
		return false
	}
	accept := strings.Join(r.Header.Values("Accept"), ",")
	return strings.Contains(accept, "application/json") && strings.Contains(accept, "text/event-stream")
}

// forwardCall forwards one tools/call and answers pathForward, or answers why the SDK server must
// handle it instead (nothing has been written to w then). The caller is what identify makes
// of the params (false: the SDK must handle it).
func (p *project) forwardCall(w http.ResponseWriter, r *http.Request, env envelope,
	identify func(*callParams) (forwardCaller, bool)) string {
	var params callParams
	if conn.DecodeExact(env.Params, &params) != nil || params.Name == "" {
		return pathTyped
	}
	fc, ok := identify(&params)
	if !ok {
		return pathTyped
	}
	if fc.rev == conn.Legacy && (len(params.InputResponses) > 0 || len(params.RequestState) > 0) {
		return pathTyped // MRTR fields from a 2025-11-25 session: the SDK answers
	}
	token := params.Meta.ProgressToken
	if len(token) > 0 && token[0] != '"' && (token[0] < '0' || token[0] > '9') && token[0] != '-' {
		return pathTyped // a token must be a string or a number: the SDK answers anything else
	}
	if isInputStateJSON(params.RequestState) {
		return pathResume // answers to a 2025-11-25 server's requests, for a call the gateway holds (input.go)
	}
	tool, ok := p.tool(params.Name)
	if !ok || tool.paramHeaders { // whichever the session's revision: the server's is what matters
		return pathTyped
	}
	args := params.Arguments
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage("{}")
	} else if args[0] != '{' {
		return pathTyped // the SDK answers arguments that are not an object
	}
	b := p.binding(origin{method: "tools/call", name: params.Name}, fc.id, tool.server)
	state := params.RequestState
	if len(state) > 0 {
		if state, ok = openStateJSON(b, state); !ok {
			return pathTyped // a state the SDK path refuses (sealStates)
		}
	}
	members := callMembers(tool.raw, args, params.InputResponses, state)

	unanswered := false // the stream ends without an answer: a client that resumes it learns so
	if fc.resumable {
		fc.replay = p.replays.open(fc.id)
		defer func() {
			p.replays.close(fc.replay, fc.replay.primed.Load() && (r.Context().Err() != nil || unanswered))
		}()
	}
	open := func() *sseWriter { return newSSEWriter(w, fc.replay) }
	ctx, cancel := p.track(r, fc, env.ID)
	defer cancel()

	o := origin{method: "tools/call", session: fc.id, caller: fc.caller, name: params.Name, raw: tool.raw, meta: params.Meta.trace(), caps: fc.caps,
		header: r.Header, traced: true, item: Item{Resource: ResourceTools, Server: tool.server, Name: tool.raw, Unlisted: tool.unlisted}, args: args}
	logs := fc.stateless && params.Meta.LogLevel != ""
	send := func(ctx context.Context, put func(relayed)) (conn.RawResult, error) {
		if logs {
			ctx = logsTo(ctx, put, params.Meta.LogLevel)
		}
		o := o
		if sc, ok := fc.caller.(sessionCaller); ok && fc.replay != nil && put != nil {
			o.caller = &callStream{sessionCaller: sc, asks: &p.asks, ref: fc.id, put: put} // on the call's stream
		}
		return dispatch(ctx, p, o, tool.server, func(ctx context.Context, c *conn.Conn) (conn.RawResult, error) {
			if tool.unlisted && !c.Offers(tool.raw) {
				return nil, &withheldTool{params.Name} // as if it did not exist
			}
			return c.Forward(ctx, "tools/call", members, progressTo(put), fc.rev)
		})
	}
	var res conn.RawResult
	var err error
	var stream *sseWriter
	if len(token) > 0 || logs || fc.replay != nil {
		stream, res, err = withEvents(ctx, open, token, send)
	} else {
		res, err = send(ctx, nil)
	}
	final := func() *sseWriter { // the answer's stream: a resumable session gets one
		if stream == nil && fc.replay != nil {
			stream = open()
		}
		return stream
	}
	switch {
	case errors.Is(err, conn.ErrOtherRevision) && stream == nil:
		return pathRevision // nothing was sent: the SDK translates between the revisions
	case errors.Is(err, conn.ErrNotRaw) && stream == nil:
		return pathTyped // nothing was sent: the connection takes typed requests only
	case errors.Is(err, conn.ErrAsksInput) && stream == nil:
		return pathInput // the SDK calls again and asks the 2025-11-25 session itself
	case errors.Is(err, conn.ErrAsksInput):
		res = ownResult("projectmcp: the server asks for input after reporting progress; call again without a progress token", fc.stateless)
	case errors.Is(err, conn.ErrOtherRevision), errors.Is(err, conn.ErrNotRaw): // only after a progress event: nothing was sent
		res = ownResult("projectmcp: the server changed protocol revision during the call; call again", fc.stateless)
	case err == nil:
		res = sealResultJSON(b, res)
	case errors.Is(err, conn.ErrStreamEnded) && fc.replay != nil && ctx.Err() == nil:
		// The server ended the call's stream for good before answering: the session's stream
		// ends unanswered too, as it would have directly (the call may or may not have run).
		final()
		unanswered = true
		return pathForward
	case rpcErrorOf(err) != nil && ctx.Err() == nil:
		writeError(w, final(), env.ID, rpcErrorOf(err), fc.stateless) // the server's answer, as it gave it
		return pathForward
	case errors.Is(err, conn.ErrUnavailable) || ctx.Err() == nil:
		// As through the SDK: a failing server is a failing tool, named in the result.
		res = ownResult(err.Error(), fc.stateless)
	default:
		writeResponse(w, final(), env.ID, nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "request cancelled: " + err.Error()})
		return pathForward
	}
	writeResponse(w, final(), env.ID, res, nil)
	return pathForward
}

// track gives a forwarded request its context: cancelled when the session's HTTP request ends
// (for a resumable stream, only while no event id has reached the client: resume.go) or, for
// a stateful session, by its notifications/cancelled naming id (cancelForwarded) and by its end.
func (p *project) track(r *http.Request, fc forwardCaller, id json.RawMessage) (context.Context, context.CancelFunc) {
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
	p.sessions.addCall(fc.id, string(id), cancel)
	return ctx, func() {
		cancel()
		p.sessions.dropCall(fc.id, string(id))
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

// progressQueue bounds the progress notifications waiting for a slow session: past it, the
// oldest waiting ones are dropped (a later one says more), and the server's notification
// goroutine, which every session of the connection shares, never waits for this session.
const progressQueue = 32

// withEvents runs send while relaying what the server sends for the call (its progress,
// with the session's own token, and its log lines) to the session as events of its response
// stream. The first event decides that the response is an event stream (nil until then).
func withEvents(ctx context.Context, open func() *sseWriter, token json.RawMessage,
	send func(context.Context, func(relayed)) (conn.RawResult, error)) (*sseWriter, conn.RawResult, error) {
	var stream *sseWriter
	res, err := relayCall(ctx, func(e relayed) {
		if stream == nil {
			stream = open()
		}
		switch {
		case e.progress != nil && len(token) > 0:
			stream.progress(token, e.progress)
		case e.log != nil:
			stream.log(e.log)
		case e.request != nil:
			stream.event(e.request)
		}
	}, send)
	return stream, res, err
}

// relayed is one message a server sends during a call for the call's session alone: a
// progress notification, or a log line (for a 2026-07-28 session, which gets its log lines
// with its requests).
type relayed struct {
	progress *mcp.ProgressNotificationParams
	log      *mcp.LoggingMessageParams
	request  []byte // a server's request, encoded (asks.go): never dropped
}

// progressTo is the onProgress callback that puts a call's progress through put.
func progressTo(put func(relayed)) func(*mcp.ProgressNotificationParams) {
	if put == nil {
		return nil
	}
	return func(pp *mcp.ProgressNotificationParams) { put(relayed{progress: pp}) }
}

// logsTo has the log lines a server sends on a call's own stream go through put (conn's log
// sink), at most as verbose as level; with no level the session gets none.
func logsTo(ctx context.Context, put func(relayed), level mcp.LoggingLevel) context.Context {
	return conn.WithLogSink(ctx, level, func(lm *mcp.LoggingMessageParams) {
		if admits(level, lm.Level) {
			put(relayed{log: lm})
		}
	})
}

// admits reports whether a session at level takes a line of the given level.
func admits(level, line mcp.LoggingLevel) bool {
	want, got := slices.Index(logLevels, level), slices.Index(logLevels, line)
	return want >= 0 && got >= want
}

// relayCall runs send while the calling goroutine, which serves the one session the call is
// for, writes what the server sends for it (write). The goroutine that hands send's put the
// messages serves every session of the connection: it only queues, and past progressQueue
// waiting the oldest go. What is queued when send returns is written before relayCall
// returns, so it comes before the call's result. A panic in send is raised again on the
// calling goroutine, whose owner recovers it (recovery.Middleware, or net/http on the
// message-level path). A nil write relays nothing (send's put is nil).
func relayCall[T any](ctx context.Context, write func(relayed), send func(context.Context, func(relayed)) (T, error)) (T, error) {
	if write == nil {
		return send(ctx, nil)
	}
	events := make(chan relayed, progressQueue)
	requests := make(chan relayed) // a server's request waits to be written, never dropped
	put := func(e relayed) {
		if e.request != nil {
			select {
			case requests <- e:
			case <-ctx.Done():
			}
			return
		}
		for {
			select {
			case events <- e:
				return
			default:
			}
			select { // full: drop the oldest and try again
			case <-events:
			default:
			}
		}
	}
	type outcome struct {
		res      T
		err      error
		panicked *recovery.Panic
	}
	done := make(chan outcome, 1)
	go func() { // ends when send returns, which ctx bounds
		defer func() {
			if v := recover(); v != nil {
				done <- outcome{panicked: recovery.Capture(v)}
			}
		}()
		res, err := send(ctx, put)
		done <- outcome{res: res, err: err}
	}()
	for {
		select {
		case e := <-events:
			write(e)
		case e := <-requests:
			for len(events) > 0 { // what the server sent before its request comes before it
				write(<-events)
			}
			write(e)
		case o := <-done:
			if o.panicked != nil {
				panic(o.panicked)
			}
			for {
				select {
				case e := <-events:
					write(e)
				default:
					return o.res, o.err
				}
			}
		}
	}
}

// sseWriter writes a response as an event stream; with a replay, a resumable one (resume.go),
// whose first event primes it.
type sseWriter struct {
	w      http.ResponseWriter
	f      http.Flusher
	replay *replayStream
}

func newSSEWriter(w http.ResponseWriter, replay *replayStream) *sseWriter {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	s := &sseWriter{w: w, f: f, replay: replay}
	if replay != nil {
		replay.primed.Store(true)
		s.write([]byte("id: " + replay.eventID(0) + "\nretry: " + strconv.Itoa(retryMillis) + "\ndata: \n\n"))
	}
	return s
}

func (s *sseWriter) event(data []byte) {
	id := ""
	if s.replay != nil {
		id = s.replay.add(data)
	}
	s.eventWithID(id, data)
}

// eventWithID writes one message event, with an id unless it is "".
func (s *sseWriter) eventWithID(id string, data []byte) {
	buf := make([]byte, 0, len(data)+len(id)+32)
	if id != "" {
		buf = append(buf, "id: "...)
		buf = append(buf, id...)
		buf = append(buf, '\n')
	}
	buf = append(buf, "event: message\ndata: "...)
	buf = append(buf, data...)
	buf = append(buf, "\n\n"...)
	s.write(buf)
}

func (s *sseWriter) write(frame []byte) {
	_, _ = s.w.Write(frame)
	if s.f != nil {
		s.f.Flush()
	}
}

// log writes a log line as notifications/message.
func (s *sseWriter) log(lm *mcp.LoggingMessageParams) {
	data, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "notifications/message", "params": lm})
	if err == nil {
		s.event(data)
	}
}

func (s *sseWriter) progress(token json.RawMessage, pp *mcp.ProgressNotificationParams) {
	params := struct {
		Token    json.RawMessage `json:"progressToken"`
		Progress float64         `json:"progress"`
		Total    float64         `json:"total,omitempty"`
		Message  string          `json:"message,omitempty"`
	}{token, pp.Progress, pp.Total, pp.Message}
	data, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "method": "notifications/progress", "params": params})
	if err == nil {
		s.event(data)
	}
}

// cancelForwarded cancels a fast-path call the session gave up on; a cancellation for any other
// request goes to the SDK.
func (p *project) cancelForwarded(w http.ResponseWriter, ref string, raw json.RawMessage) bool {
	var params struct {
		RequestID json.RawMessage `json:"requestId"`
	}
	if conn.DecodeExact(raw, &params) != nil || len(params.RequestID) == 0 {
		return false
	}
	cancel := p.sessions.call(ref, string(params.RequestID))
	if cancel == nil {
		return false
	}
	cancel()
	w.WriteHeader(http.StatusAccepted)
	return true
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
	buf = append(buf, '}')
	if stream != nil {
		stream.event(buf)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(buf)))
	_, _ = w.Write(buf)
}
