package config

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// This file is a small strict JSON reader. encoding/json is not enough for a config file that
// people edit by hand: it silently keeps the last of two duplicate keys, reports byte offsets
// rather than lines and columns, and recurses without a depth bound. The reader builds a tree of
// nodes that remember where they started, so every later check can point at the offending spot.

// MaxDepth bounds object and array nesting. A real .dsh/mcp.json is four levels deep; the bound
// keeps a hostile file from exhausting the stack.
const MaxDepth = 64

type kind int

const (
	kindNull kind = iota
	kindBool
	kindNumber
	kindString
	kindArray
	kindObject
)

func (k kind) String() string {
	switch k {
	case kindNull:
		return "null"
	case kindBool:
		return "a boolean"
	case kindNumber:
		return "a number"
	case kindString:
		return "a string"
	case kindArray:
		return "an array"
	default:
		return "an object"
	}
}

// pos is a 1-based line and column; columns count characters, not bytes, as editors do.
type pos struct{ line, col int }

type node struct {
	kind    kind
	at      pos
	str     string // string value, or a number's literal text
	boolean bool
	items   []*node  // array elements
	members []member // object members in file order
}

type member struct {
	key   string
	keyAt pos
	value *node
}

// syntaxError is a JSON syntax problem at a position.
type syntaxError struct {
	at  pos
	msg string
}

type reader struct {
	data  []byte
	off   int
	line  int
	col   int
	depth int
}

// parseJSON reads exactly one JSON value from data (after an optional UTF-8 byte order mark)
// followed only by whitespace.
func parseJSON(data []byte) (*node, *syntaxError) {
	r := &reader{data: data, line: 1, col: 1}
	if strings.HasPrefix(string(data[:min(len(data), 3)]), "\uFEFF") {
		r.off = 3 // editors on Windows write a BOM; it is not content
	}
	r.skipSpace()
	if r.off >= len(r.data) {
		return nil, r.errorf("the file is empty; expected a JSON object such as {\"mcpServers\": {}}")
	}
	n, err := r.value()
	if err != nil {
		return nil, err
	}
	r.skipSpace()
	if r.off < len(r.data) {
		return nil, r.errorf("unexpected %s after the end of the top-level value", r.describe())
	}
	return n, nil
}

func (r *reader) here() pos { return pos{r.line, r.col} }

func (r *reader) errorf(format string, args ...any) *syntaxError {
	return &syntaxError{at: r.here(), msg: fmt.Sprintf(format, args...)}
}

// advance moves past one byte, keeping line and column.
func (r *reader) advance() {
	c := r.data[r.off]
	r.off++
	switch {
	case c == '\n':
		r.line++
		r.col = 1
	case c&0xC0 != 0x80: // count only the first byte of a UTF-8 sequence
		r.col++
	}
}

func (r *reader) skipSpace() {
	for r.off < len(r.data) {
		switch r.data[r.off] {
		case ' ', '\t', '\n', '\r':
			r.advance()
		default:
			return
		}
	}
}

// describe names the next input for an error message.
func (r *reader) describe() string {
	if r.off >= len(r.data) {
		return "end of file"
	}
	c, _ := utf8.DecodeRune(r.data[r.off:])
	if c == utf8.RuneError {
		return fmt.Sprintf("byte 0x%02x", r.data[r.off])
	}
	return strconv.QuoteRune(c)
}

func (r *reader) value() (*node, *syntaxError) {
	if r.off >= len(r.data) {
		return nil, r.errorf("unexpected end of file; expected a value")
	}
	switch c := r.data[r.off]; {
	case c == '{':
		return r.object()
	case c == '[':
		return r.array()
	case c == '"':
		at := r.here()
		s, err := r.string()
		if err != nil {
			return nil, err
		}
		return &node{kind: kindString, at: at, str: s}, nil
	case c == '-' || (c >= '0' && c <= '9'):
		return r.number()
	case c == 't':
		return r.literal("true", &node{kind: kindBool, boolean: true})
	case c == 'f':
		return r.literal("false", &node{kind: kindBool})
	case c == 'n':
		return r.literal("null", &node{kind: kindNull})
	default:
		return nil, r.errorf("unexpected %s; expected a value (object, array, string, number, true, false or null)", r.describe())
	}
}

