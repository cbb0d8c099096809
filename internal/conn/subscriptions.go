package conn

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/dsh-dev/projectmcp/internal/revision"
	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// subscriptions are what the project's sessions asked of the server for the connection as a
// whole: the log level, and the resources subscribed (each URI once, with a count of its
// subscribers). They outlive the connection's sessions: every new session gets them again
// (restore), and a replacement connection takes them over (Conn.Subscriptions).
type subscriptions struct {
	ctx     context.Context // the connection's: background requests end with it
	timeout time.Duration   // ConnectTimeout: bounds each request of its own
	log     logr.Logger
	secrets *scrubber
	chores  chan struct{} // a slot per background request in flight (chore)

	mu    sync.Mutex
	level mcp.LoggingLevel // what sessions asked for (SetLogLevel)
	uris  map[string]int   // subscribed resource URIs → subscribers
}

// maxChores bounds a connection's background requests in flight: a server that never answers
// them holds at most this many goroutines, each until ConnectTimeout.
const maxChores = 4

func newSubscriptions(ctx context.Context, o *Options, secrets *scrubber) *subscriptions {
	s := &subscriptions{ctx: ctx, timeout: o.ConnectTimeout, log: o.Log, secrets: secrets, chores: make(chan struct{}, maxChores),
		level: o.LogLevel, uris: maps.Clone(o.Subscriptions)}
	if s.uris == nil {
		s.uris = map[string]int{}
	}
	return s
}

// setLevel sets the level sessions asked for.
func (s *subscriptions) setLevel(level mcp.LoggingLevel) {
	s.mu.Lock()
	s.level = level
	s.mu.Unlock()
}

// logLevel is the level sessions asked for.
func (s *subscriptions) logLevel() mcp.LoggingLevel {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.level
}

// add counts one more subscriber of uri; first when there was none.
func (s *subscriptions) add(uri string) (first bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.uris[uri]++
	return s.uris[uri] == 1
}

// any reports whether any URI is subscribed.
func (s *subscriptions) any() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.uris) > 0
}

// undo takes back an add whose resources/subscribe failed.
func (s *subscriptions) undo(uri string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.uris[uri]--; s.uris[uri] <= 0 {
		delete(s.uris, uri)
	}
}

// remove counts one subscriber of uri fewer; last when it was the last one.
func (s *subscriptions) remove(uri string) (last bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.uris[uri] <= 0 {
		return false
	}
	s.uris[uri]--
	if s.uris[uri] == 0 {
		delete(s.uris, uri)
		return true
	}
	return false
}

// taken are the subscribed URIs with their reference counts (a copy), and the log level.
func (s *subscriptions) taken() (map[string]int, mcp.LoggingLevel) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.uris), s.level
}

// restore re-applies the log level and the subscriptions on a new session.
func (s *subscriptions) restore(ctx context.Context, session *mcp.ClientSession) {
	s.mu.Lock()
	level, uris := s.level, slices.Collect(maps.Keys(s.uris))
	s.mu.Unlock()
	if level != "" {
		s.applyLevel(ctx, session, level)
	}
	for _, uri := range uris {
		sctx, cancel := context.WithTimeout(ctx, s.timeout)
		if err := session.Subscribe(sctx, &mcp.SubscribeParams{URI: uri}); err != nil {
			s.log.V(1).Info("Re-subscribing a resource failed", "uri", uri, "error", s.secrets.scrub(err.Error()))
		}
		cancel()
	}
}

// applyLevel sends logging/setLevel on a session whose server has logging and the request.
func (s *subscriptions) applyLevel(ctx context.Context, session *mcp.ClientSession, level mcp.LoggingLevel) {
	init := session.InitializeResult()
	if init.Capabilities == nil || init.Capabilities.Logging == nil || revision.Of(init.ProtocolVersion) >= revision.Stateless {
		return // 2026-07-28 has no logging/setLevel: the level travels with each request (withLevel)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if err := session.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: level}); err != nil {
		s.log.V(1).Info("Setting the server's log level failed", "level", level, "error", s.secrets.scrub(err.Error()))
	}
}

// withLevel puts the log level into a request's _meta: on 2026-07-28 servers log only within
// a request, at the level that request names.
func (s *subscriptions) withLevel(params mcp.Params) {
	level := s.logLevel()
	if level == "" {
		return
	}
	m := params.GetMeta()
	if m == nil {
		m = map[string]any{}
	}
	m[mcp.MetaKeyLogLevel] = level
	params.SetMeta(m)
}

// requestLevel is the log level a request made with ctx asks the server for: its log sink's
// (WithLogSink), else the connection's.
func (s *subscriptions) requestLevel(ctx context.Context) mcp.LoggingLevel {
	if sink, ok := ctx.Value(requestLogsKey{}).(*requestLogs); ok {
		return sink.level
	}
	return s.logLevel()
}

// chore sends a request nobody waits for (an unsubscribe) in the background, so that no
// caller, and no loop serving many projects, waits on a server for it. Each runs within
// ConnectTimeout and ends with the connection; past maxChores in flight it is dropped (the
// server then keeps a subscription nobody reads, whose updates reach no session), with a log
// line.
func (s *subscriptions) chore(method string, do func(ctx context.Context)) {
	select {
	case s.chores <- struct{}{}:
	default:
		s.log.V(1).Info("Dropped a background request: the server has not answered the earlier ones", "method", method)
		return
	}
	go func() {
		defer func() { <-s.chores }()
		ctx, cancel := context.WithTimeout(s.ctx, s.timeout)
		defer cancel()
		do(ctx)
	}()
}
