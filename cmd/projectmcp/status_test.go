package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
)

// shown keeps printable text and writes whatever could act on a terminal as an escape.
func TestShown(t *testing.T) {
	for in, want := range map[string]string{
		"":                          "",
		"claude-code/2.1.0":         "claude-code/2.1.0",
		"café ✓ 日本":                 "café ✓ 日本",
		"\x1b[2J\x1b[Hfake":         `\x1b[2J\x1b[Hfake`,
		"\x1b]0;pwned\x07title":     `\x1b]0;pwned\x07title`,
		"line\rover":                `line\x0dover`,
		"two\nlines\tand tab":       `two\x0alines\x09and tab`,
		"del\x7f":                   `del\x7f`,
		"c1 \u009b31m":              `c1 \u009b31m`,
		"rtl \u202eexe.txt":         `rtl \u202eexe.txt`,
		"isolate \u2066x\u2069":     `isolate \u2066x\u2069`,
		"bad \xff\xfe utf8":         `bad \xff\xfe utf8`,
		"cut multibyte \xe6\x97":    `cut multibyte \xe6\x97`,
		"a literal backslash \\x1b": `a literal backslash \x1b`,
	} {
		if got := shown(in); got != want {
			t.Errorf("shown(%q) = %q, want %q", in, got, want)
		}
	}
}

// What status prints holds no control byte, whatever a client announced or a server's error
// said.
func TestStatusPrintsNoControlCharacters(t *testing.T) {
	evil := "\x1b]0;owned\x07\x1b[1A\x1b[2K\r"
	obj := &v1alpha1.ProjectMCP{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}}
	obj.Status = v1alpha1.ProjectMCPStatus{
		Endpoint:   "http://gw/" + evil,
		Owner:      &v1alpha1.ProjectOwner{Replica: "r" + evil},
		Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: "False", Reason: "R", Message: "m" + evil}},
		Servers:    []v1alpha1.ServerStatus{{Name: "s", Connection: "c" + evil, LastError: "upstream said " + evil, Sandbox: "pid" + evil}},
		Sessions: []v1alpha1.SessionBinding{{ID: "s-1", Client: "agent" + evil,
			Slots: []v1alpha1.SlotBinding{{Server: "s", Connection: "c" + evil}}}},
		SessionCount: 1,
	}
	var out bytes.Buffer
	printStatus(&out, obj)
	for _, line := range strings.Split(out.String(), "\n") {
		for _, r := range line {
			if r < 0x20 || r == 0x7f {
				t.Fatalf("status printed control character %q in line %q", r, line)
			}
		}
	}
	if !strings.Contains(out.String(), `agent\x1b]0;owned\x07`) {
		t.Errorf("the client's name is not shown escaped:\n%s", out.String())
	}
}

// status prints SharedStatefulServer while it warns, and not while it is False.
func TestStatusPrintsSharedStatefulWarning(t *testing.T) {
	printed := func(s metav1.ConditionStatus) string {
		obj := &v1alpha1.ProjectMCP{Status: v1alpha1.ProjectMCPStatus{Conditions: []metav1.Condition{
			{Type: v1alpha1.ConditionSharedStatefulServer, Status: s, Reason: "R", Message: `server "pw" (@playwright/mcp) is shared by 2 sessions`},
		}}}
		var out bytes.Buffer
		printStatus(&out, obj)
		return out.String()
	}
	if out := printed(metav1.ConditionTrue); !strings.Contains(out, `SharedStatefulServer: True (R) server "pw" (@playwright/mcp) is shared by 2 sessions`) {
		t.Errorf("the warning is not printed:\n%s", out)
	}
	if out := printed(metav1.ConditionFalse); strings.Contains(out, "SharedStatefulServer") {
		t.Errorf("a False SharedStatefulServer is printed:\n%s", out)
	}
}

// status prints each server's credential: its state, expiry and scopes, and what to run when
// it needs a login.
func TestStatusPrintsCredentials(t *testing.T) {
	obj := &v1alpha1.ProjectMCP{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}}
	until := metav1.NewTime(time.Date(2026, 12, 4, 19, 40, 5, 0, time.UTC))
	obj.Status.Servers = []v1alpha1.ServerStatus{
		{Name: "plain"},
		{Name: "linear", Credential: &v1alpha1.CredentialStatus{Secret: "oauth-p-linear", State: "Ready", ExpiresAt: &until, Scopes: []string{"read", "write"}}},
		{Name: "notion", Credential: &v1alpha1.CredentialStatus{Secret: "oauth-p-notion", State: "Invalid", Conditions: []metav1.Condition{
			{Type: v1alpha1.ConditionCredentialReady, Status: "False", Reason: "GrantRefused", Message: "the authorization server refused the grant (invalid_grant): run projectmcp login p notion -n ns"}}}},
	}
	var out bytes.Buffer
	printStatus(&out, obj)
	for _, want := range []string{
		"credentials:\n",
		"  linear: Ready (Secret oauth-p-linear), token until 2026-12-04T19:40:05Z, scopes read write\n",
		"  notion: Invalid (Secret oauth-p-notion): the authorization server refused the grant (invalid_grant): run projectmcp login p notion -n ns\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "plain:") {
		t.Errorf("a server without oauth has a credential line:\n%s", out.String())
	}
}

// Each stdio server's sandbox is printed under the table: the layers in force and missing.
func TestStatusPrintsSandbox(t *testing.T) {
	obj := &v1alpha1.ProjectMCP{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}}
	obj.Status.Servers = []v1alpha1.ServerStatus{{Name: "web", Sandbox: "uid 104211, pid, mount; missing: network, limits"}, {Name: "remote"}}
	var out bytes.Buffer
	printStatus(&out, obj)
	if !strings.Contains(out.String(), "  web sandbox: uid 104211, pid, mount; missing: network, limits\n") || strings.Contains(out.String(), "remote sandbox") {
		t.Errorf("status:\n%s", out.String())
	}
}
