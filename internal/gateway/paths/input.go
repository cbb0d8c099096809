package paths

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/metrics"
	"github.com/dsh-dev/projectmcp/internal/recovery"
)

// Multi-round-trip calls for stateless (2026-07-28) sessions whose server speaks 2025-11-25.
//
// A 2025-11-25 server asks its client for input (sampling/createMessage, elicitation/create)
// by sending requests of its own while a call runs, and waits for the answers
// before it goes on. A stateless session has no stream such a request could reach it on: in
// its revision a server asks inside the call's result instead (an input-required result with
// inputRequests and an opaque requestState), and the client calls again with inputResponses
// and that state. The gateway translates between the two:
//
//   - A stateless session's call runs upstream in a goroutine of its own (a pendingCall, which
//     is also the conn.Caller the server's requests go to), not in the session's HTTP request.
//   - When the server asks, the session's request is answered with an input-required result
//     carrying the server's requests and a requestState naming the pending call; the upstream
//     call goes on waiting. The state is unguessable, issued to one session of one project for
//     one tool, good for one answer, and lapses after InputTimeout; a project holds at most
//     MaxAwaitingInput such calls (past it the server's request gets an error at once), an
//     identity at most MaxAwaitingInputPerPrincipal of them whatever its sessions, and a
//     session at most MaxAwaitingInputPerSession.
//   - The session's next call with inputResponses and that state answers the server's
//     requests, and the gateway waits for the upstream result again in that request (the
//     server may ask once more: another round).
//   - A call the session does not resume within InputTimeout is cancelled upstream, and the
//     server's requests get an error. A session that gives up on a round (its HTTP request
//     ends) cancels the call likewise.
//   - The state carries the epoch of this replica's claim on the project (Endpoint.Claim): a call
//     ends when its project moves to another replica, and a state that comes back after the
//     move is refused as such, on whichever replica it lands.

// inputStatePrefix starts every requestState the gateway issues, so that it is told from a
// server's own (which a 2026-07-28 server's results carry, and which reaches the session
// sealed: states.go).
const inputStatePrefix = "projectmcp-input."

// isInputState reports whether a requestState is one the gateway issued (of any project).
func isInputState(state string) bool { return strings.HasPrefix(state, inputStatePrefix) }

// isInputStateJSON is isInputState for a requestState as it came, a JSON string.
func isInputStateJSON(state json.RawMessage) bool {
	return bytes.HasPrefix(state, []byte(`"`+inputStatePrefix))
}

// Defaults of the bounds on calls waiting for a session's input (Options).
const (
	DefaultMaxAwaitingInput           = 100
	DefaultMaxAwaitingInputPerSession = 10
	// DefaultMaxAwaitingInputPerPrincipal is a quarter of the project's places: sessions cost
	// nothing to open, so a share per session alone lets one identity with ten of them take
	// every place.
	DefaultMaxAwaitingInputPerPrincipal = 25
)

// inputs are a project's calls waiting for their sessions' input.
type inputs struct {
	tag     string       // the project's mark in the states it issues
	epoch   func() int64 // this replica's claim on the project (Endpoint.Claim), in the states too
	log     logr.Logger
	timeout time.Duration
	max     int
	each    int // per session
	whose   int // per principal, all its sessions together

	mu     sync.Mutex
	parked map[string]*pendingCall // by the requestState the session was given
	closed bool
}

func newInputs(p *Paths) *inputs {
	sum := sha256.Sum256([]byte(p.key.String()))
	return &inputs{
		tag: hex.EncodeToString(sum[:4]), epoch: func() int64 { e, _ := p.ep.Claim(); return e }, log: p.opts.Log, timeout: p.opts.InputTimeout,
		max: p.opts.MaxAwaitingInput, each: p.opts.MaxAwaitingInputPerSession, whose: perPrincipal(p.opts.MaxAwaitingInputPerPrincipal),
		parked: map[string]*pendingCall{},
	}
}

