package gateway

import (
	"context"
	"fmt"
	"sync"

	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/gateway/paths"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Subscriptions: a session subscribes a URI; the connection of the server that owns it is
// subscribed once for all sessions (reference-counted in conn, carried across a repoint),
// and notifications/resources/updated reaches only the sessions that subscribed (the SDK
// keeps who; for a 2026-07-28 listen the gateway serves, its listeners do: listen.go). A
// session that ends drops its subscriptions.

// subscriptions are an endpoint's sessions' resource subscriptions: the SDK server's subscribe
// and unsubscribe handlers, and the listens' (listen.go). Each session's URIs are kept in the
// session table, under its lock; listens, the origin of each subscriptions/listen the SDK
// serves, are this part's own.
type subscriptions struct {
	sessions *sessions
	paths    *paths.Paths
	routes   func() *paths.Routes
	lookup   func(session, server string) *conn.Conn // the session's connection to server, now
	max      int                                     // per session (Options.MaxSubscriptionsPerSession)
	listens  sync.Map                                // *mcp.ServerSession of a subscriptions/listen → its paths.Origin
}

// DefaultMaxSubscriptionsPerSession is the default of Options.MaxSubscriptionsPerSession.
const DefaultMaxSubscriptionsPerSession = 100

// subscriptionsPerPrincipal is how many sessions' worth of subscriptions one identity's
// sessions hold together: sessions cost nothing to open, so a bound per session alone bounds
// nothing an identity holds on the shared connections.
const subscriptionsPerPrincipal = 4

// subscribe subscribes a session to a URI. The session's entry is claimed before the upstream
// subscribe, so two concurrent subscribes of one session to one URI subscribe the connection
// once (a second reference would never be dropped); a failed subscribe takes the entry out,
// and one the session dropped meanwhile gives its reference back.
func (s *subscriptions) subscribe(ctx context.Context, req *mcp.SubscribeRequest) error {
	return s.subscribeAs(ctx, s.subscriber(req), req.Params.URI)
}

// subscribeAs subscribes the session o names to a URI: subscribe's, and a listen's the
// gateway serves (listen.go).
func (s *subscriptions) subscribeAs(ctx context.Context, o paths.Origin, uri string) error {
	server, ok := s.routes().Owner(uri)
	if !ok {
		// The SDK's own code for a missing resource, which its compatibility setting can make
		// -32002 rather than jsonrpc.CodeInvalidParams.
		return &jsonrpc.Error{Code: mcp.CodeResourceNotFound, Message: fmt.Sprintf("no server of this project lists the resource %q", uri)} //nolint:staticcheck // see above
	}
	id := o.Session()
	if claimed, err := s.claim(id, o.Who().Principal, uri); !claimed {
		return err
	}
	subscribed, err := s.paths.Subscribe(ctx, o, server, uri)
	still := s.sessions.settle(id, uri, server, err == nil)
	if err != nil {
		return paths.RequestError(ctx, err)
	}
	if !still {
		subscribed.Unsubscribe(uri)
	}
	return nil
}

// pendingSubscription marks a session's subscription whose upstream subscribe is under way:
// dropping it unsubscribes nothing (subscribe gives the reference back).
const pendingSubscription = ""

// claim makes the session's entry for uri, on principal's share; false when it has one already
// (nil error) or is at its bound or its principal's (the error names it).
func (s *subscriptions) claim(id, principal, uri string) (bool, error) {
	claimed, err := s.sessions.claim(id, principal, uri, s.max, subscriptionsPerPrincipal*s.max)
	if err != nil {
		return false, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: err.Error()}
	}
	return claimed, nil
}

func (s *subscriptions) unsubscribe(_ context.Context, req *mcp.UnsubscribeRequest) error {
	s.drop(s.subscriber(req).Session(), req.Params.URI)
	return nil
}

// subscriber describes who a subscribe or unsubscribe is for. A 2026-07-28 session subscribes
// with the resourceSubscriptions of its subscriptions/listen, which the SDK's server turns into
// subscribe requests of its own that carry none of the listen's HTTP request: they are the
// listen's (listenMiddleware noted it by the request's session), so its session's.
func (s *subscriptions) subscriber(req mcp.Request) paths.Origin {
	if ss, ok := req.GetSession().(*mcp.ServerSession); ok && req.GetExtra() == nil {
		if o, ok := s.listens.Load(ss); ok {
			return o.(paths.Origin)
		}
	}
	return paths.OriginOf(req)
}

// listenMiddleware notes the origin of each subscriptions/listen by its request's session for
// as long as it runs (subscriber).
func (s *subscriptions) listenMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		ss, ok := req.GetSession().(*mcp.ServerSession)
		if method != "subscriptions/listen" || !ok {
			return next(ctx, method, req)
		}
		s.listens.Store(ss, paths.OriginOf(req))
		defer s.listens.Delete(ss)
		return next(ctx, method, req)
	}
}

// drop ends one session's subscription to a URI.
func (s *subscriptions) drop(id, uri string) {
	server, ok := s.sessions.unsubscribe(id, uri)
	if !ok || server == pendingSubscription {
		return
	}
	if c := s.lookup(id, server); c != nil {
		c.Unsubscribe(uri)
	}
}
