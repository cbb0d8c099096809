package controllers_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/testenv/harness"
	"github.com/dsh-dev/projectmcp/internal/testutil"
	"github.com/dsh-dev/projectmcp/test/fixture"
)

// recorder is a loopback listener in front of an MCP server: it keeps what every request
// carried in its query and headers, then passes the request on.
type recorder struct {
	mu   sync.Mutex
	seen []string // per request: its query and header values
}

func newRecorder(t *testing.T, upstream string) (*recorder, string) {
	target, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.FlushInterval = -1 // event streams pass as they come
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b strings.Builder
		b.WriteString(r.URL.RawQuery)
		for _, vs := range r.Header {
			for _, v := range vs {
				b.WriteString("\n" + v)
			}
		}
		rec.mu.Lock()
		rec.seen = append(rec.seen, b.String())
		rec.mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return rec, srv.URL
}

// requests is how many requests came, and how many of them carried value.
func (r *recorder) requests(value string) (all, with int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.seen {
		if strings.Contains(s, value) {
			with++
		}
	}
	return len(r.seen), with
}

// asUser is a client of the API server acting as user, who has only the RBAC the test gives.
func asUser(t *testing.T, user string) client.Client {
	cfg := rest.CopyConfig(harness.Env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
	c, err := client.New(cfg, client.Options{Scheme: harness.Env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// projectEditor lets user write ProjectMCPs in ns, and nothing else (no Secrets).
func projectEditor(t *testing.T, ns, user string) {
	ctx := context.Background()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "projectmcp-editor", Namespace: ns}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"projectmcps"},
		Verbs: []string{"get", "list", "watch", "create", "update", "patch"},
	}}}
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "projectmcp-editor-" + user, Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}
	for _, o := range []client.Object{role, binding} {
		if err := harness.Env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
}

// annotateSecret sets (or, with value "", removes) one of the Secret's consent annotations as
// its owner.
func annotateSecret(t *testing.T, secret *corev1.Secret, annotation, value string) {
	t.Helper()
	ctx := context.Background()
	testutil.Eventually(t, 10*time.Second, "the Secret's annotation written", func() bool {
		s := &corev1.Secret{}
		if err := harness.Env.Client.Get(ctx, client.ObjectKeyFromObject(secret), s); err != nil {
			return false
		}
		if value == "" {
			delete(s.Annotations, annotation)
		} else {
			metav1.SetMetaDataAnnotation(&s.ObjectMeta, annotation, value)
		}
		return harness.Env.Client.Update(ctx, s) == nil
	})
}

// commandLine is a stdio server's destination: its command and args, one space apart.
func commandLine(s v1alpha1.MCPServer) string {
	return strings.Join(append([]string{s.Stdio.Command}, s.Stdio.Args...), " ")
}

// failedWith is a server Failed with a lastError containing msg.
func failedWith(name, msg string) func(*v1alpha1.ProjectMCP) bool {
	return func(o *v1alpha1.ProjectMCP) bool {
		s, ok := harness.ServerStatusOf(o, name)
		return ok && s.Phase == v1alpha1.PhaseFailed && strings.Contains(s.LastError, msg)
	}
}

