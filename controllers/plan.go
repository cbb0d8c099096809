package controllers

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sort"
	"strings"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/registry"
)

// ActionKind is one of the four things the reconciler does to a connection.
type ActionKind string

const (
	// ActionCreate starts a connection for a server that has none.
	ActionCreate ActionKind = "Create"
	// ActionRepoint replaces a connection whose config changed; slots move, names stay.
	ActionRepoint ActionKind = "Repoint"
	// ActionRetire destroys the connection of a server removed or disabled, dropping its slots.
	ActionRetire ActionKind = "Retire"
	// ActionRebuild replaces a dead connection (on demand) or any connection (on request).
	ActionRebuild ActionKind = "Rebuild"
)

// Action is one step of a plan.
type Action struct {
	Kind   ActionKind
	Server string
	Reason string
}

// Desired is the planner's view of spec: enabled servers with their config hashes.
type Desired struct {
	Servers map[string]string // name → config hash, enabled servers only
	// AlwaysDemanded is true when idleTimeout is 0: connections are kept without sessions.
	AlwaysDemanded bool
	// Reconnect names the servers a pending reconnect request covers (nil: no request).
	Reconnect map[string]bool
}

// Plan compares the desired servers with the registry's observation and returns the actions
// that bring them together, sorted by server name. It is a pure function of its arguments:
//
//	observed \ desired   | in spec, same config      | in spec, config changed | not in spec / disabled
//	no connection        | create if demanded (*)    | create if demanded (*)  | -
//	healthy              | keep (rebuild on request) | repoint                 | retire
//	dead (**)            | keep (rebuild on request) | repoint                 | retire
//
// (*) a server never connected in this process is always demanded (one idle window, so tools
// are warm before the first session); one reclaimed by the idle timer is demanded again by a
// bound slot, by idleTimeout 0, or by a reconnect request.
// (**) Failed, or Ready offering nothing (no tool, prompt or resource) for longer than
// conn.DeadAfter. A dead connection is rebuilt at a session's mount
// (docs/lifecycle-contracts.md#the-mounts-exception): the registry's Mount does that itself,
// inside the mount, so the session waits for the rebuilt server (registry.RebuildDeadAtMount),
// at most once per reconnect backoff window and never while it is in use.
func Plan(desired Desired, observed map[string]registry.ServerState) []Action {
	var actions []Action
	for name, hash := range desired.Servers {
		obs, seen := observed[name]
		requested := desired.Reconnect[name]
		if seen && keyed(obs.Scope) {
			if a, ok := planKeyed(name, hash, obs, requested); ok {
				actions = append(actions, a)
			}
			continue
		}
		switch {
		case !seen || (!obs.HasConn && !obs.Reclaimed):
			actions = append(actions, Action{ActionCreate, name, "new server"})
		case !obs.HasConn:
			if obs.Refs > 0 || desired.AlwaysDemanded || requested {
				actions = append(actions, Action{ActionCreate, name, "demanded after idle reclaim"})
			}
		case obs.Hash != hash:
			actions = append(actions, Action{ActionRepoint, name, "config changed"})
		case requested:
			actions = append(actions, Action{ActionRebuild, name, "reconnect requested"})
		}
	}
	for name := range observed {
		if _, ok := desired.Servers[name]; !ok {
			actions = append(actions, Action{ActionRetire, name, "removed or disabled"})
		}
	}
	sort.Slice(actions, func(i, j int) bool { return actions[i].Server < actions[j].Server })
	return actions
}

// ConfigHash identifies a server's unexpanded configuration; a different hash means repoint.
// The name and the disabled flag are left out: they decide whether the server exists, not how
// to connect to it.
func ConfigHash(s v1alpha1.MCPServer) string {
	s.Name, s.Disabled = "", false
	data, _ := json.Marshal(s)
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])[:12]
}

// plannedHash is the planner's hash of a server: its ConfigHash and, for a server whose config
// refers to variables, the consent of the project's Secret, so that granting or withdrawing
// consent rebuilds exactly the servers that use the Secret.
func plannedHash(s v1alpha1.MCPServer, consent secretConsent) string {
	if consent == consentNone || !usesVariables(s) {
		return ConfigHash(s)
	}
	return ConfigHash(s) + "/" + string(consent)
}

// reconnectRequest returns the servers a reconnect annotation asks for, when its value is not
// handled, the token carried out last: nil when there is nothing to do, all enabled servers
// when it names none.
func reconnectRequest(obj *v1alpha1.ProjectMCP, enabled map[string]string, handled string) map[string]bool {
	token := obj.Annotations[v1alpha1.AnnotationReconnectRequestedAt]
	if token == "" || token == handled {
		return nil
	}
	want := map[string]bool{}
	for _, s := range strings.Split(obj.Annotations[v1alpha1.AnnotationReconnectServers], ",") {
		if s = strings.TrimSpace(s); s != "" {
			want[s] = true
		}
	}
	out := map[string]bool{}
	for name := range enabled {
		if len(want) == 0 || want[name] {
			out[name] = true
		}
	}
	return out
}

// keyed reports whether a scope gives a server a connection per key (share principal,
// session) rather than one for the project.
func keyed(scope v1alpha1.Share) bool {
	return scope != "" && scope != v1alpha1.ShareProject
}

// planKeyed is the action for a server whose connections are keyed (share principal,
// session): sessions' mounts make and rebuild them, never the reconciler, which only gives the
// server what they are built from (create), and rebuilds every live one on a config change
// (repoint) or a reconnect request (rebuild). No connection is ever made ahead of a session.
func planKeyed(name, hash string, obs registry.ServerState, requested bool) (Action, bool) {
	switch {
	case !obs.Configured:
		return Action{ActionCreate, name, "new server"}, true
	case obs.Hash != hash:
		return Action{ActionRepoint, name, "config changed"}, true
	case requested:
		return Action{ActionRebuild, name, "reconnect requested"}, true
	}
	return Action{}, false
}
