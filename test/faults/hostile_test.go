//go:build faults

package faults

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// hostile is an MCP server over streamable HTTP (2025-11-25, no sessions) written by hand, so
// that it can answer what no SDK would send: a tools/list of a million tools or a tool result of
// gigabytes, both streamed from a generator so that the suite itself never holds them.
type hostile struct {
	url     string
	tools   int   // tools listed (in one page)
	result  int64 // bytes of text in the "huge" tool's result
	written atomic.Int64
	// flap, when set, makes the standalone stream send tools/list_changed that often, and
	// every tools/list answer differ from the one before (a tool "flap" comes and goes).
	flap  time.Duration
	lists atomic.Int64
	notes atomic.Int64 // list_changed sent
}

func startHostile(t *testing.T, tools int, result int64) *hostile {
	h := &hostile{tools: tools, result: result}
	srv := httptest.NewServer(http.HandlerFunc(h.serve))
	t.Cleanup(srv.Close)
	h.url = srv.URL + "/mcp"
	return h
}

func (h *hostile) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && h.flap > 0 {
		h.stream(w, r)
		return
	}
	if r.Method == http.MethodDelete {
		return
	}
	if r.Method != http.MethodPost {
		http.Error(w, "no standalone stream", http.StatusMethodNotAllowed)
		return
	}
	var req struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			Name string `json:"name"`
		} `json:"params"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	if len(req.ID) == 0 { // a notification
		w.WriteHeader(http.StatusAccepted)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	cw := &countingWriter{w: w, n: &h.written}
	head := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":`, req.ID)
	switch req.Method {
	case "initialize":
		w.Header().Set("Mcp-Session-Id", "hostile")
		fmt.Fprintf(cw, `%s{"protocolVersion":"2025-11-25","capabilities":{"tools":{"listChanged":true}},"serverInfo":{"name":"hostile","version":"1"}}}`, head)
	case "ping":
		fmt.Fprintf(cw, `%s{}}`, head)
	case "tools/list":
		h.list(cw, head)
	case "tools/call":
		h.call(cw, head, req.Params.Name)
	default:
		fmt.Fprintf(cw, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"no such method"}}`, req.ID)
	}
}

// list writes the tools: "huge" and "echo", then h.tools more, each with a 60-byte description,
// written as they are generated.
func (h *hostile) list(w io.Writer, head string) {
	fmt.Fprintf(w, `%s{"tools":[{"name":"huge","inputSchema":{"type":"object"}},{"name":"echo","inputSchema":{"type":"object"}}`, head)
	if h.flap > 0 && h.lists.Add(1)%2 == 0 {
		fmt.Fprint(w, `,{"name":"flap","inputSchema":{"type":"object"}}`)
	}
	desc := strings.Repeat("d", 60)
	for i := range h.tools {
		if _, err := fmt.Fprintf(w, `,{"name":"t%07d","description":%q,"inputSchema":{"type":"object"}}`, i, desc); err != nil {
			return
		}
	}
	fmt.Fprint(w, `]}}`)
}

// call answers echo with "ok" and huge with h.result bytes of text, 64 KiB at a time, stopping
// when the reader goes away.
func (h *hostile) call(w io.Writer, head, name string) {
	fmt.Fprintf(w, `%s{"content":[{"type":"text","text":"`, head)
	if name != "huge" {
		fmt.Fprint(w, `ok"}]}}`)
		return
	}
	chunk := []byte(strings.Repeat("x", 64<<10))
	for sent := int64(0); sent < h.result; sent += int64(len(chunk)) {
		if _, err := w.Write(chunk[:min(int64(len(chunk)), h.result-sent)]); err != nil {
			return
		}
	}
	fmt.Fprint(w, `"}]}}`)
}

// stream is the standalone event stream: tools/list_changed every h.flap until the client
// goes away.
func (h *hostile) stream(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	tick := time.NewTicker(h.flap)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
			if _, err := fmt.Fprint(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n\n"); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			h.notes.Add(1)
		}
	}
}

type countingWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}