// A user who may write ProjectMCPs and not read Secrets names a Secret in spec.secretRef and
// points a server at a listener with ${password} in its URL and a header; the Secret lists the
// listener among its destinations, and not yet the project. Until the Secret's owner names the
// project, nothing reaches the listener, the status and an event say why, and the project's
// server without variables runs; once named, the server connects with the value; when the
// name goes, the server is torn down and refused again. A stdio server with ${password} in its
// args is never started, even with consent.
func TestSecretConsent(t *testing.T) {
	ns := harness.NewNamespace(t)
	ctx := context.Background()
	const password = "pw-7Hq2-unseen"
	rec, listener := newRecorder(t, fixture.StartHTTP(t))
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "payments-db", Namespace: ns,
		Annotations: map[string]string{v1alpha1.AnnotationAllowedDestinations: listener}},
		StringData: map[string]string{"password": password}}
	if err := harness.Env.Client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	projectEditor(t, ns, "alice")
	alice := asUser(t, "alice")
	if err := alice.Get(ctx, client.ObjectKeyFromObject(secret), &corev1.Secret{}); !apierrors.IsForbidden(err) {
		t.Fatalf("alice must not be able to read the Secret herself: %v", err)
	}

	collector := v1alpha1.MCPServer{Name: "collector", HTTP: &v1alpha1.HTTPServer{URL: listener + "/mcp?p=${password}",
		Headers: []v1alpha1.NameValue{{Name: "X-Collected", Value: "${password}"}}}}
	plain := harness.FixtureServer(t, "plain")
	inArgs := harness.FixtureServer(t, "inargs")
	inArgs.Stdio.Args[1] = "${password}" // --name
	obj := &v1alpha1.ProjectMCP{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}, Spec: v1alpha1.ProjectMCPSpec{
		SecretRef: &corev1.LocalObjectReference{Name: "payments-db"},
		Reconnect: &v1alpha1.ReconnectPolicy{MaxAttempts: ptr.To[int32](0)},
		Servers:   []v1alpha1.MCPServer{collector, plain, inArgs},
	}}
	if err := alice.Create(ctx, obj); err != nil {
		t.Fatalf("alice may write ProjectMCPs: %v", err)
	}
	key := client.ObjectKeyFromObject(obj)
	t.Cleanup(func() { harness.DeleteAndWait(t, key) })

	const rule = `Secret "payments-db" does not allow ProjectMCP "web" to use it: add the annotation mcp.dsh.dev/allowed-projects: web`
	refused := harness.WaitStatus(t, key, 30*time.Second, "collector and inargs refused, plain Ready", func(o *v1alpha1.ProjectMCP) bool {
		return failedWith("collector", rule)(o) && failedWith("inargs", rule)(o) && harness.PhaseIs("plain", v1alpha1.PhaseReady)(o)
	})
	if all, _ := rec.requests(password); all != 0 {
		t.Fatalf("the listener must receive nothing without the Secret's consent, got %d requests", all)
	}
	assertEventNote(t, ns, v1alpha1.EventConnectFailed, rule)
	plainConn := mustServer(t, refused, "plain").Connection

	annotateSecret(t, secret, v1alpha1.AnnotationAllowedProjects, "api, web")
	granted := harness.WaitStatus(t, key, 30*time.Second, "collector Ready after the Secret's consent", harness.PhaseIs("collector", v1alpha1.PhaseReady))
	if all, with := rec.requests(password); with == 0 || with != all {
		t.Fatalf("every request of the connection carries the value once consented: %d of %d", with, all)
	}
	args := harness.WaitStatus(t, key, 10*time.Second, "inargs refused for its args", failedWith("inargs",
		`server "inargs": args[1] refers to ${password}, a key of Secret "payments-db": a process's command line is readable by every user of the machine; pass the value in env instead`))
	if _, err := os.Stat(harness.PIDFileOf(inArgs)); !os.IsNotExist(err) {
		t.Fatalf("the server with the secret in its args must never start (pid file: %v)", err)
	}
	if c := mustServer(t, granted, "plain").Connection; c != plainConn || mustServer(t, args, "plain").Connection != plainConn {
		t.Fatalf("consent must not touch a server without variables: connection %s became %s", plainConn, c)
	}

	collectorConn := mustServer(t, granted, "collector").Connection
	annotateSecret(t, secret, v1alpha1.AnnotationAllowedProjects, "")
	withdrawn := harness.WaitStatus(t, key, 30*time.Second, "collector torn down and refused once consent is withdrawn", failedWith("collector", rule))
	if c := mustServer(t, withdrawn, "collector").Connection; c == collectorConn {
		t.Fatalf("withdrawn consent must replace the connection %s", c)
	}
	if c := mustServer(t, withdrawn, "plain"); c.Connection != plainConn || c.Phase != v1alpha1.PhaseReady {
		t.Fatalf("withdrawn consent must not touch a server without variables: %+v", c)
	}
}

func mustServer(t *testing.T, obj *v1alpha1.ProjectMCP, name string) v1alpha1.ServerStatus {
	t.Helper()
	s, ok := harness.ServerStatusOf(obj, name)
	if !ok {
		t.Fatalf("no status for server %q", name)
	}
	return s
}

