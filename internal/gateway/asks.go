package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/internal/conn"
)

// A 2025-11-25 server's request during a call (sampling, elicitation) goes to the calling
// session on that call's own stream, as the server sends it to a direct client on the call's
// response stream: the client ties it to its call, and needs no GET stream open for it. The
// event is written by the call's own goroutine (relayCall), and kept with the call's stream
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
	if !strings.Contains(string(body), askPrefix) {
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
	if c.capabilities().Sampling == nil {
		return nil, lacks("sampling")
	}
	var res mcp.CreateMessageResult
	return &res, c.ask(ctx, "sampling/createMessage", p, &res)
}

func (c *callStream) Elicit(ctx context.Context, p *mcp.ElicitParams) (*mcp.ElicitResult, error) {
	caps := c.capabilities().Elicitation
	if caps == nil {
		return nil, lacks("elicitation")
	}
	p = withMode(p)
	if p.Mode == "url" && caps.URL == nil {
		return nil, lacks(`"url" elicitation`)
	}
	var res mcp.ElicitResult
	return &res, c.ask(ctx, "elicitation/create", p, &res)
}

// withMode names the mode of an elicitation that names none, as the SDK's server does: "url"
// when it has a URL or an elicitation id, else "form" (a 2025-11-25 client requires one).
func withMode(p *mcp.ElicitParams) *mcp.ElicitParams {
	if p.Mode != "" {
		return p
	}
	named := *p
	named.Mode = "form"
	if p.URL != "" || p.ElicitationID != "" {
		named.Mode = "url"
	}
	return &named
}

// ask sends one request on the call's stream and waits for the session's answer (ctx bounds
// it: conn's ServerRequestTimeout, the call's end).
func (c *callStream) ask(ctx context.Context, method string, params any, out any) error {
	id, ch := c.asks.expect(c.ref)
	defer c.asks.forget(c.ref, id)
	data, err := json.Marshal(struct {
		JSONRPC string `json:"jsonrpc"`
		ID      string `json:"id"`
		Method  string `json:"method"`
		Params  any    `json:"params"`
	}{"2.0", id, method, params})
	if err != nil {
		return err
	}
	c.put(relayed{request: data})
	select {
	case ans := <-ch:
		if ans.err != nil {
			return ans.err
		}
		if err := json.Unmarshal(ans.result, out); err != nil {
			return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "projectmcp: the session's answer to " + method + " is not a result of it: " + err.Error()}
		}
		return nil
	case <-ctx.Done():
		return errors.New("projectmcp: the session did not answer " + method + " in time")
	}
}
