package controllers

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/oauth"
)

// Each state of a grant is shown by the three conditions; a condition that does not change
// keeps its transition time.
func TestCredentialStatus(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	expiry := t0.Add(time.Hour)
	for _, tc := range []struct {
		state                   string
		ready, expiring, failed metav1.ConditionStatus
		reason                  string
	}{
		{oauth.StateReady, "True", "False", "False", "TokenHeld"},
		{oauth.StateExpiring, "True", "True", "True", "RefreshFailing"},
		{oauth.StateRefreshFailed, "False", "False", "True", "TokenExpired"},
		{oauth.StateMissing, "False", "False", "False", "NoGrant"},
		{oauth.StateInvalid, "False", "False", "True", "GrantRefused"},
		{"", "False", "False", "False", "NotReadYet"},
	} {
		st := oauth.Status{State: tc.state, Expiry: expiry, Scopes: []string{"mcp"}, Message: "why"}
		cs := credentialStatus("oauth-p-s", st, nil, t0)
		got := map[string]metav1.ConditionStatus{}
		for _, c := range cs.Conditions {
			got[c.Type] = c.Status
		}
		if got[v1alpha1.ConditionCredentialReady] != tc.ready || got[v1alpha1.ConditionCredentialExpiring] != tc.expiring ||
			got[v1alpha1.ConditionCredentialRefreshFailed] != tc.failed {
			t.Errorf("%q: conditions %v", tc.state, got)
		}
		if c := meta.FindStatusCondition(cs.Conditions, v1alpha1.ConditionCredentialReady); c.Reason != tc.reason {
			t.Errorf("%q: reason %q, want %q", tc.state, c.Reason, tc.reason)
		}
		if cs.Secret != "oauth-p-s" || !cs.ExpiresAt.Time.Equal(expiry) || len(cs.Scopes) != 1 {
			t.Errorf("%q: %+v", tc.state, cs)
		}
	}
	before := credentialStatus("s", oauth.Status{State: oauth.StateReady}, nil, t0)
	after := credentialStatus("s", oauth.Status{State: oauth.StateReady}, before, t0.Add(time.Minute))
	if c := meta.FindStatusCondition(after.Conditions, v1alpha1.ConditionCredentialReady); !c.LastTransitionTime.Time.Equal(t0) {
		t.Errorf("an unchanged condition moved its transition time to %s", c.LastTransitionTime)
	}
}