// assertEventNote waits for an event of the reason whose note contains text.
func assertEventNote(t *testing.T, ns, reason, text string) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, "event "+reason+" saying "+text, func() bool {
		evs := &eventsv1.EventList{}
		if err := harness.Env.Client.List(context.Background(), evs, client.InNamespace(ns)); err != nil {
			return false
		}
		for _, e := range evs.Items {
			if e.Reason == reason && strings.Contains(e.Note, text) {
				return true
			}
		}
		return false
	})
}

// A stdio server whose args name a key of the Secret is refused before its process starts,
// even with the Secret's consent; the same value in env reaches it.
func TestSecretNotInCommandLine(t *testing.T) {
	ns := harness.NewNamespace(t)
	const password = "pw-cmdline-4Rt9"
	inArgs := harness.FixtureServer(t, "inargs")
	inArgs.Stdio.Args[1] = "${password}" // --name
	inEnv := harness.FixtureServer(t, "inenv")
	inEnv.Stdio.Env = append(inEnv.Stdio.Env, v1alpha1.NameValue{Name: "DB_PASSWORD", Value: "${password}"})
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns, Annotations: map[string]string{
		v1alpha1.AnnotationAllowedProjects: "*", v1alpha1.AnnotationAllowedDestinations: commandLine(inEnv)}},
		StringData: map[string]string{"password": password}}
	if err := harness.Env.Client.Create(context.Background(), secret); err != nil {
		t.Fatal(err)
	}
	key := harness.Create(t, ns, "cmdline", v1alpha1.ProjectMCPSpec{
		SecretRef: &corev1.LocalObjectReference{Name: "db"},
		Reconnect: &v1alpha1.ReconnectPolicy{MaxAttempts: ptr.To[int32](0)},
		Servers:   []v1alpha1.MCPServer{inArgs, inEnv},
	})
	harness.WaitStatus(t, key, 30*time.Second, "inargs refused, inenv Ready", func(o *v1alpha1.ProjectMCP) bool {
		return harness.PhaseIs("inenv", v1alpha1.PhaseReady)(o) && failedWith("inargs",
			`server "inargs": args[1] refers to ${password}, a key of Secret "db": a process's command line is readable by every user of the machine; pass the value in env instead`)(o)
	})
	if _, err := os.Stat(harness.PIDFileOf(inArgs)); !os.IsNotExist(err) {
		t.Fatalf("the server with the secret in its args must never start (pid file: %v)", err)
	}
}

// settled is every server of the project Ready or Failed: each first connect came to an end.
func settled(o *v1alpha1.ProjectMCP) bool {
	for _, s := range o.Status.Servers {
		if s.Phase != v1alpha1.PhaseReady && s.Phase != v1alpha1.PhaseFailed {
			return false
		}
	}
	return len(o.Status.Servers) == len(o.Spec.Servers)
}

