package controllers

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
)

// SharedStatefulServer is True only for a server the stateful table knows, explicitly shared
// per project, with more than one session bound; its message names each such server.
func TestSharedStateful(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	server := func(name, pkg string, scope v1alpha1.Share) v1alpha1.MCPServer {
		return v1alpha1.MCPServer{Name: name, Share: scope, Stdio: &v1alpha1.StdioServer{Command: "npx", Args: []string{"-y", pkg}}}
	}
	pw := server("pw", "@playwright/mcp@latest", v1alpha1.ShareProject)
	think := server("think", "@modelcontextprotocol/server-sequential-thinking", v1alpha1.ShareProject)
	memory := server("memory", "@modelcontextprotocol/server-memory", v1alpha1.ShareProject)
	defaulted := server("pw", "@playwright/mcp", "")
	perSession := server("pw", "@playwright/mcp", v1alpha1.ShareSession)
	disabled := pw
	disabled.Disabled = true
	for _, tc := range []struct {
		name     string
		servers  []v1alpha1.MCPServer
		sessions map[string]int
		want     metav1.ConditionStatus
		names    []string
	}{
		{"explicit project, two sessions", []v1alpha1.MCPServer{pw}, map[string]int{"pw": 2}, metav1.ConditionTrue, []string{`server "pw" (@playwright/mcp) is shared by 2 sessions`}},
		{"explicit project, one session", []v1alpha1.MCPServer{pw}, map[string]int{"pw": 1}, metav1.ConditionFalse, nil},
		{"no session", []v1alpha1.MCPServer{pw}, nil, metav1.ConditionFalse, nil},
		{"share left to the table", []v1alpha1.MCPServer{defaulted}, map[string]int{"pw": 3}, metav1.ConditionFalse, nil},
		{"share session", []v1alpha1.MCPServer{perSession}, map[string]int{"pw": 3}, metav1.ConditionFalse, nil},
		{"a server the table does not know", []v1alpha1.MCPServer{memory}, map[string]int{"memory": 5}, metav1.ConditionFalse, nil},
		{"disabled", []v1alpha1.MCPServer{disabled}, map[string]int{"pw": 2}, metav1.ConditionFalse, nil},
		{"two named", []v1alpha1.MCPServer{memory, pw, think}, map[string]int{"memory": 4, "pw": 2, "think": 3}, metav1.ConditionTrue,
			[]string{`server "pw" (@playwright/mcp) is shared by 2 sessions`, `server "think" (server-sequential-thinking) is shared by 3 sessions`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := sharedStateful(tc.servers, tc.sessions, 7, now)
			if c.Type != v1alpha1.ConditionSharedStatefulServer || c.Status != tc.want || c.ObservedGeneration != 7 {
				t.Fatalf("condition %+v, want status %s", c, tc.want)
			}
			wantReason := map[metav1.ConditionStatus]string{metav1.ConditionTrue: v1alpha1.ReasonStatefulServerShared, metav1.ConditionFalse: v1alpha1.ReasonNoStatefulServerShared}[tc.want]
			if c.Reason != wantReason {
				t.Errorf("reason %q, want %q", c.Reason, wantReason)
			}
			for _, n := range tc.names {
				if !strings.Contains(c.Message, n) {
					t.Errorf("message lacks %q: %s", n, c.Message)
				}
			}
			if tc.want == metav1.ConditionTrue && strings.Contains(c.Message, "memory") {
				t.Errorf("message names a server the table does not know: %s", c.Message)
			}
		})
	}
}
