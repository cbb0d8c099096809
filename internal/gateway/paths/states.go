package paths

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/jsonrpcwire"
)

// A 2026-07-28 server's own requestState, sealed to the session and the server.
//
// A server speaking 2026-07-28 asks for input inside a result (inputRequests) with a
// requestState of its own, and the client's next request brings the state back with its
// answers. The server sees only the gateway's one connection, shared by every session of the
// project, so it cannot tell whose state comes back: a session that learnt another's state
// could answer in its place. So the state a session gets is sealed: the server's state with
// the project, the session (its ref), the server, the call (callOf) it was issued for and when,
// under an HMAC with a key of this process. A state that comes back is opened, and the
// server gets its own bytes again, only when the four are the request's and it is younger
// than its lifetime (stateLifetime); anything else gets the invalid-params error input.go
// gives for its own foreign states, and never reaches a server.
//
// The gateway's own states (input.go) are the one exception, and a state is one only while
// the inputs table holds it: whatever a state looks like, a session's string the table does
// not know is opened as a sealed one (and refused unless it is), and a server's state is
// sealed even when it begins as the gateway's do.

// serverStatePrefix starts every sealed server state, as inputStatePrefix starts the gateway's
// own.
const serverStatePrefix = "projectmcp-state."

// stateKey signs the sealed states: random per process, so a state outlives neither the
// process nor its connections (a new connection is a new server session anyway).
var stateKey = func() []byte {
	key := make([]byte, 32)
	_, _ = rand.Read(key) // never fails (crypto/rand)
	return key
}()

// stateBinding is what a server's state is sealed to.
type stateBinding struct {
	Project string `json:"p"`
	Session string `json:"s"`
	Server  string `json:"v"`
	Call    string `json:"c"`
	// Epoch is this replica's claim on the project when the state was sealed (Endpoint.Claim): a
	// state that comes back after the project moved is refused as such, whichever replica
	// opens it.
	Epoch int64 `json:"e,omitempty"`

	// now is when the state is sealed, or opened, and lifetime how long a sealed state stays
	// good (stateLifetime): not in the payload, which has the time it was sealed (Issued).
	now      time.Time
	lifetime time.Duration
}

// sealedState is the payload of a sealed state.
type sealedState struct {
	stateBinding
	// Issued is when the state was sealed, in Unix milliseconds.
	Issued int64  `json:"t"`
	State  string `json:"st"`
}

// stateLifetime is how long a sealed server state stays good after the gateway sealed it:
// the input timeout, as long as a call waits for a session's answers to the gateway's own
// input rounds. A server's state stands for the same thing (answers the session owes), and a
// state that leaked stops opening once it has passed, though the process's key lives on.
func (p *Paths) stateLifetime() time.Duration { return p.opts.InputTimeout }

// binding is what a request of session on server, described by o, seals states to.
func (p *Paths) binding(o Origin, session, server string) stateBinding {
	epoch, _ := p.ep.Claim()
	return stateBinding{Project: p.key.String(), Session: session, Server: server, Call: callOf(o), Epoch: epoch,
		now: p.opts.Clock.Now(), lifetime: p.stateLifetime()}
}

// sealState seals a server's state for the session and server of b, as issued at b.now.
func sealState(b stateBinding, state string) string {
	payload, _ := json.Marshal(sealedState{b, b.now.UnixMilli(), state}) // strings and numbers only: never fails
	enc := base64.RawURLEncoding.EncodeToString(payload)
	return serverStatePrefix + enc + "." + stateMAC(enc)
}

