package controllers

import (
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/registry"
	"github.com/dsh-dev/projectmcp/internal/share"
)

// sharedStateful is the SharedStatefulServer condition: True when a server the stateful table
// knows (share.KnownStateful) is set to share project in its spec and more than one session is
// bound to it (sessions, by server), the message naming each such server; False otherwise. A
// server left without share runs per session already (share.Effective), so only the explicit
// choice can put two sessions on one server-side state.
func sharedStateful(servers []v1alpha1.MCPServer, sessions map[string]int, gen int64, now time.Time) metav1.Condition {
	c := metav1.Condition{Type: v1alpha1.ConditionSharedStatefulServer, ObservedGeneration: gen, LastTransitionTime: metav1.NewTime(now),
		Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonNoStatefulServerShared,
		Message: "no server known to keep state per client is shared by more than one session"}
	var shared []string
	for _, s := range servers {
		known, ok := share.KnownStateful(s)
		if s.Disabled || !ok || s.Share != v1alpha1.ShareProject || sessions[s.Name] < 2 {
			continue
		}
		shared = append(shared, fmt.Sprintf("server %q (%s) is shared by %d sessions", s.Name, known, sessions[s.Name]))
	}
	if len(shared) > 0 {
		c.Status, c.Reason = metav1.ConditionTrue, v1alpha1.ReasonStatefulServerShared
		c.Message = truncate(strings.Join(shared, "; ")+
			`: it keeps state per client, so each session drives the others' state; share "session" gives each session its own connection`,
			v1alpha1.MaxErrorLength)
	}
	return c
}

// boundSessions is how many sessions are bound to each server, as status.servers[].sessions
// shows it.
func boundSessions(obs registry.Observation) map[string]int {
	n := make(map[string]int, len(obs.Servers))
	for name, s := range obs.Servers {
		n[name] = s.Refs
	}
	return n
}
