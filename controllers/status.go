package controllers

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/projection"
	"github.com/dsh-dev/projectmcp/internal/registry"
	"github.com/dsh-dev/projectmcp/internal/share"
)

// buildStatus derives the reconciler's part of status from spec and the registry's
// observation. It is what the reconciler applies (writeStatus), so it leaves out the conditions
// another writer owns (the mirror's ConfigSynced). It keeps only what must survive from the
// previous status (transition times, the handled reconnect token). It is pure: the same inputs
// give the same status, so an unchanged project never writes. maxToolName is the gateway's
// (Reconciler.MaxToolName), so the tools it lists are named as sessions see them.
func buildStatus(obj *v1alpha1.ProjectMCP, obs registry.Observation, endpoint string, maxToolName int, now time.Time) v1alpha1.ProjectMCPStatus {
	exact := now                    // for rules with sub-second thresholds (dead after 5 s)
	now = now.Truncate(time.Second) // the API keeps seconds; finer times would always differ
	prev := obj.Status
	st := v1alpha1.ProjectMCPStatus{
		ObservedGeneration:     obj.Generation,
		Endpoint:               endpoint,
		LastHandledReconnectAt: prev.LastHandledReconnectAt,
		Conditions:             ownConditions(prev.Conditions),
	}
	prevPhase := map[string]v1alpha1.ServerStatus{}
	for _, s := range prev.Servers {
		prevPhase[s.Name] = s
	}
	counts := map[v1alpha1.ServerPhase]int{}
	enabled, dead := 0, 0 // dead: Ready but offering nothing for longer than conn.DeadAfter
	// Hints change no name, but a hinted description is the one a note is about.
	hints := map[string]projection.Hints{}
	for name, s := range obs.Servers {
		hints[name] = projection.SpecHints(s.AlwaysLoad(), s.ToolHints())
	}
	tools, notes := projection.Project(obs.Tools(), maxToolName, hints)
	_, promptNotes := projection.Prompts(obs.Prompts(), maxToolName)
	_, _, resourceNotes := projection.Resources(obs.Resources())
	notes = append(append(notes, promptNotes...), resourceNotes...)
	names := map[string][]string{}
	for name, w := range tools {
		names[w.Server] = append(names[w.Server], name)
	}
	messages := map[string][]string{}
	for _, n := range notes {
		messages[n.Server] = append(messages[n.Server], n.Message)
	}
	for _, srv := range obj.Spec.Servers {
		ss := serverStatus(srv, obs.Servers[srv.Name], names[srv.Name], messages[srv.Name], exact)
		if endpoint != "" && !srv.Disabled {
			ss.Endpoint = v1alpha1.ServerEndpoint(endpoint, srv.Name)
		}
		if old, ok := prevPhase[srv.Name]; ok && old.Phase == ss.Phase && old.LastTransitionTime != nil {
			ss.LastTransitionTime = old.LastTransitionTime
		} else {
			t := metav1.NewTime(now)
			ss.LastTransitionTime = &t
		}
		if !srv.Disabled {
			enabled++
			counts[ss.Phase]++
			if o := obs.Servers[srv.Name]; o.HasConn && o.Conn.Phase == v1alpha1.PhaseReady && o.Conn.Dead(exact) {
				dead++
			}
		}
		st.ToolCount += ss.ToolCount
		st.ConnectionCount += ss.Connections
		st.Servers = append(st.Servers, ss)
	}
	st.ReadyServers = fmt.Sprintf("%d/%d", counts[v1alpha1.PhaseReady], enabled)

	st.SessionCount = int32(len(obs.Sessions))
	for _, s := range obs.Sessions[:min(len(obs.Sessions), v1alpha1.MaxStatusSessions)] {
		b := v1alpha1.SessionBinding{ID: s.ID, Client: printableClient(s.Client), BoundAt: metav1.NewTime(s.BoundAt.Truncate(time.Second))}
		for _, slot := range s.Slots {
			b.Slots = append(b.Slots, v1alpha1.SlotBinding{Server: slot.Server, Connection: slotConnection(slot)})
		}
		st.Sessions = append(st.Sessions, b)
	}
	setConditions(&st, obj.Generation, counts, enabled, dead, now)
	meta.SetStatusCondition(&st.Conditions, sharedStateful(obj.Spec.Servers, boundSessions(obs), obj.Generation, now))
	return st
}