func stateMAC(enc string) string {
	m := hmac.New(sha256.New, stateKey)
	m.Write([]byte(enc))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// openState returns the server's own state a sealed one holds, when it was sealed for b; else
// the error the session gets, naming what does not fit.
func openState(b stateBinding, sealed string) (string, *inputError) {
	enc, mac, ok := strings.Cut(strings.TrimPrefix(sealed, serverStatePrefix), ".")
	if !strings.HasPrefix(sealed, serverStatePrefix) || !ok {
		return "", invalidInput("the requestState was not issued by this gateway (a server's state reaches a session sealed, and must come back as it was given)")
	}
	var s sealedState
	payload, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil || json.Unmarshal(payload, &s) != nil {
		return "", invalidInput("the requestState was not issued by this gateway")
	}
	// The epoch is read before the seal is checked: another replica sealed a state of the
	// project's last holder with a key of its own, and its session is to learn that the call
	// moved, not that the state was altered. The state is refused either way.
	if s.Epoch != b.Epoch {
		return "", movedState(s.Epoch, b.Epoch)
	}
	if !hmac.Equal([]byte(mac), []byte(stateMAC(enc))) {
		return "", invalidInput("the requestState was altered or was not issued by this gateway")
	}
	switch {
	case s.Project != b.Project:
		return "", invalidInput("the requestState was not issued by this project's endpoint")
	case s.Session != b.Session:
		return "", invalidInput("the requestState was issued to another session of this project")
	case s.Server != b.Server:
		return "", invalidInput("the requestState was issued for MCP server %q, not %q", s.Server, b.Server)
	case s.Call != b.Call:
		return "", invalidInput("the requestState belongs to a call of %s, not of %s", s.Call, b.Call)
	case expired(time.UnixMilli(s.Issued), b.now, b.lifetime):
		return "", invalidInput("the requestState has expired: a server's state is good for %s after the server gave it; call again without it", b.lifetime)
	}
	return s.State, nil
}

// expired reports whether a state issued at issued is past lifetime at now.
func expired(issued, now time.Time, lifetime time.Duration) bool { return now.Sub(issued) > lifetime }

// movedState is the error for a state issued while another claim on the project served it:
// the project has moved between replicas since, and the call the state belonged to ended.
func movedState(issued, now int64) *inputError {
	return invalidInput("the requestState was issued before this project moved between replicas (epoch %d, now %d): the call it belonged to ended with the move; call again without it", issued, now)
}

// holds reports whether state names a call parked for its session's input: the only
// requestState the gateway takes as its own.
func (in *inputs) holds(state string) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	_, ok := in.parked[state]
	return ok
}

// openStateJSON is openState for a requestState as a request carries it, a JSON string; it
// returns the server's own, a JSON string too. ok false: the state is not acceptable (a
// string the SDK's types would refuse, or one that is not a sealed one that fits; the
// gateway's own go to the typed path before this matters), and the typed path is to answer.
func openStateJSON(b stateBinding, raw json.RawMessage) (json.RawMessage, bool) {
	var sealed string
	if jsonrpcwire.DecodeExact(raw, &sealed) != nil {
		return nil, false
	}
	if sealed == "" {
		return raw, true
	}
	state, refused := openState(b, sealed)
	if refused != nil {
		return nil, false
	}
	out, _ := json.Marshal(state)
	return out, true
}

var requestStateKey = []byte(`"requestState"`)

// sealResultJSON seals the requestState at the top level of a result as the server sent it,
// unless it is own, the gateway's state a bridged call's input round gives (bridge notes it).
// A result without one is returned as it is.
func sealResultJSON(b stateBinding, res conn.RawResult, own string) conn.RawResult {
	if !bytes.Contains(res, requestStateKey) {
		return res
	}
	var members map[string]json.RawMessage
	var state string
	if json.Unmarshal(res, &members) != nil || json.Unmarshal(members["requestState"], &state) != nil || state == "" || state == own {
		return res
	}
	members["requestState"], _ = json.Marshal(sealState(b, state))
	out := append([]byte{'{'}, joinMembers(members)...)
	return append(out, '}')
}

// stateOf is the requestState member of a request's params or a result the SDK decoded (nil
// when it has none): the field of that name, which each of these types has.
func stateOf(v any) *string {
	switch v.(type) {
	case *mcp.CallToolParamsRaw, *mcp.GetPromptParams, *mcp.ReadResourceParams,
		*mcp.CallToolResult, *mcp.GetPromptResult, *mcp.ReadResourceResult:
		if rv := reflect.ValueOf(v); !rv.IsNil() {
			return rv.Elem().FieldByName("RequestState").Addr().Interface().(*string)
		}
	}
	return nil
}