// perPrincipal is the per-principal share of the places, DefaultMaxAwaitingInputPerPrincipal
// when not set.
func perPrincipal(n int) int {
	if n <= 0 {
		return DefaultMaxAwaitingInputPerPrincipal
	}
	return n
}

// pendingCall is one stateless session's call running upstream, and the session as the server
// sees it: the conn.Caller its requests go to.
type pendingCall struct {
	session, call string         // the session, and what it called (callOf)
	principal     string         // whose session it is, for its share of the places (never shown)
	asks          chan *inputAsk // the server's requests, taken by the round waiting
	done          chan struct{}  // closed when the upstream call has ended (res, err)
	res           any
	err           error
	cancel        context.CancelFunc // ends the upstream call

	gone     chan struct{} // closed once the call is abandoned: why answers the server
	goneOnce sync.Once
	why      error

	// Under inputs.mu: the requests of the round the session was last asked, by the ids it
	// was given; the last id used; the timer of the round.
	sent  map[string]*inputAsk
	next  int
	timer *time.Timer

	mu   sync.Mutex
	caps *mcp.ClientCapabilities // the session's, as its latest round declared them
}

// inputAsk is one request of the server's, waiting for the session's answer.
type inputAsk struct {
	method string
	params mcp.InputRequest
	answer chan inputAnswer // buffered: the answer never waits for the server
}

type inputAnswer struct {
	data json.RawMessage
	err  error
}

// inputRound is what a round that ends asking for input gives the session.
type inputRound struct {
	requests mcp.InputRequestMap
	state    string
}

// inputError is a resumption the gateway refuses: the session gets err as a JSON-RPC error.
type inputError struct{ err *jsonrpc.Error }

func (e *inputError) Error() string { return e.err.Message }
func (e *inputError) Unwrap() error { return e.err }

// callOf names what a session called, as a state is bound to it: the method and the projected
// name (a tool's, a prompt's) or URI.
func callOf(o Origin) string { return fmt.Sprintf("%q (%s)", o.name, o.method) }

func invalidInput(format string, args ...any) *inputError {
	metrics.InputRounds.WithLabelValues("invalid").Inc()
	return &inputError{&jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "projectmcp: " + fmt.Sprintf(format, args...)}}
}

// statelessRound runs one round of a stateless session's call on server. A call that does not
// resume one of the gateway's (state "") is started upstream by send, in the background; one
// that does has the session's answers delivered to the server's requests first (an
// *inputError when the state or the answers are not acceptable). It returns the upstream's
// result once there is one, or the round to give the session when the server asks for input.
func statelessRound[T any](ctx context.Context, p *Paths, o Origin, caps *mcp.ClientCapabilities, state string,
	responses mcp.InputResponseMap, server string, send func(context.Context, *conn.Conn) (T, error)) (T, *inputRound, error) {
	var zero T
	in := p.inputs
	var pc *pendingCall
	if state != "" {
		var err error
		if pc, err = in.resume(o, caps, state, responses); err != nil {
			return zero, nil, err
		}
	} else {
		pc = in.start(ctx, o, caps, func(ctx context.Context, o Origin) (any, error) {
			return dispatch(ctx, p, o, server, send)
		})
	}
	round, err := in.wait(ctx, pc)
	if round != nil || err != nil {
		return zero, round, err
	}
	if pc.err != nil {
		return zero, nil, pc.err
	}
	res, err := resultAs[T](pc.res)
	return res, nil, err
}

// resultAs is a pending call's result as the round's caller takes it: a call the forward path
// started (bridge.go) has the server's result undecoded, and its resumption on the SDK's path
// takes it decoded.
func resultAs[T any](res any) (T, error) {
	if out, ok := res.(T); ok {
		return out, nil
	}
	var out T
	raw, isRaw := res.(conn.RawResult)
	if !isRaw {
		return out, fmt.Errorf("projectmcp: a held call's result is a %T", res)
	}
	if err := json.Unmarshal(raw, &out); err != nil || reflect.ValueOf(&out).Elem().IsZero() {
		return out, errors.New("the server's result is not one of its request's")
	}
	return out, nil
}

