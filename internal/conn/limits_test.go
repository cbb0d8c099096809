package conn

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/test/fixture"
)

// The bounds on what a server may send, against servers that go over them: the fixture where
// it can, and a hand-written hostile server that writes its answers from generators (never
// building them in memory) where the fixture cannot. Memory is measured as the bytes this
// process allocated meanwhile (runtime.MemStats.TotalAlloc), which does not depend on when the
// collector runs: a bound, not a timing.

// allocated is how many bytes the process allocated while f ran.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// hostile is a hand-written MCP server (protocol 2025-11-25, tools only) whose tool lists and
// tool results can be as large or as endless as a test wants, written as they are generated.
type hostile struct {
	// tools writes the result of tools/list for a cursor ("" first).
	tools func(w io.Writer, cursor string)
	// huge is the size of the text the tool "huge" returns.
	huge int64
	// sse: answer each POST with an event stream (else a JSON body); lines: with the huge
	// result over many data lines, none of them over the bound.
	sse, lines bool
	// idLast: write a response's id after its result (as the TypeScript SDK does).
	idLast bool
	// stdio: no valve (a line can only be read to its end).
	stdio bool

	lists atomic.Int64 // tools/list requests answered
	wrote atomic.Int64 // bytes of huge results written
}

// valve is where the hostile server stops writing a huge result however large it was meant to
// be: a client that read this far read far past any sane bound, and the test fails.
const valve = 512 << 20

// filler writes n bytes of x from a small buffer.
func filler(w io.Writer, n int64, count *atomic.Int64) error {
	chunk := bytes.Repeat([]byte("x"), 32<<10)
	for n > 0 {
		k := min(n, int64(len(chunk)))
		if _, err := w.Write(chunk[:k]); err != nil {
			return err
		}
		n -= k
		if count != nil && count.Add(k) >= valve {
			return fmt.Errorf("the client read %d bytes of one answer", count.Load())
		}
	}
	return nil
}

// dataLines writes what it is given as event data lines of 64 KiB.
type dataLines struct {
	w    io.Writer
	left int // bytes until the next line begins
}

func (d *dataLines) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		if d.left == 0 {
			if _, err := io.WriteString(d.w, "\ndata: "); err != nil {
				return written, err
			}
			d.left = 64 << 10
		}
		k := min(len(p), d.left)
		if _, err := d.w.Write(p[:k]); err != nil {
			return written, err
		}
		p, d.left, written = p[k:], d.left-k, written+k
	}
	return written, nil
}

// answer writes the response to one request.
func (h *hostile) answer(w io.Writer, id json.RawMessage, method string, params json.RawMessage) error {
	var result func() error
	text := func(s string) func() error { return func() error { _, err := io.WriteString(w, s); return err } }
	switch method {
	case "initialize":
		result = text(`{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"hostile","version":"1"}}`)
	case "ping":
		result = text(`{}`)
	case "tools/list":
		h.lists.Add(1)
		var p struct {
			Cursor string `json:"cursor"`
		}
		_ = json.Unmarshal(params, &p)
		result = func() error { h.tools(w, p.Cursor); return nil }
	case "tools/call":
		var p struct {
			Name string `json:"name"`
		}
		_ = json.Unmarshal(params, &p)
		if p.Name != "huge" {
			result = text(`{"content":[{"type":"text","text":"ok"}]}`)
			break
		}
		result = func() error {
			if _, err := io.WriteString(w, `{"content":[{"type":"text","text":"`); err != nil {
				return err
			}
			count := &h.wrote
			if h.stdio {
				count = nil
			}
			into := w
			if h.lines {
				into = &dataLines{w: w}
			}
			if err := filler(into, h.huge, count); err != nil {
				return err
			}
			_, err := io.WriteString(w, `"}]}`)
			return err
		}
	}
	idMember := `"id":` + string(id)
	if _, err := io.WriteString(w, `{"jsonrpc":"2.0",`); err != nil {
		return err
	}
	if !h.idLast {
		io.WriteString(w, idMember+",")
	}
	if result == nil {
		io.WriteString(w, `"error":{"code":-32601,"message":"method not found"}`)
	} else {
		io.WriteString(w, `"result":`)
		if err := result(); err != nil {
			return err
		}
	}
	if h.idLast {
		io.WriteString(w, ","+idMember)
	}
	_, err := io.WriteString(w, "}")
	return err
}

