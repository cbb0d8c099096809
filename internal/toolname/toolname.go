// Package toolname projects upstream tool names into the names sessions see:
// "<server>__<tool>", a pure function of (server name, raw name). Because nothing else goes in,
// neither the other servers of the project nor the other tools of the server, repointing,
// rebuilding or adding a connection never renames a tool, so session history and permission
// rules that mention a tool stay valid.
package toolname

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// MaxLength is the longest tool name the MCP specification recommends.
const MaxLength = 128

// Separator joins the server and tool parts. Server names may not contain it nor start or end
// with '_' (the API and the config parser refuse such names), so the server part of a
// projected name ends exactly at its first Separator and two servers never share a prefix.
const Separator = "__"

// HashLength is the number of hex digits of the hash a changed raw name gets appended.
const HashLength = 8

// maxServerPart bounds the server part, so a raw name always has room. Valid server names are
// at most 64 characters, so this only matters for names the API would refuse.
const maxServerPart = 64

// Project returns the name sessions see for a server's tool.
//
// A raw name that is already valid (1 or more of A-Z a-z 0-9 _ - .) and short enough (the whole
// "<server>__<raw>" is at most MaxLength characters) is kept as is: "<server>__<raw>".
//
// Any other raw name must be changed, and a change alone could make two raw names of one server
// meet ("x y" and "x_y" sanitize alike; two long names may share their first hundred
// characters). So a changed name always carries a hash of the raw name:
// "<server>__<sanitized raw, cut to fit>_<first HashLength hex digits of sha256(raw)>", where
// sanitizing turns every character outside A-Z a-z 0-9 _ - . into '_'. Two different raw names
// of a server then get different projected names unless their hashes collide (or a kept raw
// name happens to end in the exact hash of another one), and the result depends on nothing but
// (server, raw): never on which other servers or tools exist, unlike a numbered "_2" suffix
// would. The projection skips the rare true collision instead of renaming.
//
// The result is always valid and at most MaxLength characters, whatever the input; the
// guarantees above assume a server name the API accepts.
func Project(server, raw string) string {
	prefix := sanitize(server)
	if len(prefix) > maxServerPart {
		prefix = prefix[:maxServerPart]
	}
	prefix += Separator
	if valid(raw) && len(prefix)+len(raw) <= MaxLength {
		return prefix + raw
	}
	sum := sha256.Sum256([]byte(raw))
	suffix := "_" + hex.EncodeToString(sum[:])[:HashLength]
	body := sanitize(raw)
	if room := MaxLength - len(prefix) - len(suffix); len(body) > room {
		body = body[:room]
	}
	return prefix + body + suffix
}

// Valid reports whether name uses only the characters a projected name may contain and is
// 1 to MaxLength characters long.
func Valid(name string) bool {
	return len(name) <= MaxLength && valid(name)
}

// valid reports whether s is non-empty and uses only A-Z a-z 0-9 _ - .
func valid(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !allowed(rune(s[i])) {
			return false
		}
	}
	return true
}

func allowed(c rune) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.'
}

// sanitize replaces every character outside the allowed set with '_', one '_' per character
// (per byte of invalid UTF-8), so the result is ASCII and may be cut at any byte.
func sanitize(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	for _, c := range s {
		if allowed(c) {
			b.WriteRune(c)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}
