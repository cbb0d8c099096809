package controllers

import (
	"errors"
	"maps"
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

// secretVariables: the Secret's consent to the project first, then the server's command line,
// then the consent to the server's destination; the error names the rule, the server and the
// argument or destination, never a value.
func TestSecretVariables(t *testing.T) {
	const value = "hunter2-value"
	secret := func(annotations map[string]string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "payments-db", Annotations: annotations},
			Data: map[string][]byte{"password": []byte(value), "host": []byte("collector.example")}}
	}
	const destinations = "https://x, server --port 80\n server fast \nserver"
	allowed := map[string]string{v1alpha1.AnnotationAllowedProjects: "web", v1alpha1.AnnotationAllowedDestinations: destinations}
	projectOnly := map[string]string{v1alpha1.AnnotationAllowedProjects: "web"}
	stdio := func(command string, args ...string) v1alpha1.MCPServer {
		return v1alpha1.MCPServer{Name: "db", Stdio: &v1alpha1.StdioServer{Command: command, Args: args,
			Env: []v1alpha1.NameValue{{Name: "PGPASSWORD", Value: "${password}"}}}}
	}
	remote := v1alpha1.MCPServer{Name: "api", HTTP: &v1alpha1.HTTPServer{URL: "https://x/mcp?p=${password}"}}
	withURL := func(u string) v1alpha1.MCPServer {
		return v1alpha1.MCPServer{Name: "api", HTTP: &v1alpha1.HTTPServer{URL: u}}
	}
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
		{"every project", secret(map[string]string{v1alpha1.AnnotationAllowedProjects: "*", v1alpha1.AnnotationAllowedDestinations: "https://x"}), remote, ""},
		{"secret in env", secret(allowed), stdio("server", "--port", "${PORT:-80}"), ""},
		{"only the project named", secret(projectOnly), remote,
			`server "api": Secret "payments-db" does not allow its values to go to https://x:443: add the annotation mcp.dsh.dev/allowed-destinations: https://x:443`},
		{"another origin", secret(allowed), withURL("http://x/mcp?p=${password}"),
			`server "api": Secret "payments-db" does not allow its values to go to http://x:80: add http://x:80 to its annotation mcp.dsh.dev/allowed-destinations`},
		{"another port", secret(allowed), withURL("https://x:8443/mcp"), `does not allow its values to go to https://x:8443`},
		{"a header to another origin", secret(allowed), v1alpha1.MCPServer{Name: "api", HTTP: &v1alpha1.HTTPServer{URL: "https://y/mcp",
			Headers: []v1alpha1.NameValue{{Name: "Authorization", Value: "Bearer ${password}"}}}}, `does not allow its values to go to https://y:443`},
		{"a value chooses the host", secret(allowed), withURL("https://${host:-x}/mcp?p=${password}"),
			`server "api": the origin of its url depends on values of Secret "payments-db"`},
		{"a value in the authority", secret(allowed), withURL("https://x${password}/mcp"), `the origin of its url depends on values`},
		{"a value in the path", secret(allowed), withURL("https://x/${password}/mcp"), ""},
		{"another command line", secret(allowed), stdio("server", "--port", "81"),
			`server "db": Secret "payments-db" does not allow its values to go to server --port 81: add server --port 81 to its annotation mcp.dsh.dev/allowed-destinations`},
		{"a command line with a comma", secret(allowed), stdio("server", "--tables=a,b"),
			`server "db": args[0] is empty or holds a space or a comma, so the command line cannot be named in the annotation mcp.dsh.dev/allowed-destinations`},
		{"a stdio server named by its command line", secret(projectOnly), stdio("server"),
			`server "db": Secret "payments-db" does not allow its values to go to server: add the annotation mcp.dsh.dev/allowed-destinations: server`},
		{"an unusable entry is named", secret(map[string]string{v1alpha1.AnnotationAllowedProjects: "web", v1alpha1.AnnotationAllowedDestinations: "https://x/mcp"}), remote,
			`add https://x:443 to its annotation mcp.dsh.dev/allowed-destinations (entry "https://x/mcp" is not an origin (http or https://host[:port], no path))`},
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
	every := []secretConsent{consentNone, consentGranted, consentRefused, consentElsewhere, consentAbsent}
	for _, c := range every {
		if plannedHash(plain, c) != ConfigHash(plain) {
			t.Errorf("consent %q changed the hash of a server without variables", c)
		}
	}
	seen := map[string]secretConsent{}
	for _, c := range every {
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
	m.Annotations = map[string]string{v1alpha1.AnnotationAllowedProjects: "web", v1alpha1.AnnotationAllowedDestinations: "https://x",
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
	want := map[string]string{v1alpha1.AnnotationAllowedProjects: "web", v1alpha1.AnnotationAllowedDestinations: "https://x"}
	if !maps.Equal(got.Annotations, want) || got.Labels != nil || got.ManagedFields != nil {
		t.Fatalf("kept more than the consent: %+v", got.ObjectMeta)
	}
}
