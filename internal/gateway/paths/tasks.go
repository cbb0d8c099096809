package paths

import (
	"bytes"
	"crypto/hmac"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/jsonrpcwire"
)

// Tasks carried for a 2025-11-25 session that starts them (SEP-1686): a tools/call with a
// "task" member goes to the server with it, and the task the server creates comes back under
// an id of the gateway's; tasks/get, tasks/result and tasks/cancel naming that id go to the
// server that owns the task, on the connection it was created on, with the server's own id.
//
// Every session of a project shares the gateway's one connection to a server, so the server
// cannot tell whose task an id names: a session that learnt another's task id could read its
// result or cancel it. So the id a session gets is sealed as a server's requestState is
// (states.go): the server's id with the project, the session, the server, the connection and
// the replica's claim (epoch), under the process's HMAC key. An id that comes back opens only
// for the session it was given to; any other gets the error a server gives for a task it does
// not know, and never reaches a server. An id given before the project moved to this replica
// gets an error saying so: the task lived on the connection of the replica that served it.

// taskIDPrefix starts every task id the gateway gives a session.
const taskIDPrefix = "projectmcp-task."

// taskCall is the call name a task id is sealed to (stateBinding.Call): ids and requestStates
// share the payload, and a state is never taken for a task id nor the other way round.
const taskCall = "tasks"

// taskBinding is what the task ids of a session's requests to server are sealed to.
func (p *Paths) taskBinding(session, server string) stateBinding {
	epoch, _ := p.ep.Claim()
	return stateBinding{Project: p.key.String(), Session: session, Server: server, Call: taskCall, Epoch: epoch,
		now: p.opts.Clock.Now()}
}

// sealTaskID is the id a session is given for the server's task id, created on the connection
// connID.
func sealTaskID(b stateBinding, connID, id string) string {
	payload, _ := json.Marshal(sealedState{b, b.now.UnixMilli(), connID + "/" + id}) // strings and numbers only: never fails
	enc := base64.RawURLEncoding.EncodeToString(payload)
	return taskIDPrefix + enc + "." + stateMAC(enc)
}

// sealedTask is what a task id the gateway gave opens to.
type sealedTask struct {
	server, conn, id string
}

// openTaskID opens a task id a session sends, for the session of b (its project, session and
// epoch; the server is the id's own); the refusal is the session's answer.
func openTaskID(b stateBinding, id string) (sealedTask, *jsonrpc.Error) {
	enc, mac, ok := strings.Cut(strings.TrimPrefix(id, taskIDPrefix), ".")
	var s sealedState
	if payload, err := base64.RawURLEncoding.DecodeString(enc); !strings.HasPrefix(id, taskIDPrefix) || !ok || err != nil || json.Unmarshal(payload, &s) != nil {
		return sealedTask{}, taskNotFound()
	}
	// The epoch first: another replica sealed it with a key of its own, and its session is to
	// learn that the task stayed behind, not that the id was altered.
	if s.Epoch != b.Epoch {
		return sealedTask{}, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf(
			"Task not found: the task was created before this project moved between replicas (epoch %d, now %d), and ended with the move", s.Epoch, b.Epoch)}
	}
	if !hmac.Equal([]byte(mac), []byte(stateMAC(enc))) || s.Project != b.Project || s.Session != b.Session || s.Call != taskCall {
		return sealedTask{}, taskNotFound()
	}
	connID, upstream, ok := strings.Cut(s.State, "/")
	if !ok {
		return sealedTask{}, taskNotFound()
	}
	return sealedTask{server: s.Server, conn: connID, id: upstream}, nil
}

// taskNotFound is the answer for a task id that is not the session's: the one a server gives
// for a task it does not know, which says nothing of whose it may be.
func taskNotFound() *jsonrpc.Error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "Task not found"}
}

// routeTask routes a stateful session's tasks/get, tasks/result or tasks/cancel by the task id
// it names: to the server that owns the task, with the server's own id. An id that does not
// open for the session is refused (in.refusal); a stateless session's request goes the typed
// path (its revision's Tasks are another protocol).
func routeTask(p *Paths, in *incoming) bool {
	var params struct {
		TaskID string `json:"taskId"`
	}
	if in.stateless || jsonrpcwire.DecodeExact(in.env.Params, &params) != nil || params.TaskID == "" {
		return false
	}
	t, refused := openTaskID(p.taskBinding(in.ref, ""), params.TaskID)
	if refused != nil {
		in.refusal, in.taskRefused = refused, true
		return true
	}
	in.members["taskId"], _ = json.Marshal(t.id)
	in.taskRoute = &taskRoute{conn: t.conn, sealed: params.TaskID, upstream: t.id}
	in.routed, in.target = true, target{server: t.server}
	return true
}

// taskRoute is where a request naming a task goes: the connection the task was created on, and
// the task's two ids.
type taskRoute struct {
	conn, sealed, upstream string
}

// onTaskConn sends a request naming a task on the connection the task was created on; another
// (the server reconnected, or its spec changed) no longer has it.
func onTaskConn(t *taskRoute, c *conn.Conn, send func() (conn.RawResult, error)) (conn.RawResult, error) {
	if c.ID() != t.conn {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf(
			"Task not found: the connection to MCP server %q it was created on has been replaced, and the task with it", c.Server())}
	}
	res, err := send()
	if err != nil {
		return nil, err
	}
	return swapTaskID(res, t.upstream, t.sealed), nil
}

// carryTask is a task-augmented tools/call's result as the session gets it: the task the
// server created, under the id sealed for the session (b); any other result as it is.
func carryTask(b stateBinding, c *conn.Conn, res conn.RawResult) conn.RawResult {
	var created struct {
		Task struct {
			TaskID string `json:"taskId"`
		} `json:"task"`
	}
	if json.Unmarshal(res, &created) != nil || created.Task.TaskID == "" {
		return res
	}
	return swapTaskID(res, created.Task.TaskID, sealTaskID(b, c.ID(), created.Task.TaskID))
}

// swapTaskID replaces the task id from by to wherever a "taskId" member holds it in a JSON
// object and the objects within it (a task, a result's related-task _meta). Anything that does
// not decode is returned as it is.
func swapTaskID(raw json.RawMessage, from, to string) json.RawMessage {
	quoted, _ := json.Marshal(from)
	if !bytes.Contains(raw, quoted) {
		return raw
	}
	var members map[string]json.RawMessage
	if json.Unmarshal(raw, &members) != nil {
		return raw
	}
	for k, v := range members {
		var s string
		switch {
		case k == "taskId" && json.Unmarshal(v, &s) == nil && s == from:
			members[k], _ = json.Marshal(to)
		case len(v) > 0 && v[0] == '{':
			members[k] = swapTaskID(v, from, to)
		}
	}
	return append(append([]byte{'{'}, joinMembers(members)...), '}')
}
