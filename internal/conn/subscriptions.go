package conn

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/sync/errgroup"

	"github.com/dsh-dev/projectmcp/internal/revision"
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
	max     int           // URIs subscribed at most (MaxSubscriptions)

	// restoring counts the URIs a restore has still to re-subscribe (or give up on): zero once
	// every restore has ended.
	restoring atomic.Int64

	mu    sync.Mutex
	level mcp.LoggingLevel // what sessions asked for (SetLogLevel)
	uris  map[string]int   // subscribed resource URIs → subscribers
}

// maxChores bounds a connection's background requests in flight: a server that never answers
// them holds at most this many goroutines, each until ConnectTimeout.
const maxChores = 4

// maxRestoring bounds the subscribes a restore has in flight at once: a server that answers
// none of them holds at most this many, each until ConnectTimeout.
const maxRestoring = 8

// MaxSubscriptions bounds the resource URIs one connection keeps subscribed on its server for
// all the project's sessions together: each costs the server a subscription, and every new
// session of the connection a subscribe to restore it. Past it a subscribe to another URI fails
// with an error naming the bound; the per-session bound (gateway) stops one session alone from
// reaching it.
const MaxSubscriptions = 1000

func newSubscriptions(ctx context.Context, o *Options, secrets *scrubber) *subscriptions {
	s := &subscriptions{ctx: ctx, timeout: o.ConnectTimeout, log: o.Log, secrets: secrets, chores: make(chan struct{}, maxChores),
		max: MaxSubscriptions, level: o.LogLevel, uris: maps.Clone(o.Subscriptions)}
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

// add counts one more subscriber of uri; first when there was none. A URI not yet subscribed
// is refused once max are (tooManySubscriptions).
func (s *subscriptions) add(uri string) (first bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.uris[uri] == 0 && len(s.uris) >= s.max {
		return false, tooManySubscriptions(s.max)
	}
	s.uris[uri]++
	return s.uris[uri] == 1, nil
}

// tooManySubscriptions is the error of a subscribe past the bound: invalid request, as the
// gateway's per-session bound answers, so that a session sees the bound named.
func tooManySubscriptions(max int) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: fmt.Sprintf(
		"the server's connection already holds %d subscribed resources for this project's sessions, the most it keeps; unsubscribe one first", max)}
}

// holds reports whether uri is subscribed.
func (s *subscriptions) holds(uri string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.uris[uri] > 0
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

// restore re-applies the log level and the subscriptions on a new session, in the background,
// and returns a wait for its end. The session is Ready meanwhile: a server slow to answer
// subscribes delays no call, and an update of a URI not yet re-subscribed is lost. At most
// maxRestoring requests are in flight, each within ConnectTimeout, and all end with ctx (the
// session's). A URI unsubscribed meanwhile is left out.
func (s *subscriptions) restore(ctx context.Context, session *mcp.ClientSession) (wait func()) {
	s.mu.Lock()
	uris := slices.Collect(maps.Keys(s.uris))
	s.mu.Unlock()
	s.restoring.Add(int64(len(uris)))
	var g errgroup.Group
	g.SetLimit(maxRestoring)
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.Go(func() error {
			if level := s.logLevel(); level != "" { // the level now: a session may have set it since
				s.applyLevel(ctx, session, level)
			}
			return nil
		})
		for _, uri := range uris {
			g.Go(func() error {
				defer s.restoring.Add(-1)
				s.resubscribe(ctx, session, uri)
				return nil
			})
		}
		_ = g.Wait()
	}()
	return func() { <-done }
}

// resubscribe sends one restore's resources/subscribe, unless the URI was unsubscribed since
// or the session ended.
func (s *subscriptions) resubscribe(ctx context.Context, session *mcp.ClientSession, uri string) {
	if ctx.Err() != nil || !s.holds(uri) {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if err := session.Subscribe(ctx, &mcp.SubscribeParams{URI: uri}); err != nil {
		s.log.V(1).Info("Re-subscribing a resource failed", "uri", uri, "error", s.secrets.scrub(err.Error()))
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
