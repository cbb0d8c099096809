package paths

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/dsh-dev/projectmcp/internal/httpserve"
)

// The gateway's initialize result is the SDK server's, whose capability types know no Tasks.
// A 2025-11-25 session that declares Tasks is told the gateway takes them, as the tasks it
// starts are carried (tasks.go): a client that starts a task only where the server's
// capabilities say it may would start none otherwise. The result is edited as bytes on its way
// out (AnnounceTasks); a session that declares no Tasks gets it as the SDK wrote it.

// tasksCapability is what the gateway announces: task-augmented tools/call, and tasks/cancel.
// Not tasks/list, which it does not route.
var tasksCapability = json.RawMessage(`{"cancel":{},"requests":{"tools":{"call":{}}}}`)

// AnnounceTasks is w for the SDK's answer to a stateful session's POST: when the body (read
// already) is an initialize that declares Tasks, a writer that adds the tasks capability to
// the result; else w itself. finish writes what the writer held, and must be called once the
// SDK has answered.
func AnnounceTasks(w http.ResponseWriter, r *http.Request) (_ http.ResponseWriter, finish func()) {
	if !declaresTasks(httpserve.Body(r)) {
		return w, func() {}
	}
	hw := &heldWriter{ResponseWriter: w}
	return hw, hw.finish
}

// declaresTasks reports whether a body is an initialize request whose client capabilities
// have a tasks object.
func declaresTasks(body []byte) bool {
	if !bytes.Contains(body, []byte(`"initialize"`)) || !bytes.Contains(body, []byte(`"tasks"`)) {
		return false
	}
	var req struct {
		Method string `json:"method"`
		Params struct {
			Capabilities struct {
				Tasks json.RawMessage `json:"tasks"`
			} `json:"capabilities"`
		} `json:"params"`
	}
	return json.Unmarshal(body, &req) == nil && req.Method == "initialize" && len(req.Params.Capabilities.Tasks) > 0 &&
		req.Params.Capabilities.Tasks[0] == '{'
}

// heldWriter holds an initialize answer (one JSON body, or an event stream of one message)
// until finish, which writes it with the tasks capability added.
type heldWriter struct {
	http.ResponseWriter
	code int
	body bytes.Buffer
}

func (h *heldWriter) WriteHeader(code int)        { h.code = code }
func (h *heldWriter) Write(b []byte) (int, error) { return h.body.Write(b) }
func (h *heldWriter) Flush()                      {} // the answer goes at finish

func (h *heldWriter) finish() {
	out := withTasksCapability(h.body.Bytes())
	if hdr := h.Header(); hdr.Get("Content-Length") != "" {
		hdr.Set("Content-Length", strconv.Itoa(len(out)))
	}
	if h.code != 0 {
		h.ResponseWriter.WriteHeader(h.code)
	}
	_, _ = h.ResponseWriter.Write(out)
	if f, ok := h.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// withTasksCapability adds the tasks capability to the initialize result in an answer: a JSON
// body, or an event stream's data lines. Anything else is left as it is.
func withTasksCapability(answer []byte) []byte {
	if len(bytes.TrimSpace(answer)) > 0 && bytes.TrimSpace(answer)[0] == '{' {
		return addTasksCapability(answer)
	}
	lines := bytes.Split(answer, []byte("\n"))
	for i, l := range lines {
		if data, ok := bytes.CutPrefix(l, []byte("data: ")); ok {
			lines[i] = append([]byte("data: "), addTasksCapability(data)...)
		}
	}
	return bytes.Join(lines, []byte("\n"))
}

// addTasksCapability adds the tasks capability to a JSON-RPC response's result.capabilities,
// unless it has one; a message that is not such a response is returned as it is.
func addTasksCapability(msg []byte) []byte {
	var top map[string]json.RawMessage
	if json.Unmarshal(msg, &top) != nil || len(top["result"]) == 0 {
		return msg
	}
	var result map[string]json.RawMessage
	if json.Unmarshal(top["result"], &result) != nil || len(result["capabilities"]) == 0 {
		return msg
	}
	var caps map[string]json.RawMessage
	if json.Unmarshal(result["capabilities"], &caps) != nil || caps == nil {
		return msg
	}
	if _, ok := caps["tasks"]; ok {
		return msg
	}
	caps["tasks"] = tasksCapability
	result["capabilities"] = wrapMembers(caps)
	top["result"] = wrapMembers(result)
	return wrapMembers(top)
}

// wrapMembers is an object of members, in name order.
func wrapMembers(members map[string]json.RawMessage) json.RawMessage {
	return append(append([]byte{'{'}, joinMembers(members)...), '}')
}