func (r *reader) literal(word string, n *node) (*node, *syntaxError) {
	n.at = r.here()
	if !strings.HasPrefix(string(r.data[r.off:min(len(r.data), r.off+len(word))]), word) {
		return nil, r.errorf("unexpected %s; expected a value", r.describe())
	}
	for range word {
		r.advance()
	}
	return n, nil
}

func (r *reader) enter() *syntaxError {
	r.depth++
	if r.depth > MaxDepth {
		return r.errorf("nesting is deeper than %d levels", MaxDepth)
	}
	return nil
}

func (r *reader) object() (*node, *syntaxError) {
	n := &node{kind: kindObject, at: r.here()}
	if err := r.enter(); err != nil {
		return nil, err
	}
	r.advance() // {
	r.skipSpace()
	if r.off < len(r.data) && r.data[r.off] == '}' {
		r.advance()
		r.depth--
		return n, nil
	}
	seen := map[string]pos{}
	for {
		r.skipSpace()
		if r.off >= len(r.data) || r.data[r.off] != '"' {
			return nil, r.errorf("unexpected %s; expected a quoted key", r.describe())
		}
		keyAt := r.here()
		key, err := r.string()
		if err != nil {
			return nil, err
		}
		if first, dup := seen[key]; dup {
			return nil, &syntaxError{at: keyAt, msg: fmt.Sprintf("duplicate key %q (first at line %d, column %d)", key, first.line, first.col)}
		}
		seen[key] = keyAt
		r.skipSpace()
		if r.off >= len(r.data) || r.data[r.off] != ':' {
			return nil, r.errorf("unexpected %s after key %q; expected ':'", r.describe(), key)
		}
		r.advance()
		r.skipSpace()
		v, err := r.value()
		if err != nil {
			return nil, err
		}
		n.members = append(n.members, member{key: key, keyAt: keyAt, value: v})
		r.skipSpace()
		if r.off >= len(r.data) {
			return nil, r.errorf("unexpected end of file; expected ',' or '}'")
		}
		switch r.data[r.off] {
		case ',':
			r.advance()
		case '}':
			r.advance()
			r.depth--
			return n, nil
		default:
			return nil, r.errorf("unexpected %s; expected ',' or '}'", r.describe())
		}
	}
}

func (r *reader) array() (*node, *syntaxError) {
	n := &node{kind: kindArray, at: r.here()}
	if err := r.enter(); err != nil {
		return nil, err
	}
	r.advance() // [
	r.skipSpace()
	if r.off < len(r.data) && r.data[r.off] == ']' {
		r.advance()
		r.depth--
		return n, nil
	}
	for {
		r.skipSpace()
		v, err := r.value()
		if err != nil {
			return nil, err
		}
		n.items = append(n.items, v)
		r.skipSpace()
		if r.off >= len(r.data) {
			return nil, r.errorf("unexpected end of file; expected ',' or ']'")
		}
		switch r.data[r.off] {
		case ',':
			r.advance()
		case ']':
			r.advance()
			r.depth--
			return n, nil
		default:
			return nil, r.errorf("unexpected %s; expected ',' or ']'", r.describe())
		}
	}
}

