package paths

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/dsh-dev/projectmcp/internal/gateway/access"
	"github.com/dsh-dev/projectmcp/internal/httpserve"
	"github.com/dsh-dev/projectmcp/internal/jsonrpcwire"
	"github.com/dsh-dev/projectmcp/internal/revision"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// MethodListen is the 2026-07-28 method the endpoint serves itself as a long-lived stream.
const MethodListen = "subscriptions/listen"

// Listen is a subscriptions/listen as the endpoint serves it: its id, the session it is for
// (Origin.Session), the client it announces, and what it listens to.
type Listen struct {
	ID            json.RawMessage
	Origin        Origin
	ClientInfo    json.RawMessage
	Notifications mcp.NotificationSubscriptions
}

// RefuseListen answers a listen the endpoint refuses (past a bound) with a JSON-RPC error
// saying why, as the SDK answers a request it refuses.
func RefuseListen(w http.ResponseWriter, l Listen, msg string) {
	writeError(w, nil, l.ID, &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: msg}, true)
}

// listRequest is what is read of a subscriptions/listen.
type listRequest struct {
	env           envelope
	meta          requestMeta
	notifications mcp.NotificationSubscriptions
}

// ReadListen reads a listen the endpoint serves itself: one whose every part is as the SDK
// takes it (readListen), of a session named as the forward path names it; false for any other,
// which the SDK's handler is to serve.
func ReadListen(r *http.Request, who access.Identity) (Listen, bool) {
	lr, ok := readListen(r)
	if !ok {
		return Listen{}, false
	}
	id, ok := identify(who, r.Header, &lr.meta)
	if !ok {
		return Listen{}, false
	}
	o := Origin{method: MethodListen, session: id, stateless: true, who: who, header: r.Header, traced: true,
		meta: lr.meta.trace(), caps: requestCapabilities(lr.meta.Capabilities)}
	return Listen{ID: lr.env.ID, Origin: o, ClientInfo: lr.meta.ClientInfo, Notifications: lr.notifications}, true
}

// readListen reads a listen whose every part is as the SDK takes it: a JSON-RPC request with
// an id, of the method Mcp-Method names, with notifications; false for any other.
func readListen(r *http.Request) (listRequest, bool) {
	var lr listRequest
	if !revision.Is(r.Header.Get("Mcp-Protocol-Version"), revision.Stateless) || r.Header.Get("Mcp-Method") != MethodListen || !acceptedContent(r) {
		return lr, false
	}
	if jsonrpcwire.DecodeExact(httpserve.Body(r), &lr.env) != nil || lr.env.JSONRPC != "2.0" || lr.env.Method != MethodListen {
		return lr, false
	}
	id, ok := canonicalID(lr.env.ID)
	if !ok {
		return lr, false
	}
	lr.env.ID = id
	var params struct {
		Meta          *requestMeta                   `json:"_meta"`
		Notifications *mcp.NotificationSubscriptions `json:"notifications"`
	}
	params.Meta = &lr.meta
	if jsonrpcwire.DecodeExact(lr.env.Params, &params) != nil || params.Notifications == nil {
		return lr, false
	}
	lr.notifications = *params.Notifications
	return lr, true
}

// canonicalID is a request id as the SDK writes it back (a string or an integer); false for
// any other, which the SDK answers.
func canonicalID(id json.RawMessage) (json.RawMessage, bool) {
	if !requestID(id) {
		return nil, false
	}
	if id[0] == '"' {
		var s string
		if json.Unmarshal(id, &s) != nil {
			return nil, false
		}
		out, _ := json.Marshal(s)
		return out, true
	}
	n, err := strconv.ParseInt(string(id), 10, 64)
	if err != nil {
		return nil, false
	}
	return strconv.AppendInt(nil, n, 10), true
}
