// Package revision is the one home of the MCP protocol revisions projectmcp tells apart. A
// peer names its revision as a date (the Mcp-Protocol-Version header, initialize's
// protocolVersion); Of maps that name to a Revision, and code compares Revisions, never the
// dates: no other package holds a revision's date.
//
// Two revisions change what the gateway and a connection do: 2025-11-25, the last stateful one
// (sessions, resumable streams; the older revisions behave as it does here), and 2026-07-28,
// the stateless one (no sessions, request metadata on every request, input rounds (MRTR),
// subscriptions/listen).
package revision

// Revision is a protocol revision, ordered: a later revision is greater.
type Revision uint8

const (
	// Older is any revision before 2025-11-25 (2025-06-18 and older), or none named.
	Older Revision = iota
	// Stateful is 2025-11-25, the last revision with sessions.
	Stateful
	// Stateless is 2026-07-28: no sessions, a request carries what the session held.
	Stateless
)

// Newest is the newest revision projectmcp speaks.
const Newest = Stateless

// names are the known revisions' names, by Revision.
var names = [...]string{Older: "", Stateful: "2025-11-25", Stateless: "2026-07-28"}

// Of is the revision a peer's version names: the newest known revision not after it. A name
// later than every known revision is Newest; one earlier than 2025-11-25, or none, is Older.
// Revision names are dates (YYYY-MM-DD), which order as strings.
func Of(version string) Revision {
	for r := Newest; r > Older; r-- {
		if version >= names[r] {
			return r
		}
	}
	return Older
}

// Is says whether version names exactly r (a later date is not r, even where Of would map it
// there: a request of a revision newer than the gateway's is not one the gateway can read).
func Is(version string, r Revision) bool { return r > Older && version == names[r] }

// String is the revision's name as peers send it ("" for Older, which names no one revision).
func (r Revision) String() string {
	if int(r) < len(names) {
		return names[r]
	}
	return ""
}
