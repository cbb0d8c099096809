// Package bound holds what a server sends to the controller's bounds as its bytes go by: one
// message to --max-message-bytes, a list result to --max-list-items, on every path (the SDK's
// readers and the forwarded requests', HTTP bodies, event streams and stdio lines), without
// keeping what is over them. An answer over a bound is replaced by a JSON-RPC error answering
// the request's id, so that only that request fails and the connection goes on; anything else
// over a bound is dropped. Its errors name the flag and its value, and never repeat the
// server's bytes.
//
// It is apart from the connection that uses it (internal/conn) because it reads every byte a
// server sends: it is an engine held to the call path's benchmarks (make bench:
// BenchmarkGatewayCallOverhead in internal/gateway, BenchmarkCallPathProcesses in
// cmd/projectmcp) and to the memory a connection holds at scale (make bench-scale), and a
// policy against a hostile server that must hold whatever the connection's transport.
package bound

import (
	"bytes"
	"fmt"
	"math"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/dsh-dev/projectmcp/internal/jsonrpcwire"
)

// ErrorBodyBytes bounds the body of an HTTP error answer: only a JSON-RPC error in it is read.
const ErrorBodyBytes = 1 << 20

// SizeText writes a bound the way the flags' defaults read best, exactly: 64 MiB, 512 KiB,
// 1000 bytes.
func SizeText(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// messageBound names the bound on one message, for errors.
func messageBound(limit int64) string {
	return fmt.Sprintf("--max-message-bytes (%s)", SizeText(limit))
}

// TooLargeMessage is what the caller of a request is told when the server's answer to it is
// over the bound.
func TooLargeMessage(limit int64) string {
	return fmt.Sprintf("the server's answer exceeds %s, the controller's bound on one message from a server; this request failed, the connection goes on", messageBound(limit))
}

// TooLarge is the error of a request whose answer is over the bound.
func TooLarge(limit int64) error { return fmt.Errorf("%s", TooLargeMessage(limit)) }

// ErrorResponse is a JSON-RPC error response to id (raw JSON) with message: it stands in for
// an answer over a bound, so that only the request it answers fails.
func ErrorResponse(id []byte, message string) []byte {
	return jsonrpcwire.ErrorTo(id, jsonrpc.CodeInternalError, message)
}

// Top follows the top level of one JSON-RPC message as its bytes go by, without keeping
// them: it notes the value of the "id" member (when it is short), whether a "method" member is
// there, and how many items the list of a list result holds (result.tools, .prompts,
// .resources, .resourceTemplates). It is how a message too large to keep is still answered
// for (the id says whose request it answered), and how a page of a million tools is refused
// before the SDK decodes it. Malformed input gives no id; nothing panics.
type Top struct {
	started bool // the top-level value has begun
	object  bool // and it is an object
	depth   int
	inStr   bool
	esc     bool
	// Member names are followed at depth 1 (the message's) and at depth 2 inside "result".
	isKey    [3]bool   // at depth d: the next string is a member name
	member   [3]string // the member whose value is being read at depth d
	keyDepth int       // the depth of the member name being read (0: none)
	key      []byte    // its first bytes
	keyLong  bool
	inResult bool // depth 2 is the result object
	// The id.
	idMode int // 0: not reading it; 1: a string; 2: a number or literal
	id     []byte
	idBad  bool
	hasID  bool
	method bool
	// The list of a list result (at depth 3).
	list      string // which list is being counted ("" when none)
	counted   string // the list counted last
	items     int
	itemBegan bool
}

const (
	maxIDBytes  = 256
	maxKeyBytes = 24
)

// listKeys are the members of list results whose items are counted.
var listKeys = map[string]string{"tools": "tools", "prompts": "prompts", "resources": "resources", "resourceTemplates": "resource templates"}

// Feed follows the next bytes of the message.
func (t *Top) Feed(p []byte) {
	for i := 0; i < len(p); i++ {
		if t.inStr && !t.esc && t.idMode != 1 && t.keyDepth == 0 {
			// Inside a string nothing matters but its end: skip to the next quote or
			// backslash (the bulk of a large message is strings).
			rest := p[i:]
			end := bytes.IndexByte(rest, '"')
			if end < 0 {
				end = len(rest)
			}
			if b := bytes.IndexByte(rest[:end], '\\'); b >= 0 {
				end = b
			}
			if i += end; i == len(p) {
				return
			}
		}
		t.step(p[i])
	}
}

func (t *Top) step(c byte) {
	if t.inStr {
		t.stringByte(c)
		return
	}
	if t.idMode == 2 {
		switch c {
		case ',', '}', ']', ' ', '\t', '\r', '\n':
			t.idMode, t.hasID = 0, !t.idBad
		default:
			t.idByte(c)
			return
		}
	}
	switch c {
	case ' ', '\t', '\r', '\n', ':':
	case ',':
		switch {
		case t.depth == 1 && t.object:
			t.isKey[1], t.member[1] = true, ""
		case t.depth == 2 && t.inResult:
			t.isKey[2], t.member[2] = true, ""
		case t.depth == 3 && t.list != "":
			t.itemBegan = false
		}
	case '}', ']':
		switch {
		case t.depth == 3 && t.list != "":
			t.list = ""
		case t.depth == 2 && t.inResult:
			t.inResult = false
		}
		if t.depth > 0 {
			t.depth--
		}
	default:
		t.value(c)
	}
}

// value handles the first byte of a value (or of a member name).
func (t *Top) value(c byte) {
	if !t.started {
		t.started, t.object = true, c == '{'
	}
	if t.depth == 3 && t.list != "" && !t.itemBegan {
		t.itemBegan = true
		t.items++
	}
	switch c {
	case '"':
		t.inStr = true
		switch {
		case t.depth >= 1 && t.depth <= 2 && t.isKey[t.depth]:
			t.keyDepth, t.key, t.keyLong = t.depth, t.key[:0], false
		case t.depth == 1 && t.member[1] == "id" && !t.hasID:
			t.idMode, t.id, t.idBad = 1, append(t.id[:0], '"'), false
		}
	case '{', '[':
		t.depth++
		switch {
		case t.depth == 1 && t.object:
			t.isKey[1] = true
		case t.depth == 2 && c == '{' && t.member[1] == "result":
			t.inResult, t.isKey[2], t.member[2] = true, true, ""
		case t.depth == 3 && c == '[' && t.inResult && listKeys[t.member[2]] != "":
			t.list, t.counted, t.items, t.itemBegan = t.member[2], t.member[2], 0, false
		}
	default:
		if t.depth == 1 && t.object && !t.isKey[1] && t.member[1] == "id" && !t.hasID {
			t.idMode, t.id, t.idBad = 2, append(t.id[:0], c), false
		}
	}
}

func (t *Top) stringByte(c byte) {
	if t.idMode == 1 {
		t.idByte(c)
	}
	switch {
	case t.esc:
		t.esc = false
		t.keyByte(c)
	case c == '\\':
		t.esc = true
		t.keyByte(c)
	case c == '"':
		t.inStr = false
		switch {
		case t.keyDepth != 0:
			d := t.keyDepth
			t.keyDepth, t.isKey[d], t.member[d] = 0, false, ""
			if !t.keyLong {
				t.member[d] = string(t.key)
			}
			if d == 1 && t.member[1] == "method" {
				t.method = true
			}
		case t.idMode == 1:
			t.idMode, t.hasID = 0, !t.idBad
		}
	default:
		t.keyByte(c)
	}
}

func (t *Top) keyByte(c byte) {
	if t.keyDepth == 0 {
		return
	}
	if len(t.key) >= maxKeyBytes {
		t.keyLong = true
		return
	}
	t.key = append(t.key, c)
}

func (t *Top) idByte(c byte) {
	if len(t.id) >= maxIDBytes {
		t.idBad = true
		return
	}
	t.id = append(t.id, c)
}

// ID is the raw JSON of the message's id, when it had one (null does not count).
func (t *Top) ID() ([]byte, bool) {
	if !t.hasID || len(t.id) == 0 || string(t.id) == "null" {
		return nil, false
	}
	return t.id, true
}

// Response reports a message that answers a request: it has an id and no method.
func (t *Top) Response() ([]byte, bool) {
	id, ok := t.ID()
	return id, ok && !t.method
}

// Items is how many items the list of a list result held, and what they were ("" when the
// message is no list result).
func (t *Top) Items() (what string, n int) {
	return listKeys[t.counted], t.items
}

// Listing reports whether the bytes followed are inside the list of a list result, whose items
// Items counts as they come.
func (t *Top) Listing() bool { return t.list != "" }

// OverList is the error response that stands in for a list result holding more than max
// items (when msg is one): the SDK would decode them all before anything could count them.
// Only a message of more than 2·max bytes can hold that many, so smaller ones are not looked
// at.
func OverList(msg []byte, max int) []byte {
	if max <= 0 || len(msg) <= 2*max {
		return nil
	}
	var top Top
	top.Feed(msg)
	return top.overList(max)
}

func (t *Top) overList(max int) []byte {
	what, n := t.Items()
	id, ok := t.Response()
	if what == "" || n <= max || !ok {
		return nil
	}
	return ErrorResponse(id, ListMessage(what, max))
}

// ListMessage says a list result held more items than the bound.
func ListMessage(what string, max int) string {
	return fmt.Sprintf("the server lists more than %d %s in one answer, over --max-list-items (%d); refused", max, what, max)
}

// Dropped logs a message from the server over a bound (why says which) that answered no
// request of ours (a notification, a request of the server's, or something unreadable): it is
// dropped whole, and its content is not logged.
func Dropped(log logr.Logger, top *Top, why string) {
	kind := "a message that is not JSON-RPC"
	switch _, hasID := top.ID(); {
	case top.method && hasID:
		kind = "a request"
	case top.method:
		kind = "a notification"
	}
	log.Info("Dropped a message from the server", "kind", kind, "reason", why)
}

// ForSDK is the bound the SDK's own readers get: a message the connection's bound allows, plus
// room for its framing, so the SDK (whose defaults are smaller) never fails the whole
// connection on a message the bound let through.
func ForSDK(limit int64) int {
	return int(min(limit, math.MaxInt-64<<10)) + 64<<10
}