// start runs a call upstream, with the pending call as the session the server's requests go
// to. The call outlives the session's request once the server asks for input; it ends when
// the server answers, when it is abandoned (pendingCall.abandon), or at the gateway's call
// timeout (forward).
func (in *inputs) start(ctx context.Context, o Origin, caps *mcp.ClientCapabilities, run func(context.Context, Origin) (any, error)) *pendingCall {
	pc := &pendingCall{session: o.session, principal: o.who.Principal, call: callOf(o), caps: caps,
		asks: make(chan *inputAsk), done: make(chan struct{}), gone: make(chan struct{})}
	uctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	pc.cancel = cancel
	o.caller = pc
	go pc.run(uctx, in.log, o, run)
	return pc
}

// run runs the call on a goroutine of the gateway's own, where a panic (in the SDK's client,
// in a server's answer's handling) is the call's error, not the end of the process.
func (pc *pendingCall) run(ctx context.Context, log logr.Logger, o Origin, run func(context.Context, Origin) (any, error)) {
	defer close(pc.done)
	defer pc.cancel()
	defer func() {
		if v := recover(); v != nil {
			pc.res, pc.err = nil, recovery.Error(log, o.method, v)
		}
	}()
	pc.res, pc.err = run(ctx, o)
}

// wait waits for the upstream's result or requests. The server's requests end the round: they
// are parked for the session (or, past the project's bound, answered with an error, and the
// call goes on). A session that gives up on the round abandons the call.
func (in *inputs) wait(ctx context.Context, pc *pendingCall) (*inputRound, error) {
	for {
		select {
		case <-pc.done:
			return nil, nil
		case a := <-pc.asks:
			asks := []*inputAsk{a}
			for more := true; more; { // requests the server sent together go in one round
				select {
				case b := <-pc.asks:
					asks = append(asks, b)
				default:
					more = false
				}
			}
			round, err := in.park(pc, asks)
			if err == nil {
				return round, nil
			}
			for _, a := range asks {
				a.answer <- inputAnswer{err: err}
			}
		case <-ctx.Done():
			pc.abandon(&jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "projectmcp: the agent session gave up on the call"})
			return nil, context.Cause(ctx)
		}
	}
}

// heldBy counts the calls waiting for input of pc's session, and of every session of its
// principal; in.mu is held.
func (in *inputs) heldBy(pc *pendingCall) (session, principal int) {
	for _, other := range in.parked {
		if other.principal == pc.principal {
			principal++
			if other.session == pc.session {
				session++
			}
		}
	}
	return session, principal
}

// refusal is why a call may not wait for its session's input (nil: it may): the project's
// places are taken, its principal's share or its session's is.
func (in *inputs) refusal(pc *pendingCall) error {
	if len(in.parked) >= in.max {
		return fmt.Errorf("%d calls of this project already wait for their sessions' input (the gateway's bound); try again later", in.max)
	}
	session, principal := in.heldBy(pc)
	if in.whose > 0 && principal >= in.whose {
		return fmt.Errorf("%d calls of this identity's sessions already wait for their input, its share of the project's places; answer one first", principal)
	}
	if session >= in.each {
		return fmt.Errorf("%d calls of this session already wait for its input, its share of the project's places; answer one first", session)
	}
	return nil
}