// ServeHTTP serves streamable HTTP without sessions and without a GET stream.
func (h *hostile) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	var req struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	if json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req) != nil || len(req.ID) == 0 {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	bw := bufio.NewWriterSize(w, 32<<10)
	if h.sse {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(bw, "event: message\ndata: ")
	} else {
		w.Header().Set("Content-Type", "application/json")
	}
	if err := h.answer(bw, req.ID, req.Method, req.Params); err != nil {
		panic(http.ErrAbortHandler) // the client went away, or read past the valve
	}
	if h.sse {
		io.WriteString(bw, "\n\n")
	}
	bw.Flush()
}

func (h *hostile) start(t *testing.T) v1alpha1.MCPServer {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return v1alpha1.MCPServer{Name: "hostile", HTTP: &v1alpha1.HTTPServer{URL: srv.URL + "/mcp"}}
}

// hostileEnv makes the test binary a hostile stdio server; its value is "huge=<bytes>" (the
// size of the huge result), "tools=<n>" (a tool list of n tools in one page) or "stray".
const hostileEnv = "PROJECTMCP_CONN_TEST_HOSTILE"

// hostileStdio serves stdio, with the ids of its answers last. Mode "stray": before every
// answer it also answers requests nobody sent (ids the controller's forwarded requests and the
// SDK's use, and others), and asks for sampling with no call in flight; once that request
// has been answered with an error, it lists a third tool, "refused".
func hostileStdio(mode string) {
	h := &hostile{idLast: true, tools: twoTools, stdio: true}
	var n int64
	stray := mode == "stray"
	var refused bool
	if _, err := fmt.Sscanf(mode, "huge=%d", &n); err == nil {
		h.huge = n
	} else if _, err := fmt.Sscanf(mode, "tools=%d", &n); err == nil {
		h.tools = manyTools(int(n))
	} else if stray {
		h.tools = func(w io.Writer, _ string) {
			if !refused {
				twoTools(w, "")
				return
			}
			io.WriteString(w, `{"tools":[{"name":"refused","inputSchema":{"type":"object"}},{"name":"small","inputSchema":{"type":"object"}}]}`)
		}
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(nil, 1<<20)
	out := bufio.NewWriterSize(os.Stdout, 32<<10)
	for in.Scan() {
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
			Error  json.RawMessage `json:"error"`
		}
		if json.Unmarshal(in.Bytes(), &req) != nil || len(req.ID) == 0 {
			continue
		}
		if stray && req.Method == "" { // an answer to the server's own request
			if string(req.ID) == `"unasked"` && len(req.Error) > 0 && !refused {
				refused = true
				out.WriteString(`{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}` + "\n")
				out.Flush()
			}
			continue
		}
		if stray && req.Method != "initialize" {
			for _, id := range []string{`"projectmcp-999999"`, `"projectmcp-x"`, `424242`, `"nobody"`} {
				out.WriteString(`{"jsonrpc":"2.0","id":` + id + `,"result":{"content":[{"type":"text","text":"stray"}]}}` + "\n")
			}
			if !refused {
				out.WriteString(`{"jsonrpc":"2.0","id":"unasked","method":"sampling/createMessage","params":{"maxTokens":1,"messages":[]}}` + "\n")
			}
		}
		if h.answer(out, req.ID, req.Method, req.Params) != nil {
			return
		}
		out.WriteString("\n")
		if out.Flush() != nil {
			return
		}
	}
}

func hostileStdioServer(mode string) v1alpha1.MCPServer {
	return v1alpha1.MCPServer{Name: "hostile", Stdio: &v1alpha1.StdioServer{
		Command: os.Args[0], Env: []v1alpha1.NameValue{{Name: hostileEnv, Value: mode}},
	}}
}

// manyTools lists n tools in one page, written as they are generated.
func manyTools(n int) func(w io.Writer, _ string) {
	return func(w io.Writer, _ string) {
		io.WriteString(w, `{"tools":[`)
		for i := range n {
			if i > 0 {
				io.WriteString(w, ",")
			}
			fmt.Fprintf(w, `{"name":"t%d","inputSchema":{"type":"object"}}`, i)
		}
		io.WriteString(w, `]}`)
	}
}

