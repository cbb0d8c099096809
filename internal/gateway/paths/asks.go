package paths

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/jsonrpcwire"
)

// A 2025-11-25 server's request during a call (sampling, elicitation) goes to the calling
// session on that call's own stream, as the server sends it to a direct client on the call's
// response stream: the client ties it to its call, and needs no GET stream open for it. The
// event is written by the call's own writer (relayCall), and kept with the call's stream
// for a resumption; the session's answer is a JSON-RPC response it POSTs (askPrefix ids), and
// only that session's answer is taken.

// askPrefix starts the ids of the requests the gateway sends on calls' streams.
const askPrefix = "pmcp-ask-"

// asks are the requests a project's sessions have been sent on calls' streams and not answered.
type asks struct {
	mu      sync.Mutex
	next    uint64
	waiting map[string]chan answer // by session and id (askKey)
}

// answer is a session's response to one of the gateway's requests.
type answer struct {
	result json.RawMessage
	err    *jsonrpc.Error
}

func askKey(session, id string) string { return session + "\x00" + id }

// expect opens a request of session's: its id and where its answer comes.
func (a *asks) expect(session string) (string, chan answer) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.next++
	id := askPrefix + strconv.FormatUint(a.next, 10)
	if a.waiting == nil {
		a.waiting = map[string]chan answer{}
	}
	ch := make(chan answer, 1)
	a.waiting[askKey(session, id)] = ch
	return id, ch
}

func (a *asks) forget(session, id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.waiting, askKey(session, id))
}

// awaits reports whether session has a request id waiting for its answer.
func (a *asks) awaits(session, id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.waiting[askKey(session, id)]
	return ok
}

// deliver hands session's answer to the request it names; false when session has no such
// request waiting (another session's, answered already, or never sent).
func (a *asks) deliver(session, id string, ans answer) bool {
	a.mu.Lock()
	ch := a.waiting[askKey(session, id)]
	delete(a.waiting, askKey(session, id))
	a.mu.Unlock()
	if ch == nil {
		return false
	}
	ch <- ans // buffered: never blocks
	return true
}

// answerOf reads a POSTed body that answers one of the gateway's requests: its id and answer.
func answerOf(body []byte) (string, answer, bool) {
	if !bytes.Contains(body, []byte(askPrefix)) { // most bodies are not answers: not decoded
		return "", answer{}, false
	}
	var msg struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      string          `json:"id"`
		Method  string          `json:"method"`
		Result  json.RawMessage `json:"result"`
		Error   *jsonrpc.Error  `json:"error"`
	}
	if json.Unmarshal(body, &msg) != nil || msg.JSONRPC != "2.0" || msg.Method != "" ||
		!strings.HasPrefix(msg.ID, askPrefix) || (msg.Result == nil) == (msg.Error == nil) {
		return "", answer{}, false
	}
	return msg.ID, answer{result: msg.Result, err: msg.Error}, true
}

// callStream is the caller of a stateful session's call that has an event stream: the
// server's requests go on it (put, to the call's goroutine), after the capability checks of
// sessionCaller.
type callStream struct {
	sessionCaller
	asks *asks
	ref  string
	put  func(relayed)
}

var _ conn.CallOf = (*callStream)(nil)

// Session is the session's own caller (conn counts sessions by it).
func (c *callStream) Session() conn.Caller { return c.sessionCaller }

func (c *callStream) CreateMessage(ctx context.Context, p *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error) {
	var res mcp.CreateMessageResult
	return &res, c.askTyped(ctx, "sampling/createMessage", p, &res)
}

func (c *callStream) Elicit(ctx context.Context, p *mcp.ElicitParams) (*mcp.ElicitResult, error) {
	var res mcp.ElicitResult
	return &res, c.askTyped(ctx, "elicitation/create", p, &res)
}

// askTyped is AskRaw for the typed path (the SDK's client handlers).
func (c *callStream) askTyped(ctx context.Context, method string, params, out any) error {
	raw, err := json.Marshal(params)
	if err != nil {
		return err
	}
	res, err := c.AskRaw(ctx, method, raw)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(res, out); err != nil {
		return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "projectmcp: the session's answer to " + method + " is not a result of it: " + err.Error()}
	}
	return nil
}

var _ conn.RawAsker = (*callStream)(nil)

// AskRaw sends the server's request on the call's stream, as the server sent it (but for an
// elicitation's mode, which a 2025-11-25 client requires), after the capability checks of
// sessionCaller, and returns the session's answer as it sent it.
func (c *callStream) AskRaw(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	caps := c.capabilities()
	switch method {
	case "sampling/createMessage":
		if caps.Sampling == nil {
			return nil, lacks("sampling")
		}
	case "elicitation/create":
		if caps.Elicitation == nil {
			return nil, lacks("elicitation")
		}
		var named bool
		if params, named = withMode(params); !named {
			return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "projectmcp: the elicitation's params are not an object"}
		}
		if mode := elicitMode(params); mode == "url" && caps.Elicitation.URL == nil {
			return nil, lacks(`"url" elicitation`)
		}
	}
	return c.ask(ctx, method, params)
}

// withMode names the mode of an elicitation that names none, as the SDK's server does: "url"
// when it has a URL or an elicitation id, else "form"; false when params is not an object.
func withMode(params json.RawMessage) (json.RawMessage, bool) {
	var p struct {
		Mode          *string `json:"mode"`
		URL           string  `json:"url"`
		ElicitationID string  `json:"elicitationId"`
	}
	if len(params) == 0 || params[0] != '{' || json.Unmarshal(params, &p) != nil {
		return nil, false
	}
	if p.Mode != nil && *p.Mode != "" {
		return params, true
	}
	mode := `"form"`
	if p.URL != "" || p.ElicitationID != "" {
		mode = `"url"`
	}
	if p.Mode != nil { // "mode":"" is replaced, not repeated
		var m map[string]json.RawMessage
		_ = json.Unmarshal(params, &m)
		m["mode"] = json.RawMessage(mode)
		out, _ := json.Marshal(m)
		return out, true
	}
	rest := bytes.TrimSpace(params[1:])
	out := append([]byte(`{"mode":`+mode), ',')
	if len(rest) > 0 && rest[0] == '}' {
		out = out[:len(out)-1]
	}
	return append(out, rest...), true
}

// elicitMode is an elicitation's mode, as its params name it.
func elicitMode(params json.RawMessage) string {
	var p struct {
		Mode string `json:"mode"`
	}
	_ = json.Unmarshal(params, &p)
	return p.Mode
}

// ask sends one request on the call's stream and waits for the session's answer (ctx bounds
// it: conn's ServerRequestTimeout, the call's end).
func (c *callStream) ask(ctx context.Context, method string, params json.RawMessage) (json.RawMessage, error) {
	id, ch := c.asks.expect(c.ref)
	defer c.asks.forget(c.ref, id)
	data := []byte(`{"jsonrpc":"2.0","id":`)
	data = jsonrpcwire.AppendQuoted(data, id)
	data = append(data, `,"method":`...)
	data = jsonrpcwire.AppendQuoted(data, method)
	data = append(data, `,"params":`...)
	data = append(append(data, params...), '}')
	c.put(relayed{request: data})
	select {
	case ans := <-ch:
		if ans.err != nil {
			return nil, ans.err
		}
		return ans.result, nil
	case <-ctx.Done():
		return nil, errors.New("projectmcp: the session did not answer " + method + " in time")
	}
}
