package conn

import (
	"time"

	"github.com/dsh-dev/projectmcp/internal/policy"
)

// Settings are what the controller's flags set for every connection it makes. A zero field
// stands for its default (DefaultSettings), so that a caller sets only what it means to.
type Settings struct {
	// AllowCommands, when not nil, lists the glob patterns a stdio command (as written in
	// spec, before expansion) must match to be started; others fail at once. Nil allows all.
	AllowCommands []string
	// Isolation is what server processes get from the controller (environment, HOME, user).
	Isolation policy.Isolation

	// ConnectTimeout bounds one connect attempt, initialize and the first listing included.
	ConnectTimeout time.Duration
	// HealthInterval is how often an idle connection is probed (ping, or on the 2026-07-28
	// protocol, which has no ping, a list the server declared: probeMethod).
	HealthInterval time.Duration
	// RelistInterval is the backstop re-list for servers whose list_changed notifications are
	// lost (the 2026-07-28 subscription stream can die silently).
	RelistInterval time.Duration

	// The bounds on what the server may send (limits.go), each a controller flag.
	//
	// MaxMessageBytes bounds one message from the server, on every transport and path: an
	// answer over it fails the request it answers (with an error naming the bound) and the
	// connection goes on; any other message over it is dropped. Nothing over it is kept.
	MaxMessageBytes int64
	// MaxListItems bounds each list the server offers (tools, prompts, resources, templates),
	// whatever its paging does: a server listing more is refused with a clear error rather
	// than allowed to fill the controller's memory.
	MaxListItems int
	// MaxListPages bounds the pages of one walk through a list: a server whose nextCursor
	// never ends (even with empty pages) is refused.
	MaxListPages int
	// MaxListBytes bounds what one list keeps (its items' JSON, after the tools filter), all
	// pages together: a server listing more is refused.
	MaxListBytes int64
	// MaxSchemaBytes bounds one tool's input and output schemas together: a tool over it is
	// left out (the snapshot's Notes say which), and the server's other tools are offered.
	MaxSchemaBytes int64

	// MaxCallsPerSession and MaxCalls bound the sessions' requests in flight on the connection,
	// per session and in all (internal/fair); past either a request waits its session's turn.
	MaxCallsPerSession int
	MaxCalls           int
}

// The defaults of the bounds, each a controller flag's. An error about a bound names the flag
// and its value and what went over it, and never repeats what the server sent.
const (
	// DefaultMaxMessageBytes bounds one message from a server (--max-message-bytes).
	DefaultMaxMessageBytes = 64 << 20
	// DefaultMaxListItems bounds each list a server offers (--max-list-items).
	DefaultMaxListItems = 10000
	// DefaultMaxListPages bounds the pages of one walk through a list (--max-list-pages).
	DefaultMaxListPages = 1000
	// DefaultMaxSchemaBytes bounds one tool's input and output schemas together
	// (--max-schema-bytes).
	DefaultMaxSchemaBytes = 1 << 20
	// DefaultMaxListBytes bounds what one list holds, all its pages together
	// (--max-list-bytes).
	DefaultMaxListBytes = 64 << 20
	// DefaultMaxCallsPerSession is the default of Settings.MaxCallsPerSession
	// (--max-calls-per-session).
	DefaultMaxCallsPerSession = 16
	// DefaultMaxCalls is the default of Settings.MaxCalls (--max-calls-per-server).
	DefaultMaxCalls = 256
)

// DefaultSettings are the settings a connection gets where a field is zero, and the defaults
// of the controller's flags. AllowCommands (nil: any command) and Isolation (nothing beyond
// the clean environment every server gets) have no default but their zero value.
func DefaultSettings() Settings {
	return Settings{
		ConnectTimeout:     30 * time.Second,
		HealthInterval:     15 * time.Second,
		RelistInterval:     time.Minute,
		MaxMessageBytes:    DefaultMaxMessageBytes,
		MaxListItems:       DefaultMaxListItems,
		MaxListPages:       DefaultMaxListPages,
		MaxListBytes:       DefaultMaxListBytes,
		MaxSchemaBytes:     DefaultMaxSchemaBytes,
		MaxCallsPerSession: DefaultMaxCallsPerSession,
		MaxCalls:           DefaultMaxCalls,
	}
}

// defaults fills in the default of every field that is zero (or negative).
func (s *Settings) defaults() {
	d := DefaultSettings()
	orDefault(&s.ConnectTimeout, d.ConnectTimeout)
	orDefault(&s.HealthInterval, d.HealthInterval)
	orDefault(&s.RelistInterval, d.RelistInterval)
	orDefault(&s.MaxMessageBytes, d.MaxMessageBytes)
	orDefault(&s.MaxListItems, d.MaxListItems)
	orDefault(&s.MaxListPages, d.MaxListPages)
	orDefault(&s.MaxListBytes, d.MaxListBytes)
	orDefault(&s.MaxSchemaBytes, d.MaxSchemaBytes)
	orDefault(&s.MaxCallsPerSession, d.MaxCallsPerSession)
	orDefault(&s.MaxCalls, d.MaxCalls)
}

func orDefault[T int | int64 | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}
