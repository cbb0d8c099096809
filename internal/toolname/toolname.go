// Package toolname projects upstream tool names into the names sessions see:
// "<server>__<tool>", a pure function of (server name, raw name). Because nothing else goes in,
// repointing or rebuilding a connection never renames a tool, so session history and
// permission rules that mention a tool stay valid.
package toolname

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// MaxLength is the longest tool name the MCP specification recommends.
const MaxLength = 128

// Separator joins the server and tool parts.
const Separator = "__"

// hashLength is the number of hex digits of the suffix that keeps shortened names unique.
const hashLength = 8

// Project returns the name sessions see for a server's tool: both parts sanitized to
// A-Z a-z 0-9 _ - . (other characters become '_'), and, when the result is longer than
// MaxLength, shortened deterministically with a hash of the full unsanitized pair as suffix.
func Project(server, raw string) string {
	name := sanitize(server) + Separator + sanitize(raw)
	if len(name) <= MaxLength {
		return name
	}
	sum := sha256.Sum256([]byte(server + "\x00" + raw))
	suffix := "_" + hex.EncodeToString(sum[:])[:hashLength]
	return name[:MaxLength-len(suffix)] + suffix
}

func sanitize(s string) string {
	var b strings.Builder
	for _, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-', c == '.':
			b.WriteRune(c)
		default:
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		return "_"
	}
	return b.String()
}