// serverStatus is one server's status from its observed state and the projected names of its
// tools (as sessions see them), with notes about skipped tools and texts Claude Code cuts.
func serverStatus(srv v1alpha1.MCPServer, o registry.ServerState, names, notes []string, now time.Time) v1alpha1.ServerStatus {
	ss := v1alpha1.ServerStatus{Name: srv.Name, ConfigHash: ConfigHash(srv), Sessions: int32(o.Refs), Connections: int32(o.Connections)}
	if !srv.Disabled {
		ss.Share, _ = share.Effective(srv)
	}
	if rb := o.LastRebuild; !rb.At.IsZero() {
		ss.LastRebuild = &v1alpha1.RebuildStatus{Reason: rb.Reason, Time: metav1.NewTime(rb.At.Truncate(time.Second)),
			Connection: rb.Connection, Message: truncate(rb.Previous, v1alpha1.MaxErrorLength)}
	}
	switch {
	case srv.Disabled:
		ss.Phase = v1alpha1.PhaseDisabled
		return ss
	case !o.HasConn && o.Reclaimed:
		ss.Phase = v1alpha1.PhaseIdle
		return ss
	case !o.HasConn:
		ss.Phase = v1alpha1.PhaseConnecting
		return ss
	}
	c := o.Conn
	ss.Phase, ss.Connection = c.Phase, c.ID
	ss.ReconnectAttempts, ss.LastError = int32(c.ReconnectAttempts), c.LastError
	ss.Sandbox = c.Sandbox
	ss.Waiting, ss.Waited = int32(c.Waiting), int64(c.Waited)
	sort.Strings(names)
	ss.ToolCount = int32(len(names))
	ss.Tools = names[:min(len(names), v1alpha1.MaxStatusTools)]
	if n, ok := projection.InstructionsNote(srv.Name, c.Instructions); ok {
		notes = append(notes, n.Message) // Claude Code cuts them: say so before it bites
	}
	notes = append(notes, c.Notes...) // tools left out for a bound
	switch hidden := c.RawToolCount - c.OmittedTools; {
	case c.Phase == v1alpha1.PhaseReady && c.Dead(now):
		notes = append(notes, fmt.Sprintf("dead: the server has listed nothing (no tool, prompt or resource) for more than %s; a later session's mount rebuilds it", conn.DeadAfter))
	case c.Phase == v1alpha1.PhaseReady && c.RawToolCount == 0:
		notes = append(notes, "the server lists no tools")
	case len(c.Tools) == 0 && hidden > 0 && c.OmittedTools > 0:
		notes = append(notes, fmt.Sprintf("the tools filter hides the other %d tools", hidden))
	case len(c.Tools) == 0 && hidden > 0:
		notes = append(notes, fmt.Sprintf("the tools filter hides all %d tools", hidden))
	}
	ss.Message = truncate(strings.Join(notes, "; "), v1alpha1.MaxErrorLength)
	return ss
}

// slotConnection names a slot's connection in status: its id, and under a keyed scope the
// label of its key after an @ (share.Label: never a principal's name or a session id), so the
// slots of one connection can be told apart from another's across its rebuilds.
func slotConnection(slot registry.SlotState) string {
	if slot.Connection == "" || slot.Label == "" {
		return slot.Connection
	}
	return slot.Connection + "@" + slot.Label
}

// maxClientName bounds a session's client name in status, as the gateway bounds the name a
// session announces (paths.MaxSessionName).
const maxClientName = 128

// printableClient is a client's announced name as status keeps it: any session may announce
// any bytes, and status is read on terminals and in dashboards, so control characters,
// bidirectional overrides and invalid UTF-8 are dropped, and the rest is cut to maxClientName
// bytes on a character's boundary.
func printableClient(s string) string {
	var b strings.Builder
	for _, r := range strings.ToValidUTF8(s, "") {
		if unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) {
			continue
		}
		if b.Len()+utf8.RuneLen(r) > maxClientName {
			break
		}
		b.WriteRune(r)
	}
	return b.String()
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

