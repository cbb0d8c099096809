package gateway

import (
	"context"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/internal/metrics"
)

// statusWriter is the gateway's ResponseWriter: it notes the response code and the auth
// decision for projectmcp_gateway_requests_total. Streaming goes through it unchanged: Flush
// (and FlushError, which http.ResponseController prefers) reach the underlying writer, and
// Unwrap gives http.ResponseController everything else (deadlines, full duplex, hijacking).
type statusWriter struct {
	http.ResponseWriter
	code int
	auth string
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 && code >= 200 { // 1xx responses are not the final code
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// FlushError flushes the underlying writer, reporting whether it could.
func (w *statusWriter) FlushError() error {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return http.NewResponseController(w.ResponseWriter).Flush()
}

// Flush implements http.Flusher (the forward path's event streams use it).
func (w *statusWriter) Flush() { _ = w.FlushError() }

// Unwrap is for http.ResponseController.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// status is the response's code: 200 when the handler wrote nothing (net/http sends 200).
func (w *statusWriter) status() int {
	if w.code == 0 {
		return http.StatusOK
	}
	return w.code
}

// unwrapped is the writer under the gateway's statusWriter (for http.MaxBytesReader, which
// tells the server to close the connection after a body too large through it).
func unwrapped(w http.ResponseWriter) http.ResponseWriter {
	if sw, ok := w.(*statusWriter); ok {
		return sw.ResponseWriter
	}
	return w
}

// noteAuth records the auth decision of a request: status is what the access rule answered
// (0: allowed), local whether the rule is local mode's.
func noteAuth(w http.ResponseWriter, local bool, status int) {
	sw, ok := w.(*statusWriter)
	if !ok {
		return
	}
	switch {
	case status == 0 && local:
		sw.auth = metrics.AuthLocal
	case status == 0:
		sw.auth = metrics.AuthAllowed
	case status == http.StatusUnauthorized:
		sw.auth = metrics.AuthUnauthenticated
	case status == http.StatusTooManyRequests:
		sw.auth = metrics.AuthThrottled
	case status >= http.StatusInternalServerError:
		sw.auth = metrics.AuthError
	default:
		sw.auth = metrics.AuthDenied
	}
}

// countSent is a sending middleware of a project's MCP server: it counts the list_changed
// notifications sent to sessions (the SDK sends one to each session for each change).
func (p *project) countSent(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		if err == nil {
			switch method {
			case "notifications/tools/list_changed":
				metrics.ListChangedSent(p.key.Namespace, p.key.Name, "tools")
			case "notifications/prompts/list_changed":
				metrics.ListChangedSent(p.key.Namespace, p.key.Name, "prompts")
			case "notifications/resources/list_changed":
				metrics.ListChangedSent(p.key.Namespace, p.key.Name, "resources")
			}
		}
		return res, err
	}
}

// SessionCounts are the sessions bound through the gateway, per project and revision, for the
// projectmcp_sessions gauge: stateful sessions (2025-11-25 and older) and stateless ones
// (2026-07-28).
func (g *Gateway) SessionCounts() []metrics.Sessions {
	var out []metrics.Sessions
	for _, p := range g.all() {
		stateful, stateless := p.sessions.counts()
		out = append(out,
			metrics.Sessions{Namespace: p.key.Namespace, Project: p.key.Name, Revision: metrics.RevisionStateful, Count: stateful},
			metrics.Sessions{Namespace: p.key.Namespace, Project: p.key.Name, Revision: metrics.RevisionStateless, Count: stateless})
	}
	return out
}

// AwaitingInput is the number of calls of stateless sessions the gateway holds while their
// servers wait for the sessions' input (paths: input.go), over every project.
func (g *Gateway) AwaitingInput() int {
	n := 0
	for _, p := range g.all() {
		n += p.paths.AwaitingInput()
	}
	return n
}
