package conn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/internal/httpcarrier"
)

// A streamable HTTP server may end a request's event stream at any time: on purpose, to free
// the connection while a long request runs (it may then say when to come back, retry:), or a
// proxy between cuts it. That ends neither the request nor the session, which every session of
// the project shares. When the server gave its events ids, the rest of the stream is asked for
// with a GET carrying Last-Event-ID and read like the stream it continues (the server's
// requests, notifications, the response). Without ids the rest cannot be asked for, and only
// that request fails: the server may have run it, so it is never sent again.

// ErrStreamEnded is a request's event stream ending before its response, for good: without
// event ids to resume it by, or with a resumption that failed.
var ErrStreamEnded = errors.New("the server ended the call's stream before answering")

const (
	// maxStaleResumes bounds the resumes in a row that bring no new event (a server that ends
	// every stream at once): then the request fails.
	maxStaleResumes = 5
	// resumeDelay is the wait before resuming when the server asked for none; it doubles
	// with each resume that brought nothing new.
	resumeDelay = 100 * time.Millisecond
	// maxResumeDelay caps the wait, whatever the server's retry says: the caller waits
	// meanwhile, and the call's own deadline is the caller's to set.
	maxResumeDelay = 5 * time.Second
)

// streamCursor is where a request's event stream is, for resuming it.
type streamCursor struct {
	lastID string        // the id of the last event ("": none given, the stream cannot be resumed)
	retry  time.Duration // the server's reconnection delay (retry:); 0 when it gave none
}

// setRetry takes a retry: field, a delay in milliseconds (digits only, else ignored).
func (at *streamCursor) setRetry(v []byte) {
	if ms, err := strconv.ParseUint(string(v), 10, 32); err == nil {
		at.retry = time.Duration(ms) * time.Millisecond
	}
}

// delay is how long to wait before resuming, after stale resumes in a row that brought nothing.
func (at *streamCursor) delay(stale int) time.Duration {
	if at.retry > 0 {
		return min(at.retry, maxResumeDelay)
	}
	return min(resumeDelay<<stale, maxResumeDelay)
}

// follow reads the event stream of request id (body) to the response, resuming the stream
// each time the server ends it before (while it gives its events ids).
func (u *httpUpstream) follow(ctx context.Context, body io.ReadCloser, id string) (json.RawMessage, error) {
	var at streamCursor
	for stale := 0; ; {
		seen := at.lastID
		res, err := u.readStream(ctx, body, id, &at)
		if err == nil {
			endStream(body)
			return res, nil
		}
		body.Close()
		switch {
		case ctx.Err() != nil:
			u.cancel(id, ctx.Err())
			return nil, err
		case !errors.Is(err, ErrStreamEnded):
			return nil, err
		case at.lastID == "":
			return nil, u.abandon(id, err)
		}
		if stale++; at.lastID != seen {
			stale = 0
		} else if stale >= maxStaleResumes {
			return nil, u.abandon(id, fmt.Errorf("%w (resumed %d times in a row without a new event)", ErrStreamEnded, stale))
		}
		if body, err = u.resumeStream(ctx, &at, stale); err != nil {
			if ctx.Err() != nil {
				u.cancel(id, ctx.Err())
				return nil, context.Cause(ctx)
			}
			if isGone(err) { // the session is gone, and the request with it: nothing to tell the server
				return nil, err
			}
			return nil, u.abandon(id, err)
		}
	}
}

// endStream ends a request's event stream once its response is read. The server ends the
// stream right after: a carrier's connection goes back to its pool owing that end
// (httpcarrier.Release), so the response goes on without waiting for it; any other body is
// read to its end, which lets the HTTP client keep its TCP connection for the next request.
func endStream(body io.ReadCloser) {
	if httpcarrier.Release(body) {
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(body, drainBytes))
	body.Close()
}

// abandon gives up on request id, whose stream ended: the server, which may be running it
// still for nobody, is told so, and the error says that it may have run.
func (u *httpUpstream) abandon(id string, err error) error {
	u.cancel(id, err)
	return fmt.Errorf("%w; it may or may not have completed", err)
}

// resumeStream asks for the events of a request's stream after at.lastID, once at's delay has
// passed. A server that no longer knows the session is ErrConnectionClosed: the session is
// gone, and the request's answer with it.
func (u *httpUpstream) resumeStream(ctx context.Context, at *streamCursor, stale int) (io.ReadCloser, error) {
	wait := time.NewTimer(at.delay(stale))
	defer wait.Stop()
	select {
	case <-wait.C:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Last-Event-ID", at.lastID)
	u.sessionHeaders(req.Header)
	resp, err := u.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w, and resuming it failed: %w", ErrStreamEnded, err)
	}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch {
	case resp.StatusCode == http.StatusNotFound && u.sessionID() != "":
		resp.Body.Close()
		return nil, fmt.Errorf("%w, and the server no longer knows the session, so the rest is lost; it may or may not have completed: %w",
			ErrStreamEnded, mcp.ErrConnectionClosed)
	case resp.StatusCode < 200 || resp.StatusCode >= 300 || ct != "text/event-stream":
		resp.Body.Close()
		return nil, fmt.Errorf("%w, and resuming it the server answered HTTP %d (%s)", ErrStreamEnded, resp.StatusCode, orNone(ct))
	}
	return resp.Body, nil
}
