package conn

import (
	"context"
	"fmt"
	"net/http"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/oauth2"
)

// sessionEnd is closed once the SDK has closed the connection under a session: when the
// session is closed, and when the connection failed on its own (a stream it could not resume,
// a server that forgot the session, a stdio server's output that ended or that the SDK could
// not read). The supervisor learns of a session's end from it: the SDK's ClientSession.Wait
// would say the same, but it holds a goroutine through the session's whole life, one per
// connection that does nothing but wait.
type sessionEnd struct {
	once sync.Once
	done chan struct{}
}

func newSessionEnd() *sessionEnd { return &sessionEnd{done: make(chan struct{})} }

func (e *sessionEnd) close() { e.once.Do(func() { close(e.done) }) }

// watch returns t with its connection's end reported to e. The SDK closes the connection
// under a session once, whatever ended it, and the session's Wait returns only after that.
//
// A streamable HTTP connection cannot be wrapped: the SDK client reaches it through
// unexported methods a wrapper would hide (its session id and its standalone event stream go
// with them). Its context is the sign instead: the connection makes its own context, hands it
// to the transport's OAuthHandler with every request it sends, and cancels it as it closes.
// The handler set here (endWatch) holds no credential; a server's headers carry those.
func (e *sessionEnd) watch(t mcp.Transport) mcp.Transport {
	if s, ok := t.(*mcp.StreamableClientTransport); ok {
		watched := *s
		watched.OAuthHandler = &endWatch{end: e}
		return &watched
	}
	return endingTransport{Transport: t, end: e}
}

// endingTransport is a stdio or legacy SSE transport whose connection reports its Close.
type endingTransport struct {
	mcp.Transport
	end *sessionEnd
}

func (t endingTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return endingConnection{Connection: c, end: t.end}, nil
}

type endingConnection struct {
	mcp.Connection
	end *sessionEnd
}

func (c endingConnection) Close() error {
	err := c.Connection.Close()
	c.end.close()
	return err
}

// endWatch is the OAuthHandler of a streamable HTTP connection: it ties the session's end to
// the connection's context (sessionEnd.watch), and adds no credential.
type endWatch struct {
	end  *sessionEnd
	once sync.Once
}

// TokenSource is asked before every request the SDK sends, with the connection's context.
func (w *endWatch) TokenSource(ctx context.Context) (oauth2.TokenSource, error) {
	w.once.Do(func() { context.AfterFunc(ctx, w.end.close) })
	return nil, nil
}

// Authorize is asked when a server answers 401 or 403. There is no authorization flow to run:
// the request fails with the server's status, and the session goes on.
func (w *endWatch) Authorize(_ context.Context, _ *http.Request, resp *http.Response) error {
	resp.Body.Close()
	return fmt.Errorf("the server answered %s", resp.Status)
}
