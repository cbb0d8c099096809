package conn

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

// sessionEnd is closed once the SDK has closed the connection under a session: when the
// session is closed, and when the connection failed on its own (a stream it could not resume,
// a server that forgot the session, a stdio server's output that ended or that the SDK could
// not read). The supervisor learns of a session's end from it: the SDK's ClientSession.Wait
// would say the same, but it holds a goroutine through the session's whole life, one per
// connection that does nothing but wait.
//
// refused is closed when a server refuses one of the session's requests (401, 403): the
// supervisor then connects again, with its variables read again (a rotated credential).
type sessionEnd struct {
	once, refuseOnce sync.Once
	done, refused    chan struct{}
	refusal          error // set before refused is closed
}

func newSessionEnd() *sessionEnd {
	return &sessionEnd{done: make(chan struct{}), refused: make(chan struct{})}
}

func (e *sessionEnd) close() { e.once.Do(func() { close(e.done) }) }

func (e *sessionEnd) refuse(err error) {
	e.refuseOnce.Do(func() {
		e.refusal = err
		close(e.refused)
	})
}

// why is what ended the session, as its Wait says once done is closed: at once, the SDK's
// reader of the connection having stopped. It is bounded all the same: that the connection's
// close comes only with the session's end is how the SDK works, not what it promises (watch),
// and a sign that came early must cost a reconnect, not a supervisor stuck in Wait.
func (e *sessionEnd) why(ctx context.Context, s *mcp.ClientSession) error {
	waited := make(chan error, 1)
	go func() { waited <- s.Wait() }() // ends by the time closeSession has closed s
	timer := time.NewTimer(teardownGrace)
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