// park keeps a call whose server asks for input until its session calls again, under a new
// state, for at most in.timeout.
func (in *inputs) park(pc *pendingCall, asks []*inputAsk) (*inputRound, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "projectmcp: the project's endpoint is closing"}
	}
	if err := in.refusal(pc); err != nil {
		metrics.InputRounds.WithLabelValues("refused").Inc()
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "projectmcp: " + err.Error()}
	}
	var random [24]byte
	_, _ = rand.Read(random[:]) // never fails (crypto/rand)
	state := inputStatePrefix + in.tag + "." + strconv.FormatInt(in.epoch(), 10) + "." + base64.RawURLEncoding.EncodeToString(random[:])
	round := &inputRound{requests: make(mcp.InputRequestMap, len(asks)), state: state}
	pc.sent = make(map[string]*inputAsk, len(asks))
	for _, a := range asks {
		pc.next++
		id := "projectmcp-" + strconv.Itoa(pc.next)
		pc.sent[id] = a
		round.requests[id] = a.params
	}
	in.parked[state] = pc
	pc.timer = time.AfterFunc(in.timeout, func() { in.expire(state, pc) })
	metrics.InputRounds.WithLabelValues("asked").Inc()
	return round, nil
}

// expire abandons a parked call its session did not resume in time.
func (in *inputs) expire(state string, pc *pendingCall) {
	in.mu.Lock()
	if in.parked[state] != pc {
		in.mu.Unlock()
		return // resumed meanwhile
	}
	delete(in.parked, state)
	in.mu.Unlock()
	metrics.InputRounds.WithLabelValues("expired").Inc()
	pc.abandon(&jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf(
		"projectmcp: the agent session did not call again with its answer within %s", in.timeout)})
}

// resume takes the parked call a session's state names, once the session's answers fit the
// server's requests, and delivers them.
func (in *inputs) resume(o Origin, caps *mcp.ClientCapabilities, state string, responses mcp.InputResponseMap) (*pendingCall, error) {
	rest := strings.TrimPrefix(state, inputStatePrefix)
	tag, rest, ok := strings.Cut(rest, ".")
	if !ok || tag != in.tag {
		return nil, invalidInput("the requestState was not issued by this project's endpoint")
	}
	if epoch, _, ok := strings.Cut(rest, "."); ok {
		if issued, err := strconv.ParseInt(epoch, 10, 64); err == nil && issued != in.epoch() {
			return nil, movedState(issued, in.epoch())
		}
	}
	pc, answers, err := in.take(o, state, responses)
	if err != nil {
		return nil, err
	}
	pc.mu.Lock()
	pc.caps = caps
	pc.mu.Unlock()
	metrics.InputRounds.WithLabelValues("answered").Inc()
	for a, data := range answers {
		a.answer <- inputAnswer{data: data}
	}
	return pc, nil
}

// take unparks the call a state names, with the session's answers to its server's requests;
// a state or answers that do not fit leave the call parked as it was.
func (in *inputs) take(o Origin, state string, responses mcp.InputResponseMap) (*pendingCall, map[*inputAsk]json.RawMessage, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	pc := in.parked[state]
	switch {
	case pc == nil:
		return nil, nil, invalidInput("the requestState is unknown or has expired (a call waits %s for its session's answers, and a state is good for one answer)", in.timeout)
	case pc.session != o.session:
		return nil, nil, invalidInput("the requestState was issued to another session of this project")
	case pc.call != callOf(o):
		return nil, nil, invalidInput("the requestState belongs to a call of %s, not of %s", pc.call, callOf(o))
	}
	answers, err := answersTo(pc.sent, responses)
	if err != nil {
		return nil, nil, err
	}
	delete(in.parked, state)
	pc.timer.Stop()
	pc.sent = nil
	return pc, answers, nil
}

// answersTo matches a session's answers to the server's requests it was sent, by the ids it
// was given: one answer of the right kind to each, and none to anything else.
func answersTo(sent map[string]*inputAsk, responses mcp.InputResponseMap) (map[*inputAsk]json.RawMessage, error) {
	answers := make(map[*inputAsk]json.RawMessage, len(sent))
	for _, id := range slices.Sorted(maps.Keys(sent)) {
		a := sent[id]
		r, ok := responses[id]
		if !ok || r == nil {
			return nil, invalidInput("inputResponses has no answer to the input request %q (%s)", id, a.method)
		}
		if !fits(a.method, r) {
			return nil, invalidInput("inputResponses[%q] is not an answer to %s", id, a.method)
		}
		data, err := json.Marshal(r)
		if err != nil {
			return nil, invalidInput("inputResponses[%q]: %v", id, err)
		}
		answers[a] = data
	}
	for _, id := range slices.Sorted(maps.Keys(responses)) {
		if _, ok := sent[id]; !ok {
			return nil, invalidInput("inputResponses[%q] answers no input request of this call", id)
		}
	}
	return answers, nil
}