func twoTools(w io.Writer, _ string) {
	io.WriteString(w, `{"tools":[{"name":"huge","inputSchema":{"type":"object"}},{"name":"small","inputSchema":{"type":"object"}}]}`)
}

func typedCall(c *Conn, tool string) (*mcp.CallToolResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return c.Call(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{}}, nil)
}

// mustGoOn checks that the connection is still the same Ready one and takes calls.
func mustGoOn(t *testing.T, c *Conn, before Snapshot) {
	t.Helper()
	if s := c.Snapshot(); s.Phase != v1alpha1.PhaseReady || s.ReadySince != before.ReadySince {
		t.Fatalf("the connection must go on: %s since %s (was since %s): %s", s.Phase, s.ReadySince, before.ReadySince, s.LastError)
	}
	if res, err := typedCall(c, "small"); err != nil || res.IsError {
		t.Fatalf("a call after the one over the bound: %+v %v", res, err)
	}
}

// A tool result of several GB, streamed by a server, fails that call alone with an error
// naming --max-message-bytes, and the controller reads only about the bound of it: over HTTP
// as a JSON body (chunked) or an event stream, through the SDK (Call) and forwarded (Forward), and
// over stdio as one line with its id at the end.
func TestHugeResultBounded(t *testing.T) {
	const limit = 4 << 20
	const huge = 3 << 30
	for name, server := range map[string]func(t *testing.T, h *hostile) v1alpha1.MCPServer{
		"http json":   func(t *testing.T, h *hostile) v1alpha1.MCPServer { return h.start(t) },
		"http events": func(t *testing.T, h *hostile) v1alpha1.MCPServer { h.sse = true; return h.start(t) },
		"http events of many lines": func(t *testing.T, h *hostile) v1alpha1.MCPServer {
			h.sse, h.lines = true, true
			return h.start(t)
		},
		"stdio": func(*testing.T, *hostile) v1alpha1.MCPServer { return hostileStdioServer(fmt.Sprintf("huge=%d", huge)) },
	} {
		t.Run(name, func(t *testing.T) {
			h := &hostile{huge: huge, tools: twoTools}
			c := start(t, Options{Server: server(t, h), Settings: Settings{MaxMessageBytes: limit}})
			before := waitPhase(t, c, v1alpha1.PhaseReady)
			paths := map[string]func() error{
				"typed": func() error { _, err := typedCall(c, "huge"); return err },
				"forwarded": func() error {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					_, err := c.Forward(ctx, "tools/call", []byte(`"name":"huge","arguments":{}`), nil, AcceptsStateful)
					return err
				},
			}
			for _, path := range []string{"typed", "forwarded"} {
				var err error
				h.wrote.Store(0)
				alloc := allocated(func() { err = paths[path]() })
				if name == "stdio" { // the server is another process
					t.Logf("%s: allocated %d MiB while a %d GiB result went by", path, alloc>>20, huge>>30)
				} else {
					t.Logf("%s: allocated %d MiB while a %d GiB result went by; the server wrote %d MiB of it", path, alloc>>20, huge>>30, h.wrote.Load()>>20)
				}
				if err == nil || !strings.Contains(err.Error(), "exceeds --max-message-bytes (4 MiB)") {
					t.Fatalf("%s: a result over the bound: %v", path, err)
				}
				if alloc > 8*limit {
					t.Fatalf("%s: %d MiB allocated for a result over a bound of %d MiB", path, alloc>>20, limit>>20)
				}
				if name != "stdio" && h.wrote.Load() > 16*limit {
					t.Fatalf("%s: the controller read %d MiB of a result over a bound of %d MiB", path, h.wrote.Load()>>20, limit>>20)
				}
				mustGoOn(t, c, before)
			}
		})
	}
}

