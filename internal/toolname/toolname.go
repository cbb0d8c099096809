// Package toolname projects upstream tool names into the names sessions see:
// "<server>__<tool>", a pure function of (server name, raw name, budget). The budget is the
// longest name allowed (the controller's --max-tool-name), one value for the whole process, so
// in a running controller a name depends on the server and tool names alone. Because nothing
// else goes in, neither the other servers of the project nor the other tools of the server,
// repointing, rebuilding or adding a connection never renames a tool, so session history and
// permission rules that mention a tool stay valid.
package toolname

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// MaxLength is the longest tool name the MCP specification recommends, and the largest budget.
const MaxLength = 128

// clientPrefix is the longest prefix a client the README names puts before the project
// endpoint's tool names: Claude Code shows a tool as "mcp__<entry>__<tool>", and the entry
// `projectmcp connect` writes is "projectmcp" (Cursor counts the entry's name and the tool's
// together against 60 characters, which leaves a tool 50).
const clientPrefix = "mcp__projectmcp__"

// clientLimit is where the shortest cap of the clients' model APIs cuts a name: OpenAI's
// function names stop at 64 characters, and clients cap tool names to match.
const clientLimit = 64

// DefaultBudget is the default longest projected name (47): what clientLimit leaves once
// clientPrefix is put before the name, so that every name the project endpoint lists stays
// whole and distinct in the clients the README names.
const DefaultBudget = clientLimit - len(clientPrefix)

// Separator joins the server and tool parts. Server names may not contain it nor start or end
// with '_' (the API and the config parser refuse such names), so the server part of a
// projected name ends exactly at its first Separator.
const Separator = "__"

// HashLength is the number of hex digits of the hash a changed raw name gets appended.
const HashLength = 8

// hashSuffixLength is the length of "_<hash>".
const hashSuffixLength = 1 + HashLength

// minToolPart is the least room a shortened name leaves its tool part: 7 characters of the
// raw name, enough to recognise it, and its hash.
const minToolPart = 7 + hashSuffixLength

// MinBudget is the smallest budget a name can be shortened to: the shortest server part (one
// character of the server's name and its hash), the separator and the shortest tool part.
const MinBudget = 1 + hashSuffixLength + len(Separator) + minToolPart

// Project returns the name sessions see for a server's tool, at most budget characters long
// (0 means DefaultBudget; a budget outside MinBudget..MaxLength is taken as the nearer end).
//
// A raw name that is already valid (1 or more of A-Z a-z 0-9 _ - .) and short enough (the whole
// "<server>__<raw>" is within the budget) is kept as is: "<server>__<raw>". A larger budget
// therefore renames nothing that a smaller one kept.
//
// Any other raw name must be changed, and a change alone could make two raw names of one server
// meet ("x y" and "x_y" sanitize alike; two long names may share their first hundred
// characters). So a changed name always carries a hash of the raw name:
// "<server part>__<sanitized raw, cut to fit>_<first HashLength hex digits of sha256(raw)>",
// where sanitizing turns every character outside A-Z a-z 0-9 _ - . into '_'. Two different raw
// names of a server then get different projected names unless their hashes collide (or a kept
// raw name happens to end in the exact hash of another one), and the result depends on nothing
// but (server, raw, budget): never on which other servers or tools exist, unlike a numbered
// "_2" suffix would. The projection skips the rare true collision instead of renaming.
//
// The server part of a changed name is the server's name when that leaves the tool part at
// least minToolPart characters. A server name too long for that (server names may have 64
// characters, the default budget is 47) is cut too, and marked the same way with a hash of the
// server name, the cut never ending in '_': "<sanitized server, cut>_<hash of server>". It
// depends on (server, budget) alone, so all the changed names of a server share it; it holds
// no Separator, so the server part still ends at the first one, and two servers' parts differ
// unless their hashes collide (or a server is named exactly like another's cut part).
//
// The result is always valid and within the budget, whatever the input; the guarantees above
// assume a server name the API accepts.
func Project(server, raw string, budget int) string {
	budget = clamp(budget)
	whole := sanitize(server) + Separator
	if valid(raw) && len(whole)+len(raw) <= budget {
		return whole + raw
	}
	prefix := serverPart(server, budget) + Separator
	return prefix + cut(raw, budget-len(prefix)-hashSuffixLength) + hashSuffix(raw)
}

// clamp maps any budget to one Project can honour.
func clamp(budget int) int {
	switch {
	case budget == 0:
		return DefaultBudget
	case budget < MinBudget:
		return MinBudget
	case budget > MaxLength:
		return MaxLength
	}
	return budget
}

// serverPart is the server part of a changed name within budget (see Project).
func serverPart(server string, budget int) string {
	room := budget - len(Separator) - minToolPart
	if s := sanitize(server); len(s) <= room {
		return s
	}
	// Trimmed: a cut ending in '_' would put a Separator before the hash.
	return strings.TrimRight(cut(server, room-hashSuffixLength), "_") + hashSuffix(server)
}

// cut is s sanitized and cut to at most n characters.
func cut(s string, n int) string {
	s = sanitize(s)
	if len(s) > n {
		return s[:n]
	}
	return s
}

// hashSuffix marks a changed name part: "_" and the first HashLength hex digits of sha256(s).
func hashSuffix(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "_" + hex.EncodeToString(sum[:])[:HashLength]
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