// fits reports whether r can be the answer to a request of method.
func fits(method string, r mcp.InputResponse) bool {
	switch r.(type) {
	case *mcp.CreateMessageWithToolsResult, *mcp.CreateMessageResult:
		return method == "sampling/createMessage"
	case *mcp.ElicitResult:
		return method == "elicitation/create"
	}
	return false
}

// closeAll abandons every parked call (the project's endpoint is closing).
func (in *inputs) closeAll() {
	in.mu.Lock()
	in.closed = true
	parked := make([]*pendingCall, 0, len(in.parked))
	for state, pc := range in.parked {
		pc.timer.Stop()
		parked = append(parked, pc)
		delete(in.parked, state)
	}
	in.mu.Unlock()
	for _, pc := range parked {
		pc.abandon(&jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "projectmcp: the project's endpoint closed"})
	}
}

// count is the number of parked calls.
func (in *inputs) count() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.parked)
}

// abandon ends the call: the server's requests waiting get why, and the call is cancelled
// upstream.
func (pc *pendingCall) abandon(why error) {
	pc.goneOnce.Do(func() {
		pc.why = why
		close(pc.gone)
	})
	pc.cancel()
}

// ask hands one request of the server's to the round waiting (or the next), and waits for the
// session's answer, decoded into out.
func (pc *pendingCall) ask(ctx context.Context, method string, params mcp.InputRequest, out any) error {
	a := &inputAsk{method: method, params: params, answer: make(chan inputAnswer, 1)}
	select {
	case pc.asks <- a:
	case <-pc.gone:
		return pc.why
	case <-ctx.Done():
		return noAnswer(method)
	}
	select {
	case ans := <-a.answer:
		if ans.err != nil {
			return ans.err
		}
		if err := json.Unmarshal(ans.data, out); err != nil {
			return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: fmt.Sprintf(
				"projectmcp: the agent session's answer to %s does not fit this server's protocol revision: %v", method, err)}
		}
		return nil
	case <-pc.gone:
		return pc.why
	case <-ctx.Done():
		return noAnswer(method)
	}
}

func noAnswer(method string) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "projectmcp: the agent session did not answer " + method + " in time"}
}

func (pc *pendingCall) capabilities() *mcp.ClientCapabilities {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if pc.caps == nil {
		return &mcp.ClientCapabilities{}
	}
	return pc.caps
}

// CreateMessage asks the session for a sampling, when it declared the capability.
func (pc *pendingCall) CreateMessage(ctx context.Context, p *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error) {
	return askFor[mcp.CreateMessageResult](ctx, pc, pc.capabilities().Sampling != nil, "sampling", "sampling/createMessage", p)
}

// Elicit asks the session for input, when it declared the capability.
func (pc *pendingCall) Elicit(ctx context.Context, p *mcp.ElicitParams) (*mcp.ElicitResult, error) {
	return askFor[mcp.ElicitResult](ctx, pc, pc.capabilities().Elicitation != nil, "elicitation", "elicitation/create", p)
}

// askFor asks pc's session a request of method for its result, when the session declared the
// capability (else the server gets a clear error, as the session would give).
func askFor[R any](ctx context.Context, pc *pendingCall, declared bool, capability, method string, params mcp.InputRequest) (*R, error) {
	if !declared {
		return nil, lacks(capability)
	}
	var res R
	if err := pc.ask(ctx, method, params, &res); err != nil {
		return nil, err
	}
	return &res, nil
}