// Over the SDK's paths (stdio of both revisions, stateless HTTP, legacy SSE, where the answer
// arrives on the GET stream) the fixture's answer over the bound fails that call alone, with
// an error naming the bound, and the connection goes on.
func TestSDKPathsBoundMessages(t *testing.T) {
	for name, server := range map[string]func(t *testing.T) v1alpha1.MCPServer{
		"stdio 2025-11-25": func(*testing.T) v1alpha1.MCPServer { return stdioServer("s", "--protocol", "2025-11-25") },
		"stdio 2026-07-28": func(*testing.T) v1alpha1.MCPServer { return stdioServer("s") },
		"streamable stateless": func(t *testing.T) v1alpha1.MCPServer {
			return v1alpha1.MCPServer{Name: "h", HTTP: &v1alpha1.HTTPServer{URL: fixture.StartHTTP(t, "--stateless") + "/mcp"}}
		},
		"legacy SSE": func(t *testing.T) v1alpha1.MCPServer {
			return v1alpha1.MCPServer{Name: "h", HTTP: &v1alpha1.HTTPServer{URL: fixture.StartHTTP(t, "--sse") + "/sse", Transport: v1alpha1.TransportSSE}}
		},
	} {
		t.Run(name, func(t *testing.T) {
			c := start(t, Options{Server: server(t), Settings: Settings{MaxMessageBytes: 1 << 20}})
			before := waitPhase(t, c, v1alpha1.PhaseReady)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err := c.Call(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": strings.Repeat("x", 2<<20)}}, nil)
			if err == nil || !strings.Contains(err.Error(), "exceeds --max-message-bytes (1 MiB)") {
				t.Fatalf("an answer over the bound: %v", err)
			}
			if s := c.Snapshot(); s.Phase != v1alpha1.PhaseReady || s.ReadySince != before.ReadySince {
				t.Fatalf("the connection must go on: %s %s", s.Phase, s.LastError)
			}
			if got := call(t, c, "echo", map[string]any{"text": "after"}); got != "after" {
				t.Fatalf("echo after = %q", got)
			}
		})
	}
}

// A message the bound allows passes whole, even when it is larger than the SDK's own default
// bounds (16 MiB on stdio lines and legacy SSE events), which fail the whole connection. Over
// streamable HTTP the SDK had no bound of its own: those cases check that boundedBodies hands a
// large body or event on intact.
func TestLargeMessageWithinBoundPasses(t *testing.T) {
	const size = 20 << 20
	for name, server := range map[string]func(t *testing.T, h *hostile) v1alpha1.MCPServer{
		"http json":   func(t *testing.T, h *hostile) v1alpha1.MCPServer { return h.start(t) },
		"http events": func(t *testing.T, h *hostile) v1alpha1.MCPServer { h.sse = true; return h.start(t) },
		"stdio":       func(*testing.T, *hostile) v1alpha1.MCPServer { return hostileStdioServer(fmt.Sprintf("huge=%d", size)) },
		"legacy SSE": func(t *testing.T, _ *hostile) v1alpha1.MCPServer {
			url := fixture.StartHTTP(t, "--sse", "--big-result", fmt.Sprint(size)) + "/sse"
			return v1alpha1.MCPServer{Name: "h", HTTP: &v1alpha1.HTTPServer{URL: url, Transport: v1alpha1.TransportSSE}}
		},
	} {
		t.Run(name, func(t *testing.T) {
			h := &hostile{huge: size, tools: twoTools}
			c := start(t, Options{Server: server(t, h)})
			before := waitPhase(t, c, v1alpha1.PhaseReady)
			tool, want := "huge", strings.Repeat("x", size)
			if name == "legacy SSE" {
				tool, want = "big", strings.Repeat("b", size)
			}
			res, err := typedCall(c, tool)
			if err != nil || textOf(res) != want {
				t.Fatalf("a %d MiB result within the bound: %v", size>>20, err)
			}
			if s := c.Snapshot(); s.Phase != v1alpha1.PhaseReady || s.ReadySince != before.ReadySince {
				t.Fatalf("the connection must go on: %s %s", s.Phase, s.LastError)
			}
		})
	}
}

// A server whose tools/list never ends (a nextCursor on every page, even empty ones) is
// refused after --max-list-pages pages, with an error naming the bound; so is the fixture
// paging one tool at a time past the bound. A walk within the bound lists everything.
func TestListPagesBounded(t *testing.T) {
	h := &hostile{tools: func(w io.Writer, cursor string) {
		var n int
		_, _ = fmt.Sscan(strings.TrimPrefix(cursor, "c"), &n)
		fmt.Fprintf(w, `{"tools":[],"nextCursor":"c%d"}`, n+1)
	}}
	c := start(t, Options{Server: h.start(t), Settings: Settings{MaxListPages: 50}, Policy: Policy{MaxAttempts: 0, InitialBackoff: time.Second, MaxBackoff: time.Second}})
	s := waitPhase(t, c, v1alpha1.PhaseFailed)
	if !strings.Contains(s.LastError, "tools/list goes on past 50 pages, over --max-list-pages (50)") {
		t.Fatalf("want the bound named in lastError, got %q", s.LastError)
	}
	if n := h.lists.Load(); n != 50 {
		t.Fatalf("the server was asked for %d pages, want 50", n)
	}

	paged := start(t, Options{Server: stdioServer("p", "--extra-tools", "40", "--page-size", "1"), Settings: Settings{MaxListPages: 30},
		Policy: Policy{MaxAttempts: 0, InitialBackoff: time.Second, MaxBackoff: time.Second}})
	if s := waitPhase(t, paged, v1alpha1.PhaseFailed); !strings.Contains(s.LastError, "--max-list-pages (30)") {
		t.Fatalf("the fixture paging past the bound: %q", s.LastError)
	}
	within := start(t, Options{Server: stdioServer("p", "--extra-tools", "40", "--page-size", "1"), Settings: Settings{MaxListPages: 100}})
	if s := waitPhase(t, within, v1alpha1.PhaseReady); !slices.Contains(names(s.Tools), "tool_039") {
		t.Fatalf("a walk within the bound: %v", names(s.Tools))
	}
}

// A million tools is refused without holding them, with the bounds' defaults: paged (1,000 a
// page), the walk stops at --max-list-items; in one page (about 50 MB, within
// --max-message-bytes), the page is refused as soon as it has listed more than
// --max-list-items, before the SDK decodes any of it: as a JSON body, an event, or a stdio line
// whose id comes last. The server writes the tools as it goes: they are never in its memory
// either.
func TestMillionToolsBounded(t *testing.T) {
	paged := func(w io.Writer, cursor string) {
		var page int
		_, _ = fmt.Sscan(strings.TrimPrefix(cursor, "p"), &page)
		io.WriteString(w, `{"tools":[`)
		for i := range 1000 {
			if i > 0 {
				io.WriteString(w, ",")
			}
			fmt.Fprintf(w, `{"name":"t%d_%d","inputSchema":{"type":"object"}}`, page, i)
		}
		if page < 999 {
			fmt.Fprintf(w, `],"nextCursor":"p%d"}`, page+1)
		} else {
			io.WriteString(w, `]}`)
		}
	}
	cases := map[string]struct {
		server func(t *testing.T, h *hostile) v1alpha1.MCPServer
		tools  func(w io.Writer, cursor string)
		want   string
		most   uint64 // bytes the refusal may allocate
	}{
		// The SDK's client allocates about 33 KB of garbage for each tool it decodes (a 32
		// KiB decoder buffer to check the tool's schema): 11 pages of 1,000 tools are read
		// before the walk stops.
		"paged":          {tools: paged, want: "the server lists more than 10000 tools, over --max-list-items (10000)", most: 512 << 20},
		"one page, json": {want: "more than 10000 tools in one answer, over --max-list-items (10000)", most: 32 << 20},
		"one page, events": {want: "more than 10000 tools in one answer, over --max-list-items (10000)", most: 32 << 20,
			server: func(t *testing.T, h *hostile) v1alpha1.MCPServer { h.sse = true; return h.start(t) }},
		"one page, stdio": {want: "more than 10000 tools in one answer, over --max-list-items (10000)", most: 32 << 20,
			server: func(*testing.T, *hostile) v1alpha1.MCPServer { return hostileStdioServer("tools=1000000") }},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := &hostile{tools: tc.tools}
			if h.tools == nil {
				h.tools = manyTools(1000000)
			}
			server := h.start
			if tc.server != nil {
				server = func(t *testing.T) v1alpha1.MCPServer { return tc.server(t, h) }
			}
			opts := Options{Server: server(t), Policy: Policy{MaxAttempts: 0, InitialBackoff: time.Second, MaxBackoff: time.Second}}
			var s Snapshot
			alloc := allocated(func() { s = waitPhase(t, start(t, opts), v1alpha1.PhaseFailed) })
			t.Logf("allocated %d MiB, %d pages asked for", alloc>>20, h.lists.Load())
			if !strings.Contains(s.LastError, tc.want) {
				t.Fatalf("want %q in lastError, got %q", tc.want, s.LastError)
			}
			if alloc > tc.most {
				t.Fatalf("%d MiB allocated to refuse a million tools", alloc>>20)
			}
		})
	}
}