// A user who may write ProjectMCPs and not read Secrets adds, to a project the Secret consents
// to, servers that would send ${password} to listeners of theirs: in a URL, in a header, and in
// a stdio server's env. The Secret names another destination, so each of those servers fails
// naming the Secret, its destination and the annotation, no listener hears anything, the stdio
// server never starts, and the project's server without variables runs. Once the Secret's
// owner lists the destinations, the servers are rebuilt and connect with the value.
func TestSecretDestinations(t *testing.T) {
	ns := harness.NewNamespace(t)
	ctx := context.Background()
	const password = "pw-dest-8Kx3-unseen"
	const elsewhere = "https://api.payments.example"
	inURL, urlListener := newRecorder(t, fixture.StartHTTP(t))
	inHeader, headerListener := newRecorder(t, fixture.StartHTTP(t))
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "payments-db", Namespace: ns, Annotations: map[string]string{
		v1alpha1.AnnotationAllowedProjects: "web", v1alpha1.AnnotationAllowedDestinations: elsewhere}},
		StringData: map[string]string{"password": password}}
	if err := harness.Env.Client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	projectEditor(t, ns, "alice")
	alice := asUser(t, "alice")

	byURL := v1alpha1.MCPServer{Name: "byurl", HTTP: &v1alpha1.HTTPServer{URL: urlListener + "/mcp?p=${password}"}}
	byHeader := v1alpha1.MCPServer{Name: "byheader", HTTP: &v1alpha1.HTTPServer{URL: headerListener + "/mcp",
		Headers: []v1alpha1.NameValue{{Name: "X-Collected", Value: "${password}"}}}}
	byEnv := harness.FixtureServer(t, "byenv")
	byEnv.Stdio.Env = append(byEnv.Stdio.Env, v1alpha1.NameValue{Name: "DB_PASSWORD", Value: "${password}"})
	plain := harness.FixtureServer(t, "plain")
	obj := &v1alpha1.ProjectMCP{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns}, Spec: v1alpha1.ProjectMCPSpec{
		SecretRef: &corev1.LocalObjectReference{Name: "payments-db"},
		Reconnect: &v1alpha1.ReconnectPolicy{MaxAttempts: ptr.To[int32](0)},
		Servers:   []v1alpha1.MCPServer{byURL, byHeader, byEnv, plain},
	}}
	if err := alice.Create(ctx, obj); err != nil {
		t.Fatalf("alice may write ProjectMCPs: %v", err)
	}
	key := client.ObjectKeyFromObject(obj)
	t.Cleanup(func() { harness.DeleteAndWait(t, key) })

	refused := harness.WaitStatus(t, key, 30*time.Second, "every server's first connect over", settled)
	for name, rec := range map[string]*recorder{"url": inURL, "header": inHeader} {
		if all, with := rec.requests(password); all != 0 {
			t.Errorf("the %s listener, a destination the Secret does not name, received %d requests, %d with the password", name, all, with)
		}
	}
	if _, err := os.Stat(harness.PIDFileOf(byEnv)); !os.IsNotExist(err) {
		t.Errorf("the stdio server whose command line the Secret does not name must never start (pid file: %v)", err)
	}
	refusal := func(server, destination string) string {
		return `server "` + server + `": Secret "payments-db" does not allow its values to go to ` + destination +
			`: add ` + destination + ` to its annotation mcp.dsh.dev/allowed-destinations`
	}
	for _, s := range []struct{ name, destination string }{{"byurl", urlListener}, {"byheader", headerListener}, {"byenv", commandLine(byEnv)}} {
		if !failedWith(s.name, refusal(s.name, s.destination))(refused) {
			t.Errorf("server %q: want Failed with %q, got %+v", s.name, refusal(s.name, s.destination), mustServer(t, refused, s.name))
		}
	}
	if c := mustServer(t, refused, "plain"); c.Phase != v1alpha1.PhaseReady {
		t.Errorf("the server without variables must run: %+v", c)
	}
	if t.Failed() {
		t.FailNow()
	}
	// The three failures' events share their reason and object, so the recorder keeps the first
	// one's note as a series: whichever server failed first, its note names the refusal.
	assertEventNote(t, ns, v1alpha1.EventConnectFailed, `Secret "payments-db" does not allow its values to go to `)
	plainConn := mustServer(t, refused, "plain").Connection

	annotateSecret(t, secret, v1alpha1.AnnotationAllowedDestinations,
		strings.Join([]string{elsewhere + ", " + urlListener, headerListener, commandLine(byEnv)}, "\n"))
	granted := harness.WaitStatus(t, key, 30*time.Second, "every server Ready once the Secret names its destination", func(o *v1alpha1.ProjectMCP) bool {
		return harness.PhaseIs("byurl", v1alpha1.PhaseReady)(o) && harness.PhaseIs("byheader", v1alpha1.PhaseReady)(o) && harness.PhaseIs("byenv", v1alpha1.PhaseReady)(o)
	})
	for name, rec := range map[string]*recorder{"url": inURL, "header": inHeader} {
		if all, with := rec.requests(password); with == 0 || with != all {
			t.Errorf("every request to the %s listener carries the value once it is a destination: %d of %d", name, with, all)
		}
	}
	mount(t, key, "s1")
	c := harness.Ctl.Registry.Lookup(key, "s1", "byenv")
	callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	res, err := c.Call(callCtx, &mcp.CallToolParams{Name: "getenv", Arguments: map[string]any{"name": "DB_PASSWORD"}}, nil)
	if err != nil || res.Content[0].(*mcp.TextContent).Text != password {
		t.Fatalf("the value must reach the stdio server's env once its command line is a destination: %v %v", res, err)
	}
	if c := mustServer(t, granted, "plain").Connection; c != plainConn {
		t.Errorf("consent must not touch a server without variables: connection %s became %s", plainConn, c)
	}
}
