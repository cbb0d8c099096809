package paths

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/dsh-dev/projectmcp/internal/audit"
	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/gateway/access"
)

// Endpoint is what a request's life asks of the endpoint that serves it: the session table,
// the published routes, the session's slots and whether the project is still served here.
// The gateway's project implements it; paths never sees the registry or the gateway.
type Endpoint interface {
	// Routes are the routes last published (empty before the first sync).
	Routes() *Routes
	// RBAC is the project's item authorizer, when its items are authorized per identity.
	RBAC() (access.ItemAuthorizer, bool)

	// Await is the session's connection to server, waiting through a repoint or rebuild up
	// to ctx; nil when there is none, with the error saying why when a bound on connections
	// refused the session one (the server, its sharing scope and the bound).
	Await(ctx context.Context, session, server string) (*conn.Conn, error)
	// Lookup is the session's connection to server now, without waiting; nil when none.
	Lookup(session, server string) *conn.Conn
	// Mounted says whether the session holds slots of the project.
	Mounted(session string) bool

	// Claim is this replica's claim on the project: its epoch, and whether it still serves it;
	// Moved is !ok.
	Claim() (epoch int64, ok bool)
	Moved() bool
	// MovedAway answers a request this replica did nothing with because the project moved.
	MovedAway(w http.ResponseWriter)

	// Stateful is a stateful session of the endpoint by its ref, or nil.
	Stateful(ref string) *mcp.ServerSession
	// Touch marks a stateless session active now.
	Touch(ref string)
	// AddCall records the cancel of a stateful session's forwarded call by its JSON-RPC id,
	// DropCall forgets it, and Call finds it (nil when none).
	AddCall(ref, id string, cancel context.CancelFunc)
	DropCall(ref, id string)
	Call(ref, id string) context.CancelFunc
}

// Options are the bounds and sinks a request's life uses, given by the gateway.
type Options struct {
	// Key names the project; ServerInfo is the endpoint's implementation, as a 2026-07-28
	// result's _meta names it.
	Key        types.NamespacedName
	ServerInfo json.RawMessage

	Log   logr.Logger
	Clock clock.PassiveClock
	// CallTimeout bounds one forwarded request (0: none).
	CallTimeout time.Duration
	// InputTimeout bounds how long a stateless session's call waits for the session's input;
	// MaxAwaitingInput, MaxAwaitingInputPerPrincipal (0: its default) and
	// MaxAwaitingInputPerSession bound how many wait.
	InputTimeout                                                               time.Duration
	MaxAwaitingInput, MaxAwaitingInputPerPrincipal, MaxAwaitingInputPerSession int
	// Audit, when not nil, records every forwarded request; AuditArguments adds arguments.
	Audit          *audit.Log
	AuditArguments bool
	// Replays bounds what the resumable streams kept after their calls ended hold, for every
	// endpoint of the process together (budget.go); nil: a budget of the endpoint's own, with
	// the defaults.
	Replays *ReplayBudget
}

// Paths is one endpoint's request path: every request of the endpoint's sessions goes
// through it from its facts to its answer. What it keeps lives no longer than the calls it
// serves: a stateless session's calls waiting for input, stateful sessions' resumable call
// streams, and servers' requests sent on calls' streams; the endpoint ends a session's share
// of them at the session's end (Ended) and all of them at its own (Close).
type Paths struct {
	ep   Endpoint
	opts Options
	key  types.NamespacedName

	inputs  *inputs // stateless sessions' calls waiting for their input (input.go)
	replays replays // stateful sessions' resumable call streams (resume.go)
	asks    asks    // servers' requests sent on calls' streams, awaiting answers (asks.go)
}

// New is the request path of the endpoint ep.
func New(ep Endpoint, opts Options) *Paths {
	p := &Paths{ep: ep, opts: opts, key: opts.Key}
	p.inputs = newInputs(p)
	p.replays.budget = opts.Replays
	if p.replays.budget == nil {
		p.replays.budget = NewReplayBudget(ReplayLimits{})
	}
	return p
}

// Ended lets go of what a stateful session kept: its resumable streams.
func (p *Paths) Ended(ref string) { p.replays.dropSession(ref) }

// Close ends every call waiting for a session's input (the endpoint is closing).
func (p *Paths) Close() { p.inputs.closeAll() }

// AwaitingInput is how many calls wait for their sessions' input.
func (p *Paths) AwaitingInput() int { return p.inputs.count() }

// ErrMoved is the error of a request that found no connection because the project is no longer
// served here: nothing was sent, and the project's next replica serves it (Endpoint.MovedAway).
var ErrMoved = fmt.Errorf("%w: the project moved to another replica", conn.ErrUnavailable)