// A tool whose schema is over --max-schema-bytes is left out with a note naming the bound and
// the tool; the server's other tools are offered and work. A 100 MB schema is over
// --max-message-bytes as well: the server is refused, and its schema never held.
func TestSchemaBounded(t *testing.T) {
	schemaTools := func(size int64) func(w io.Writer, _ string) {
		return func(w io.Writer, _ string) {
			io.WriteString(w, `{"tools":[{"name":"small","inputSchema":{"type":"object"}},{"name":"wide","inputSchema":{"type":"object","description":"`)
			_ = filler(w, size, nil)
			io.WriteString(w, `"}}]}`)
		}
	}
	h := &hostile{tools: schemaTools(2 << 20)}
	c := start(t, Options{Server: h.start(t)})
	s := waitPhase(t, c, v1alpha1.PhaseReady)
	if got := names(s.Tools); !slices.Equal(got, []string{"small"}) || s.RawToolCount != 2 || s.OmittedTools != 1 {
		t.Fatalf("tools %v (raw %d, omitted %d), want only small", got, s.RawToolCount, s.OmittedTools)
	}
	if len(s.Notes) != 1 || !strings.Contains(s.Notes[0], `"wide" (2.0 MiB)`) || !strings.Contains(s.Notes[0], "--max-schema-bytes (1 MiB)") {
		t.Fatalf("the note: %q", s.Notes)
	}
	if res, err := typedCall(c, "small"); err != nil || res.IsError {
		t.Fatalf("the other tool: %+v %v", res, err)
	}

	big := &hostile{tools: schemaTools(100 << 20)}
	var f Snapshot
	alloc := allocated(func() {
		f = waitPhase(t, start(t, Options{Server: big.start(t), Settings: Settings{MaxMessageBytes: 4 << 20},
			Policy: Policy{MaxAttempts: 0, InitialBackoff: time.Second, MaxBackoff: time.Second}}), v1alpha1.PhaseFailed)
	})
	t.Logf("allocated %d MiB to refuse a 100 MB schema", alloc>>20)
	if !strings.Contains(f.LastError, "exceeds --max-message-bytes (4 MiB)") {
		t.Fatalf("a 100 MB schema: %q", f.LastError)
	}
	if alloc > 32<<20 {
		t.Fatalf("%d MiB allocated to refuse a 100 MB schema", alloc>>20)
	}
}

