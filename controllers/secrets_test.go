package controllers

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/conn"
)

func TestAllowsProject(t *testing.T) {
	for _, tc := range []struct {
		annotation string
		want       bool
	}{
		{"web", true},
		{"*", true},
		{"api, web ,jobs", true},
		{"api,jobs", false},
		{"", false},
		{"webapp", false},
		{"web*", false},
		{",,", false},
	} {
		if got := allowsProject(tc.annotation, "web"); got != tc.want {
			t.Errorf("allowsProject(%q, web) = %v, want %v", tc.annotation, got, tc.want)
		}
	}
}

// secretVariables: the Secret's consent first, then the server's command line; the error names
// the rule, the server and the argument, never a value.
func TestSecretVariables(t *testing.T) {
	const value = "hunter2-value"
	secret := func(annotations map[string]string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "payments-db", Annotations: annotations},
			Data: map[string][]byte{"password": []byte(value)}}
	}
	allowed := map[string]string{v1alpha1.AnnotationAllowedProjects: "web"}
	stdio := func(command string, args ...string) v1alpha1.MCPServer {
		return v1alpha1.MCPServer{Name: "db", Stdio: &v1alpha1.StdioServer{Command: command, Args: args,
			Env: []v1alpha1.NameValue{{Name: "PGPASSWORD", Value: "${password}"}}}}
	}
	remote := v1alpha1.MCPServer{Name: "api", HTTP: &v1alpha1.HTTPServer{URL: "https://x/mcp?p=${password}"}}
	for _, tc := range []struct {
		name    string
		secret  *corev1.Secret
		server  v1alpha1.MCPServer
		wantErr string // "" means the values are returned
	}{
		{"no annotation", secret(nil), remote,
			`Secret "payments-db" does not allow ProjectMCP "web" to use it: add the annotation mcp.dsh.dev/allowed-projects: web`},
		{"another project", secret(map[string]string{v1alpha1.AnnotationAllowedProjects: "api"}), remote,
			`Secret "payments-db" does not allow ProjectMCP "web" to use it: add web to its annotation mcp.dsh.dev/allowed-projects`},
		{"empty annotation", secret(map[string]string{v1alpha1.AnnotationAllowedProjects: ""}), remote, `add web to its annotation`},
		{"allowed http", secret(allowed), remote, ""},
		{"every project", secret(map[string]string{v1alpha1.AnnotationAllowedProjects: "*"}), remote, ""},
		{"secret in env", secret(allowed), stdio("server", "--port", "${PORT:-80}"), ""},
		{"secret in an argument", secret(allowed), stdio("server", "--verbose", "--password=${password}"),
			`server "db": args[1] refers to ${password}, a key of Secret "payments-db": a process's command line is readable by every user of the machine; pass the value in env instead`},
		{"secret in the command", secret(allowed), stdio("/opt/${password}/server"), `server "db": command refers to ${password}`},
		{"a default-only argument", secret(allowed), stdio("server", "${MODE:-fast}"), ""},
		{"refused before the command line", secret(nil), stdio("server", "${password}"), `does not allow ProjectMCP "web"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vars, err := secretVariables(tc.secret, "web", tc.server)
			if tc.wantErr == "" {
				if err != nil || vars["password"] != value {
					t.Fatalf("want the values, got %v, %v", vars, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
			if vars != nil || strings.Contains(err.Error(), value) {
				t.Fatalf("a refusal returns no values and names none: %v, %v", vars, err)
			}
			var p conn.PermanentError
			if !errors.As(err, &p) || !p.Permanent() {
				t.Fatalf("a refusal is permanent (no reconnects): %T", err)
			}
		})
	}
}

// plannedHash changes with consent only for servers that use variables: granting or
// withdrawing consent rebuilds those, and leaves the others running.
func TestPlannedHash(t *testing.T) {
	plain := v1alpha1.MCPServer{Name: "plain", HTTP: &v1alpha1.HTTPServer{URL: "https://x/mcp"}}
	secretful := v1alpha1.MCPServer{Name: "s", HTTP: &v1alpha1.HTTPServer{URL: "https://x/mcp",
		Headers: []v1alpha1.NameValue{{Name: "Authorization", Value: "Bearer ${TOKEN}"}}}}
	for _, c := range []secretConsent{consentNone, consentGranted, consentRefused, consentAbsent} {
		if plannedHash(plain, c) != ConfigHash(plain) {
			t.Errorf("consent %q changed the hash of a server without variables", c)
		}
	}
	seen := map[string]secretConsent{}
	for _, c := range []secretConsent{consentNone, consentGranted, consentRefused, consentAbsent} {
		h := plannedHash(secretful, c)
		if prev, dup := seen[h]; dup {
			t.Errorf("consent %q and %q give the same hash", prev, c)
		}
		seen[h] = c
	}
}

// consentOnly keeps a Secret's consent and drops every other annotation, label and field
// owner: a kubectl-applied Secret's last-applied-configuration holds its values.
func TestConsentOnly(t *testing.T) {
	m := &metav1.PartialObjectMetadata{}
	m.Name, m.Namespace, m.ResourceVersion = "payments-db", "shop", "7"
	m.Annotations = map[string]string{v1alpha1.AnnotationAllowedProjects: "web",
		"kubectl.kubernetes.io/last-applied-configuration": `{"data":{"password":"aHVudGVyMg=="}}`}
	m.Labels = map[string]string{"team": "payments"}
	m.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
	out, err := consentOnly(m)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*metav1.PartialObjectMetadata)
	if got.Name != "payments-db" || got.Namespace != "shop" || got.ResourceVersion != "7" {
		t.Fatalf("identity lost: %+v", got)
	}
	if len(got.Annotations) != 1 || got.Annotations[v1alpha1.AnnotationAllowedProjects] != "web" || got.Labels != nil || got.ManagedFields != nil {
		t.Fatalf("kept more than the consent: %+v", got.ObjectMeta)
	}
}