// nextDeadline is when the status would change by the passing of time alone: a Ready server
// offering nothing turns dead at ReadySince + conn.DeadAfter. Zero when nothing is pending.
func nextDeadline(obs registry.Observation, now time.Time) time.Duration {
	var next time.Duration
	for _, o := range obs.Servers {
		if !o.HasConn {
			continue
		}
		if at := o.Conn.DeadAt(); !at.IsZero() && at.After(now) && (next == 0 || at.Sub(now) < next) {
			next = at.Sub(now)
		}
	}
	return next
}

// reconcilerConditions are the condition types the reconciler owns; status.conditions merges
// by type, and every other type is another writer's.
var reconcilerConditions = []string{v1alpha1.ConditionReady, v1alpha1.ConditionDegraded, v1alpha1.ConditionSharedStatefulServer}

// ownConditions are the reconciler's conditions among cs, in their order.
func ownConditions(cs []metav1.Condition) []metav1.Condition {
	var own []metav1.Condition
	for _, c := range cs {
		if slices.Contains(reconcilerConditions, c.Type) {
			own = append(own, c)
		}
	}
	return own
}

// ownStatus is the reconciler's part of st: what buildStatus would derive, to compare with it.
func ownStatus(st v1alpha1.ProjectMCPStatus) v1alpha1.ProjectMCPStatus {
	st.Conditions = ownConditions(st.Conditions)
	return st
}

// setConditions summarizes the servers into Ready and Degraded.
func setConditions(st *v1alpha1.ProjectMCPStatus, gen int64, counts map[v1alpha1.ServerPhase]int, enabled, dead int, now time.Time) {
	unavailable := counts[v1alpha1.PhaseDisconnected] + counts[v1alpha1.PhaseFailed]
	ready := metav1.Condition{Type: v1alpha1.ConditionReady, ObservedGeneration: gen, LastTransitionTime: metav1.NewTime(now)}
	degraded := metav1.Condition{Type: v1alpha1.ConditionDegraded, ObservedGeneration: gen, LastTransitionTime: metav1.NewTime(now),
		Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonAsExpected, Message: "no server is down"}
	switch {
	case enabled == 0:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionTrue, v1alpha1.ReasonNoServers, "the project lists no enabled server"
	case unavailable > 0:
		msg := fmt.Sprintf("%d of %d servers unavailable (%d disconnected, %d failed)", unavailable, enabled,
			counts[v1alpha1.PhaseDisconnected], counts[v1alpha1.PhaseFailed])
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, v1alpha1.ReasonServersUnavailable, msg
		degraded.Status, degraded.Reason, degraded.Message = metav1.ConditionTrue, v1alpha1.ReasonServersUnavailable, msg
	case dead > 0:
		msg := fmt.Sprintf("%d of %d servers connected but offering nothing (no tool, prompt or resource) for more than %s (dead until rebuilt)", dead, enabled, conn.DeadAfter)
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, v1alpha1.ReasonServersWithoutTools, msg
		degraded.Status, degraded.Reason, degraded.Message = metav1.ConditionTrue, v1alpha1.ReasonServersWithoutTools, msg
	case counts[v1alpha1.PhaseConnecting] > 0:
		ready.Status, ready.Reason = metav1.ConditionFalse, v1alpha1.ReasonServersConnecting
		ready.Message = fmt.Sprintf("%d of %d servers connecting", counts[v1alpha1.PhaseConnecting], enabled)
	default:
		ready.Status, ready.Reason = metav1.ConditionTrue, v1alpha1.ReasonAllServersReady
		ready.Message = fmt.Sprintf("%d servers ready, %d idle", counts[v1alpha1.PhaseReady], counts[v1alpha1.PhaseIdle])
	}
	meta.SetStatusCondition(&st.Conditions, ready)
	meta.SetStatusCondition(&st.Conditions, degraded)
}