// The tools a server lists are bounded all together too (--max-list-bytes): ten thousand
// tools of 10 KiB each are refused, though each is within every other bound.
func TestListBytesBounded(t *testing.T) {
	h := &hostile{tools: func(w io.Writer, cursor string) {
		var page int
		_, _ = fmt.Sscan(strings.TrimPrefix(cursor, "p"), &page)
		io.WriteString(w, `{"tools":[`)
		for i := range 100 {
			if i > 0 {
				io.WriteString(w, ",")
			}
			fmt.Fprintf(w, `{"name":"t%d_%d","description":"`, page, i)
			_ = filler(w, 10<<10, nil)
			io.WriteString(w, `","inputSchema":{"type":"object"}}`)
		}
		fmt.Fprintf(w, `],"nextCursor":"p%d"}`, page+1)
	}}
	c := start(t, Options{Server: h.start(t), Settings: Settings{MaxListBytes: 4 << 20}, Policy: Policy{MaxAttempts: 0, InitialBackoff: time.Second, MaxBackoff: time.Second}})
	s := waitPhase(t, c, v1alpha1.PhaseFailed)
	if !strings.Contains(s.LastError, "the server's tools come to more than --max-list-bytes (4 MiB) of JSON; refused") {
		t.Fatalf("want the bound named in lastError, got %q", s.LastError)
	}
	if n := h.lists.Load(); n > 5 {
		t.Fatalf("%d pages asked for; 4 MiB of 1 MiB pages is over after 5", n)
	}
}

