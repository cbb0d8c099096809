// Package sessionend tells a connection's supervisor when the SDK has closed the connection
// under its MCP client session (the session's end, whatever ended it), and when a server
// refused one of the session's requests (401, 403), without a goroutine per connection parked
// in ClientSession.Wait for the session's whole life.
//
// It is apart from the connection it serves (internal/conn) because it rests on how the SDK
// works, not on what it promises (internal/conn's TestSessionEndSeenWithoutAWaitingGoroutine
// holds it to that for every transport), and because what it saves is measured: the
// goroutines a connection holds at scale (make bench-scale).
package sessionend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/oauth2"
)

// End tells when the SDK has closed the connection under a session (Done): when the session
// is closed, and when the connection failed on its own (a stream it could not resume, a
// server that forgot the session, a stdio server's output that ended or that the SDK could
// not read). The supervisor learns of a session's end from it: the SDK's ClientSession.Wait
// would say the same, but it holds a goroutine through the session's whole life, one per
// connection that does nothing but wait.
//
// It also tells when a server refuses one of the session's requests (401, 403: Refused): the
// supervisor then connects again, with its variables read again (a rotated credential).
type End struct {
	once, refuseOnce sync.Once
	done, refused    chan struct{}
	refusal          error // set before refused is closed
}

// New is the end of a session about to connect (Watch).
func New() *End {
	return &End{done: make(chan struct{}), refused: make(chan struct{})}
}

// Done is closed once the SDK has closed the session's connection.
func (e *End) Done() <-chan struct{} { return e.done }

// Refused is closed once a server has refused one of the session's requests.
func (e *End) Refused() <-chan struct{} { return e.refused }

// Refusal is what the server answered the refused request, once Refused is closed.
func (e *End) Refusal() error { return e.refusal }

func (e *End) close() { e.once.Do(func() { close(e.done) }) }

// Refuse tells that the server refused a request the session sent outside the SDK (a
// forwarded call): as for the SDK's own (endWatch.Authorize), the supervisor connects again,
// with fresh credentials. The first refusal is the one kept.
func (e *End) Refuse(err error) { e.refuse(err) }

func (e *End) refuse(err error) {
	e.refuseOnce.Do(func() {
		e.refusal = err
		close(e.refused)
	})
}

// Why is what ended the session s, as its Wait says once Done is closed: at once, the SDK's
// reader of the connection having stopped. It waits at most bound all the same: that the
// connection's close comes only with the session's end is how the SDK works, not what it
// promises (Watch), and a sign that came early must cost a reconnect, not a supervisor stuck
// in Wait.
func (e *End) Why(ctx context.Context, s *mcp.ClientSession, bound time.Duration) error {
	waited := make(chan error, 1)
	go func() { waited <- s.Wait() }() // ends by the time the session is closed
	timer := time.NewTimer(bound)
	defer timer.Stop()
	select {
	case err := <-waited:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return errors.New("its connection closed")
	}
}

// Watch returns t with its connection's end reported to e. The SDK closes the connection
// under a session once, whatever ended it, and the session's Wait returns only after that.
//
// A streamable HTTP connection cannot be wrapped: the SDK client reaches it through
// unexported methods a wrapper would hide (its session id and its standalone event stream go
// with them). Its context is the sign instead: the connection makes its own context, hands it
// to the transport's OAuthHandler with every request it sends, and cancels it as it closes.
// The handler set here (endWatch) holds no credential; a server's headers carry those.
func (e *End) Watch(t mcp.Transport) mcp.Transport {
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
	end *End
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
	end *End
}

func (c endingConnection) Close() error {
	err := c.Connection.Close()
	c.end.close()
	return err
}

// endWatch is the OAuthHandler of a streamable HTTP connection: it ties the session's end to
// the connection's context (End.Watch), and adds no credential.
type endWatch struct {
	end  *End
	once sync.Once
}

// TokenSource is asked before every request the SDK sends, with the connection's context.
func (w *endWatch) TokenSource(ctx context.Context) (oauth2.TokenSource, error) {
	w.once.Do(func() { context.AfterFunc(ctx, w.end.close) })
	return nil, nil
}

// Authorize is asked when a server answers 401 or 403. There is no authorization flow to run:
// the request fails with the server's answer, and the supervisor connects again (refused).
func (w *endWatch) Authorize(_ context.Context, _ *http.Request, resp *http.Response) error {
	err := refusal(resp)
	w.end.refuse(err)
	return err
}

// refusalBodyBytes bounds how much of a refusal's body is read for the JSON-RPC error in it.
const refusalBodyBytes = 64 << 10

// refusal says what a 401 or 403 answer said: its status, and the message of the JSON-RPC
// error its body holds, if any (whatever its id: a refusal often answers no request the
// server read). It reads the body (to a bound) and closes it.
func refusal(resp *http.Response) error {
	defer resp.Body.Close()
	what := "the server answered " + resp.Status
	var body struct {
		Error *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	data, _ := io.ReadAll(io.LimitReader(resp.Body, refusalBodyBytes))
	if json.Unmarshal(data, &body) == nil && body.Error != nil && body.Error.Message != "" {
		return fmt.Errorf("%s: %s", what, body.Error.Message)
	}
	return errors.New(what)
}
