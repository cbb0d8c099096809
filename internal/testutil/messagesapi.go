package testutil

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// MessagesAPI is a loopback stand-in for the model behind an agent such as Claude Code: it
// answers the Messages API (POST /v1/messages, streamed as server-sent events or as one JSON
// message) with the turns a test scripts, so that the agent's own code (its MCP client, its
// headers helper, its session) runs as it does for a user while the model's answers are known.
// It keeps every request it is sent, so the test can read the tools the agent offered and the
// tool results it sent back.
type MessagesAPI struct {
	// URL is the base URL the agent is given (ANTHROPIC_BASE_URL for Claude Code).
	URL string

	reply    func(*ModelRequest) ModelTurn
	mu       sync.Mutex
	requests []*ModelRequest
	unknown  []string
}

// ModelRequest is what the agent sent for one model turn: the tools it offers and the
// conversation so far.
type ModelRequest struct {
	Model    string         `json:"model"`
	Stream   bool           `json:"stream"`
	Tools    []ModelTool    `json:"tools"`
	Messages []ModelMessage `json:"messages"`
}

// ModelTool is a tool the agent offers the model, by its name as the model calls it.
type ModelTool struct {
	Name string `json:"name"`
}

// ModelMessage is one message of the conversation; Content is a string or a list of blocks.
type ModelMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// ModelBlock is a content block: text, the model's tool_use, or the agent's tool_result.
type ModelBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   json.RawMessage `json:"content,omitempty"`
	IsError   bool            `json:"is_error,omitempty"`
}

// ModelTurn is the model's answer: text, then a call of ToolName with ToolInput when ToolName
// is set (the agent runs it and sends its result in the next request).
type ModelTurn struct {
	Text      string
	ToolName  string
	ToolInput map[string]any
}

// NewMessagesAPI serves the Messages API on a loopback port until the test ends; reply
// chooses each answer from the request (it runs on the server's goroutines, one request at a
// time).
func NewMessagesAPI(t testing.TB, reply func(*ModelRequest) ModelTurn) *MessagesAPI {
	t.Helper()
	m := &MessagesAPI{reply: reply}
	srv := httptest.NewServer(http.HandlerFunc(m.serve))
	t.Cleanup(srv.Close)
	m.URL = srv.URL
	return m
}

// Requests returns the model requests received so far.
func (m *MessagesAPI) Requests() []*ModelRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]*ModelRequest(nil), m.requests...)
}

// Unknown returns the method and path of every request that was not a model turn.
func (m *MessagesAPI) Unknown() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.unknown...)
}

func (m *MessagesAPI) serve(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/messages/count_tokens":
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"input_tokens":1}`))
	case r.Method == http.MethodPost && r.URL.Path == "/v1/messages":
		var req ModelRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		m.mu.Lock()
		m.requests = append(m.requests, &req)
		n := len(m.requests)
		turn := m.reply(&req)
		m.mu.Unlock()
		m.answer(w, &req, turn, n)
	default:
		m.mu.Lock()
		m.unknown = append(m.unknown, r.Method+" "+r.URL.Path)
		m.mu.Unlock()
		http.NotFound(w, r)
	}
}

// answer writes turn as the API does: a stream of events when the request asked for one,
// else the whole message.
func (m *MessagesAPI) answer(w http.ResponseWriter, req *ModelRequest, turn ModelTurn, n int) {
	id := fmt.Sprintf("msg_%d", n)
	blocks := turn.blocks(n)
	stop := "end_turn"
	if turn.ToolName != "" {
		stop = "tool_use"
	}
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"id": id, "type": "message", "role": "assistant", "model": req.Model,
			"content": blocks, "stop_reason": stop, "stop_sequence": nil, "usage": usage()})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	send := func(event string, data map[string]any) {
		data["type"] = event
		b, _ := json.Marshal(data)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b)
	}
	send("message_start", map[string]any{"message": map[string]any{"id": id, "type": "message", "role": "assistant", "model": req.Model,
		"content": []any{}, "stop_reason": nil, "stop_sequence": nil, "usage": usage()}})
	for i, b := range blocks {
		start, delta := streamed(b)
		send("content_block_start", map[string]any{"index": i, "content_block": start})
		send("content_block_delta", map[string]any{"index": i, "delta": delta})
		send("content_block_stop", map[string]any{"index": i})
	}
	send("message_delta", map[string]any{"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": map[string]any{"output_tokens": 1}})
	send("message_stop", map[string]any{})
}

// streamed is a content block as a stream carries it: the block empty at its start, then its
// text or its input's JSON in one delta.
func streamed(b map[string]any) (start, delta map[string]any) {
	if b["type"] == "tool_use" {
		input, _ := json.Marshal(b["input"])
		return map[string]any{"type": "tool_use", "id": b["id"], "name": b["name"], "input": map[string]any{}},
			map[string]any{"type": "input_json_delta", "partial_json": string(input)}
	}
	return map[string]any{"type": "text", "text": ""}, map[string]any{"type": "text_delta", "text": b["text"]}
}

func usage() map[string]any { return map[string]any{"input_tokens": 1, "output_tokens": 1} }

// blocks are the turn's content blocks, its tool_use named after the request's number so that
// each call has an id of its own.
func (t ModelTurn) blocks(n int) []map[string]any {
	var out []map[string]any
	if t.Text != "" || t.ToolName == "" {
		out = append(out, map[string]any{"type": "text", "text": t.Text})
	}
	if t.ToolName != "" {
		input := t.ToolInput
		if input == nil {
			input = map[string]any{}
		}
		out = append(out, map[string]any{"type": "tool_use", "id": fmt.Sprintf("toolu_%d", n), "name": t.ToolName, "input": input})
	}
	return out
}

// Blocks returns a message's content as blocks (a string content is one text block).
func (msg ModelMessage) Blocks() []ModelBlock {
	var s string
	if json.Unmarshal(msg.Content, &s) == nil {
		return []ModelBlock{{Type: "text", Text: s}}
	}
	var blocks []ModelBlock
	_ = json.Unmarshal(msg.Content, &blocks)
	return blocks
}

// Last returns the request's last message (zero for none).
func (req *ModelRequest) Last() ModelMessage {
	if len(req.Messages) == 0 {
		return ModelMessage{}
	}
	return req.Messages[len(req.Messages)-1]
}

// Offers reports whether the agent offers the model a tool of that name.
func (req *ModelRequest) Offers(name string) bool {
	for _, t := range req.Tools {
		if t.Name == name {
			return true
		}
	}
	return false
}

// ResultText is a tool_result's text: its string content, or its text blocks joined.
func (b ModelBlock) ResultText() string {
	var s string
	if json.Unmarshal(b.Content, &s) == nil {
		return s
	}
	var parts []ModelBlock
	_ = json.Unmarshal(b.Content, &parts)
	var texts []string
	for _, p := range parts {
		if p.Type == "text" {
			texts = append(texts, p.Text)
		}
	}
	return strings.Join(texts, "\n")
}