// routed is the server a request the SDK decoded goes to, and what it names (for callOf): a
// tool or prompt by its projected name, a resource by its URI. ok false: a request that
// carries no requestState, or names nothing any server offers.
func (p *Paths) routed(req mcp.Request) (o Origin, server string, ok bool) {
	o.method = methodOf(req)
	routes := p.ep.Routes()
	byName := func(find func(string) (Route, bool)) (string, bool) {
		item, ok := find(o.name)
		return item.Server, ok
	}
	switch params := req.GetParams().(type) {
	case *mcp.CallToolParamsRaw:
		if params != nil {
			o.name = params.Name
			server, ok = byName(routes.tool)
		}
	case *mcp.GetPromptParams:
		if params != nil {
			o.name = params.Name
			server, ok = byName(routes.prompt)
		}
	case *mcp.ReadResourceParams:
		if params != nil {
			o.name = params.URI
			server, ok = routes.Owner(params.URI)
		}
	}
	return o, server, ok
}

// SealStates is a receiving middleware of the project's MCP server: on the typed path, it opens
// the sealed server state a request brings back before the handler sends it on, and seals the
// server's state in the handler's result. A state the inputs table holds is the gateway's own:
// it passes as it is, and the handler is told so (ownState), so that it resumes the call the
// state names and never sends it to a server. (The forward path does the same itself:
// openStateJSON, sealResultJSON.)
func (p *Paths) SealStates(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		o, server, ok := p.routed(req)
		if !ok {
			return next(ctx, method, req)
		}
		session, _ := SessionID(req)
		b := p.binding(o, session, server)
		ctx, note := withStateNote(ctx)
		if in := stateOf(req.GetParams()); in != nil && *in != "" {
			state, own, refused := p.openRequestState(b, *in)
			if refused != nil {
				return nil, refused.err
			}
			if own {
				note.own = state
			}
			*in = state
		}
		res, err := next(ctx, method, req)
		// The handler's result carries the gateway's own state when it asks the session for
		// input (a round: inRounds notes it), which stays as it is; any other is the server's.
		if out := stateOf(res); err == nil && out != nil && *out != "" && *out != note.issued {
			*out = sealState(b, *out)
		}
		return res, err
	}
}

// openRequestState is what a request's requestState stands for: the gateway's own while the
// inputs table holds it (own), else the server's state a sealed one holds. A string of the
// gateway's form that the table does not hold is refused in the words resume has for it (of
// another project, of an earlier claim on this one, lapsed or never issued): resume changes
// nothing for a state the table does not hold.
func (p *Paths) openRequestState(b stateBinding, state string) (opened string, own bool, refused *inputError) {
	switch {
	case p.inputs.holds(state):
		return state, true, nil
	case isInputState(state):
		_, err := p.inputs.resume(Origin{}, nil, state, nil)
		if !errors.As(err, &refused) {
			refused = invalidInput("the requestState is unknown or has expired")
		}
		return "", false, refused
	}
	opened, refused = openState(b, state)
	return opened, false, refused
}

// stateNote is what SealStates and a typed handler tell each other of the gateway's own
// states in one request: the one the request brings (own), which the inputs table held, and
// the one the handler's round gives the session (issued).
type stateNote struct{ own, issued string }

// stateNoteKey keys a typed request's stateNote in its context.
type stateNoteKey struct{}

// isOwnState reports whether state is the gateway's own state SealStates found in the request
// ctx belongs to.
func isOwnState(ctx context.Context, state string) bool {
	note, _ := ctx.Value(stateNoteKey{}).(*stateNote)
	return state != "" && note != nil && note.own == state
}

// withStateNote is ctx with a note of its own, for the forward path's sealing as SealStates
// has for the typed path's.
func withStateNote(ctx context.Context) (context.Context, *stateNote) {
	note := &stateNote{}
	return context.WithValue(ctx, stateNoteKey{}, note), note
}

// noteIssued tells the sealing of the request ctx belongs to (SealStates, or the forward
// path's) that its result carries the gateway's own state: it is not sealed.
func noteIssued(ctx context.Context, state string) {
	if note, _ := ctx.Value(stateNoteKey{}).(*stateNote); note != nil {
		note.issued = state
	}
}