// Measured sizes are written rounded.
func TestAboutSize(t *testing.T) {
	for n, want := range map[int64]string{2<<20 + 58: "2.0 MiB", 100050: "97.7 KiB", 300: "300 bytes"} {
		if got := aboutSize(n); got != want {
			t.Errorf("aboutSize(%d) = %q, want %q", n, got, want)
		}
	}
}

// A server that answers requests nobody sent and asks for sampling while no session calls:
// the answers are dropped without reaching any request (through the SDK or forwarded), its request
// gets an error, and the connection goes on.
func TestStrayMessagesFromServer(t *testing.T) {
	c := start(t, Options{Server: hostileStdioServer("stray")})
	before := waitPhase(t, c, v1alpha1.PhaseReady)
	waitFor(t, c, "the server to get an error for its request", func(s Snapshot) bool { return slices.Contains(names(s.Tools), "refused") })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for range 5 {
		if res, err := typedCall(c, "small"); err != nil || res.IsError || res.Content[0].(*mcp.TextContent).Text != "ok" {
			t.Fatalf("a call beside stray answers: %+v %v", res, err)
		}
		res, err := c.Forward(ctx, "tools/call", []byte(`"name":"small","arguments":{}`), nil, AcceptsAny)
		if err != nil || !strings.Contains(string(res), `"ok"`) {
			t.Fatalf("a forwarded call beside stray answers: %s %v", res, err)
		}
	}
	mustGoOn(t, c, before)
}

// What the SDK's client refused in a list is refused on the forwarded path too: a tool whose
// x-mcp-header annotations are invalid is left out with a note (the other tools are offered),
// and an answer nested deeper than the SDK's decoder takes fails the listing. Members the
// SDK's types do not read (a tool's own "uri", a "resources" member in a tools/list answer)
// fail nothing, and keys match exactly ("NAME" is not the name).
func TestForwardedListsDecodeAsTheSDK(t *testing.T) {
	h := &hostile{tools: func(w io.Writer, _ string) {
		io.WriteString(w, `{"resources":{"odd":true},"tools":[`+
			`{"name":"small","NAME":"big","uri":7,"inputSchema":{"type":"object"}},`+
			`{"name":"headed","inputSchema":{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"}}}},`+
			`{"name":"misheaded","inputSchema":{"type":"object","properties":{"a":{"type":"object","x-mcp-header":"A"}}}}]}`)
	}}
	s := waitPhase(t, start(t, Options{Server: h.start(t)}), v1alpha1.PhaseReady)
	if got := names(s.Tools); !slices.Equal(got, []string{"headed", "small"}) {
		t.Fatalf("tools %v, want headed and small", got)
	}
	if len(s.Notes) != 1 || !strings.Contains(s.Notes[0], `"misheaded"`) || !strings.Contains(s.Notes[0], "x-mcp-header") {
		t.Fatalf("the note: %q", s.Notes)
	}
	if raw := s.RawItem(KindTool, "small"); raw == nil || !strings.Contains(string(raw.Members), `"NAME":"big"`) {
		t.Fatalf("the item as sent keeps every member but name: %+v", raw)
	}

	deep := &hostile{tools: func(w io.Writer, _ string) {
		io.WriteString(w, `{"tools":[{"name":"deep","inputSchema":{"type":"object"},"x":`+strings.Repeat("[", 1001)+strings.Repeat("]", 1001)+`}]}`)
	}}
	f := waitPhase(t, start(t, Options{Server: deep.start(t), Policy: Policy{MaxAttempts: 0, InitialBackoff: time.Second, MaxBackoff: time.Second}}), v1alpha1.PhaseFailed)
	if !strings.Contains(f.LastError, "nested deeper than 1000 levels") {
		t.Fatalf("a list nested too deep: %q", f.LastError)
	}
}