// string reads a quoted string: valid UTF-8, no raw control characters, JSON escapes only.
func (r *reader) string() (string, *syntaxError) {
	r.advance() // opening quote
	var b strings.Builder
	for {
		if r.off >= len(r.data) {
			return "", r.errorf("unexpected end of file inside a string")
		}
		c := r.data[r.off]
		switch {
		case c == '"':
			r.advance()
			return b.String(), nil
		case c == '\\':
			if err := r.escape(&b); err != nil {
				return "", err
			}
		case c < 0x20:
			return "", r.errorf("control character 0x%02x inside a string; write it as an escape such as \\n", c)
		case c < utf8.RuneSelf:
			b.WriteByte(c)
			r.advance()
		default:
			ch, size := utf8.DecodeRune(r.data[r.off:])
			if ch == utf8.RuneError && size <= 1 {
				return "", r.errorf("invalid UTF-8 byte 0x%02x inside a string", c)
			}
			b.WriteRune(ch)
			for range size {
				r.advance()
			}
		}
	}
}

// simpleEscapes maps the character after a backslash to the byte it stands for.
var simpleEscapes = map[byte]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

func (r *reader) escape(b *strings.Builder) *syntaxError {
	at := r.here()
	r.advance() // backslash
	if r.off >= len(r.data) {
		return r.errorf("unexpected end of file inside a string")
	}
	c := r.data[r.off]
	if out, ok := simpleEscapes[c]; ok {
		b.WriteByte(out)
		r.advance()
		return nil
	}
	if c != 'u' {
		return &syntaxError{at: at, msg: fmt.Sprintf("invalid escape \\%c inside a string", c)}
	}
	r.advance()
	ch, err := r.hex4(at)
	if err != nil {
		return err
	}
	if utf16.IsSurrogate(ch) {
		// A high surrogate followed by an escaped low surrogate is one character; anything
		// else is replaced by U+FFFD, as encoding/json does.
		if r.off+1 < len(r.data) && r.data[r.off] == '\\' && r.data[r.off+1] == 'u' {
			save := *r
			r.advance()
			r.advance()
			lo, err := r.hex4(at)
			if err != nil {
				return err
			}
			if pair := utf16.DecodeRune(ch, lo); pair != utf8.RuneError {
				b.WriteRune(pair)
				return nil
			}
			*r = save
		}
		ch = utf8.RuneError
	}
	b.WriteRune(ch)
	return nil
}

func (r *reader) hex4(at pos) (rune, *syntaxError) {
	if r.off+4 > len(r.data) {
		return 0, &syntaxError{at: at, msg: "incomplete \\u escape inside a string"}
	}
	v, err := strconv.ParseUint(string(r.data[r.off:r.off+4]), 16, 32)
	if err != nil {
		return 0, &syntaxError{at: at, msg: "invalid \\u escape inside a string: four hex digits must follow \\u"}
	}
	for range 4 {
		r.advance()
	}
	return rune(v), nil
}

// number reads a JSON number and keeps its literal text; callers decide what they accept.
func (r *reader) number() (*node, *syntaxError) {
	at := r.here()
	start := r.off
	digits := func() int {
		n := 0
		for r.off < len(r.data) && r.data[r.off] >= '0' && r.data[r.off] <= '9' {
			r.advance()
			n++
		}
		return n
	}
	if r.data[r.off] == '-' {
		r.advance()
	}
	leadingZero := r.off < len(r.data) && r.data[r.off] == '0'
	if n := digits(); n == 0 {
		return nil, r.errorf("unexpected %s in a number; expected a digit", r.describe())
	} else if leadingZero && n > 1 {
		return nil, &syntaxError{at: at, msg: "a number must not start with a leading zero"}
	}
	if r.off < len(r.data) && r.data[r.off] == '.' {
		r.advance()
		if digits() == 0 {
			return nil, r.errorf("unexpected %s in a number; expected a digit after '.'", r.describe())
		}
	}
	if r.off < len(r.data) && (r.data[r.off] == 'e' || r.data[r.off] == 'E') {
		r.advance()
		if r.off < len(r.data) && (r.data[r.off] == '+' || r.data[r.off] == '-') {
			r.advance()
		}
		if digits() == 0 {
			return nil, r.errorf("unexpected %s in a number; expected a digit in the exponent", r.describe())
		}
	}
	return &node{kind: kindNumber, at: at, str: string(r.data[start:r.off])}, nil
}
