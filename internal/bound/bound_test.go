package bound

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/go-logr/logr"
)

// Top finds a message's id and method as its bytes go by, in any member order, never
// takes a nested "id" for the message's, and counts the items of a list result's list only.
func TestTop(t *testing.T) {
	for _, tc := range []struct {
		msg, id string
		method  bool
		list    string
		items   int
	}{
		{`{"jsonrpc":"2.0","id":7,"result":{"id":"inner"}}`, `7`, false, "", 0},
		{`{"result":{"content":[{"id":1,"text":"a\"id\":9"}]},"jsonrpc":"2.0","id":"projectmcp-3"}`, `"projectmcp-3"`, false, "", 0},
		{`{"jsonrpc":"2.0","method":"notifications/message","params":{"id":5}}`, ``, true, "", 0},
		{"{ \"id\" : 12 ,\n\"method\":\"sampling/createMessage\"}", `12`, true, "", 0},
		{`{"jsonrpc":"2.0","id":null,"error":{}}`, ``, false, "", 0},
		{`[{"id":1}]`, ``, false, "", 0},
		{`{"id":"\"quoted\\"}`, `"\"quoted\\"`, false, "", 0},
		{`{"id":`, ``, false, "", 0},
		{`garbage "id":1`, ``, false, "", 0},
		{`{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"a","x":[1,{"tools":[]}]},{"name":"b,]"}],"nextCursor":"c"}}`, `1`, false, "tools", 2},
		{`{"result":{"content":[{"tools":[1,2,3]}],"structuredContent":{"tools":[1]}},"id":2}`, `2`, false, "", 0},
		{`{"result":{"resourceTemplates":[]},"id":3}`, `3`, false, "resource templates", 0},
		{`{"result":{"prompts":[ "a" , "b" ,3 ]},"id":4}`, `4`, false, "prompts", 3},
		{`{"params":{"tools":[1,2]},"method":"x"}`, ``, true, "", 0},
	} {
		var top Top
		for i := range len(tc.msg) { // one byte at a time: pieces may end anywhere
			top.Feed([]byte{tc.msg[i]})
		}
		var whole Top
		whole.Feed([]byte(tc.msg))
		id, ok := top.ID()
		list, items := top.Items()
		if string(id) != tc.id || ok != (tc.id != "") || top.method != tc.method || list != tc.list || items != tc.items {
			t.Errorf("%s: id %s (%v), method %v, list %q of %d", tc.msg, id, ok, top.method, list, items)
		}
		if wid, _ := whole.ID(); string(wid) != string(id) || whole.items != top.items {
			t.Errorf("%s: fed whole, id %s and %d items", tc.msg, wid, whole.items)
		}
	}
}

// An event stream is passed on unchanged within the bound; an event over it is replaced by an
// error answering its id (found wherever it is) or dropped, and the stream goes on; on a
// request's own stream, the request fails and the stream ends there.
func TestEventBodyBounded(t *testing.T) {
	const limit = 1 << 10
	big := strings.Repeat("z", 4<<10)
	stream := "event: message\nid: 1\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\n" +
		": a comment\r\n\r\n" +
		"data: {\"jsonrpc\":\"2.0\",\"result\":{\"text\":\"" + big + "\"},\n" +
		"data: \"id\":42}\n\n" +
		"data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{\"data\":\"" + big + "\"}}\n\n" +
		"data: {\"jsonrpc\":\"2.0\",\"id\":43,\"result\":{}}\n\n" +
		"data: {\"result\":{\"tools\":[{},{},{},{}]},\"id\":44}\n\n"
	read := func(req *http.Request) string {
		t.Helper()
		var outs []string
		// Read into buffers large enough to be read into directly and, through a small
		// reader buffer, through the pooled chunks: the same stream either way.
		for _, small := range []bool{false, true} {
			b := &eventBody{src: io.NopCloser(iotest.OneByteReader(strings.NewReader(stream))), req: req,
				t: &Bodies{Limit: limit, Items: 3, Log: logr.Discard()}}
			var r io.Reader = b
			if small {
				r = bufio.NewReaderSize(b, 16)
			}
			out, err := io.ReadAll(r)
			if err != nil {
				t.Fatal(err)
			}
			outs = append(outs, string(out))
		}
		if outs[0] != outs[1] {
			t.Errorf("read in small pieces:\n%s\nin large ones:\n%s", outs[1], outs[0])
		}
		return outs[0]
	}
	get, _ := http.NewRequest(http.MethodGet, "http://server/mcp", nil)
	want := "event: message\nid: 1\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\n" +
		": a comment\r\n\r\n" +
		"event: message\ndata: " + string(ErrorResponse([]byte("42"), TooLargeMessage(limit))) + "\n\n" +
		"data: {\"jsonrpc\":\"2.0\",\"id\":43,\"result\":{}}\n\n" +
		"event: message\ndata: " + string(ErrorResponse([]byte("44"), ListMessage("tools", 3))) + "\n\n"
	if got := read(get); got != want {
		t.Errorf("the GET stream:\n%s\nwant:\n%s", got, want)
	}
	post, _ := http.NewRequest(http.MethodPost, "http://server/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":41,"method":"tools/call","params":{}}`))
	want = "event: message\nid: 1\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\"}\n\n" +
		": a comment\r\n\r\n" +
		"event: message\ndata: " + string(ErrorResponse([]byte("41"), TooLargeMessage(limit))) + "\n\n"
	if got := read(post); got != want {
		t.Errorf("a request's stream:\n%s\nwant:\n%s", got, want)
	}
}

// An event stream that waits for its next event holds no buffer of its own: the bytes are
// read into the reader's buffer (the SDK's bufio.Reader), so a GET stream or a
// subscriptions/listen, which wait almost all the time, cost no pooled chunk each.
func TestEventBodyReadsIntoCallersBuffer(t *testing.T) {
	src := &recordingReader{r: strings.NewReader("data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n\n")}
	get, _ := http.NewRequest(http.MethodGet, "http://server/mcp", nil)
	b := &eventBody{src: io.NopCloser(src), req: get, t: &Bodies{Limit: 1 << 20, Items: 10, Log: logr.Discard()}}
	buf := make([]byte, 4096)
	if _, err := b.Read(buf); err != nil {
		t.Fatal(err)
	}
	if len(src.bufs) == 0 || &src.bufs[0][0] != &buf[0] {
		t.Errorf("the stream was read into a buffer of its own, not the caller's")
	}
}

type recordingReader struct {
	r    io.Reader
	bufs [][]byte
}

func (r *recordingReader) Read(p []byte) (int, error) {
	r.bufs = append(r.bufs, p)
	return r.r.Read(p)
}

// Bounds are written exactly: they name a flag's value.
func TestSizeText(t *testing.T) {
	for n, want := range map[int64]string{64 << 20: "64 MiB", 512 << 10: "512 KiB", 1000: "1000 bytes", 1<<20 + 1: "1048577 bytes"} {
		if got := SizeText(n); got != want {
			t.Errorf("SizeText(%d) = %q, want %q", n, got, want)
		}
	}
}
