package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/gateway"
	"github.com/dsh-dev/projectmcp/internal/gateway/access"
	"github.com/dsh-dev/projectmcp/internal/testenv/harness"
	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// On an RBAC project, what a server says to the whole project is for the identities that hold
// a grant on it. Beside an outsider granted nothing (but `use`), at level debug: holder, granted
// two tools of a, and bee, granted every tool of b, each get the lines of their own server
// (every line of a stdio server reaches the gateway outside any request) and no other's; the
// outsider gets none; each server logs at the level of its holders alone, and the outsider's
// debug reaches no server; the instructions name the servers granted; a server's own endpoint
// refuses an identity granted nothing of it, on both revisions and however the session was
// mounted.
func TestGatewayRBACServerLogs(t *testing.T) {
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "shop", v1alpha1.ProjectMCPSpec{ToolAuthorization: v1alpha1.ToolAuthorizationRBAC,
		Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "a", "--protocol", "2025-11-25"), harness.FixtureServer(t, "b", "--protocol", "2025-11-25")}})
	harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	cs, err := kubernetes.NewForConfig(harness.Env.Config)
	if err != nil {
		t.Fatal(err)
	}
	tokens := map[string]string{
		"holder":   grant(t, cs, ns, "holder", []rbacv1.PolicyRule{itemRule("tools", "shop/a__log", "shop/a__echo")}),
		"bee":      grant(t, cs, ns, "bee", []rbacv1.PolicyRule{itemRule("tools", "shop/b__*")}),
		"outsider": grant(t, cs, ns, "outsider", nil),
	}
	_, base := serveGateway(t, gateway.Options{Registry: harness.Ctl.Registry, Auth: &access.KubernetesAuth{Client: cs}})
	project := base + gateway.Path(key)

	type reader struct {
		s     *mcp.ClientSession
		lines chan string
	}
	open := func(name, level string) reader {
		t.Helper()
		r := reader{lines: make(chan string, 64)}
		client := mcp.NewClient(&mcp.Implementation{Name: name, Version: "1"}, &mcp.ClientOptions{
			LoggingMessageHandler: func(_ context.Context, req *mcp.LoggingMessageRequest) {
				r.lines <- fmt.Sprintf("%s: %v", req.Params.Logger, req.Params.Data)
			}})
		r.s = harness.MustDial(t, client, project, "2025-11-25", http.Header{"Authorization": {"Bearer " + tokens[name]}})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := r.s.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: mcp.LoggingLevel(level)}); err != nil {
			t.Fatalf("%s sets its level: %v", name, err)
		}
		return r
	}
	outsider := open("outsider", "debug")
	holder := open("holder", "info")
	bee := open("bee", "warning")

	// Instructions: each server's under its name, of the servers granted alone.
	for name, want := range map[string][]string{"holder": {"a"}, "bee": {"b"}, "outsider": nil} {
		s := map[string]reader{"holder": holder, "bee": bee, "outsider": outsider}[name].s
		got := s.InitializeResult().Instructions
		for _, server := range []string{"a", "b"} {
			if has, granted := strings.Contains(got, "## "+server+"\n"), slices.Contains(want, server); has != granted {
				t.Errorf("%s's instructions %q: server %s there %v, granted %v", name, got, server, has, granted)
			}
		}
	}

	// Levels: each server at its holders' level; the outsider's debug reaches neither.
	levels := func() (a, b mcp.LoggingLevel) {
		return serverLevel(t, key, holder.s, "a"), serverLevel(t, key, holder.s, "b")
	}
	testutil.Eventually(t, 10*time.Second, "both servers leveled", func() bool { a, b := levels(); return a != "" && b != "" })
	if a, b := levels(); a != "info" || b != "warning" {
		t.Errorf("servers at a %q, b %q; want a at holder's info and b at bee's warning, whatever the outsider asked", a, b)
	}

	// Lines: each of its own server's, to the identities granted that server.
	callOK(t, holder.s, "a__log", map[string]any{"level": "info", "text": "SELECT salary FROM payroll"})
	callOK(t, bee.s, "b__log", map[string]any{"level": "warning", "text": "rotated the keys"})
	expectLine(t, "holder", holder.lines, "a/fixture: SELECT salary FROM payroll")
	expectLine(t, "bee", bee.lines, "b/fixture: rotated the keys")
	time.Sleep(time.Second) // a line meant for no one would have come by now
	for name, r := range map[string]reader{"outsider": outsider, "holder": holder, "bee": bee} {
		select {
		case got := <-r.lines:
			t.Errorf("%s got a line of a server it holds no grant on: %q", name, got)
		default:
		}
	}
	if a, b := levels(); a != "info" || b != "warning" {
		t.Errorf("servers at a %q, b %q after the calls; want info and warning", a, b)
	}

	// A server's own endpoint: only identities granted something of it.
	for _, revision := range []string{"2025-11-25", ""} {
		t.Run("server endpoints/"+revisionName(revision), func(t *testing.T) {
			checkCall(t, rbacSession(t, base+gateway.ServerPath(key, "a"), tokens["holder"], revision), "echo", true)
			mountRefused(t, base+gateway.ServerPath(key, "a"), tokens["outsider"], revision)
			mountRefused(t, base+gateway.ServerPath(key, "b"), tokens["holder"], revision)
		})
	}
	// A stateless session is named alike on every endpoint of its project: one the project
	// endpoint mounted is still refused by a server's endpoint that the identity holds no grant on.
	mounted := rbacSession(t, project, tokens["outsider"], "")
	if tools := sessionTools(t, mounted); len(tools) != 0 {
		t.Fatalf("the outsider lists %v", tools)
	}
	mountRefused(t, base+gateway.ServerPath(key, "a"), tokens["outsider"], "")
}

// serverLevel is the log level the connection of server that session s is bound to was set to.
func serverLevel(t *testing.T, key types.NamespacedName, s *mcp.ClientSession, server string) mcp.LoggingLevel {
	t.Helper()
	c := harness.Ctl.Registry.Lookup(key, access.SessionRef(s.ID()), server)
	if c == nil {
		t.Fatalf("the session has no connection to %s", server)
	}
	_, level := c.Subscriptions()
	return level
}

// expectLine waits for a session's next log line and checks it.
func expectLine(t *testing.T, who string, lines <-chan string, want string) {
	t.Helper()
	select {
	case got := <-lines:
		if got != want {
			t.Errorf("%s got %q, want %q", who, got, want)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("%s never got %q", who, want)
	}
}

// mountRefused checks that a session of token on a server's endpoint is refused, at initialize or
// at its first request, naming what would grant the server.
func mountRefused(t *testing.T, url, token, revision string) {
	t.Helper()
	header := http.Header{"Authorization": {"Bearer " + token}}
	if revision == "" {
		header.Set(gateway.SessionHeader, "rbac")
	}
	s, err := harness.Dial(url, revision, header)
	if err == nil {
		defer s.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = s.ListTools(ctx, nil)
		if err != nil {
			_, callErr := s.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hi"}})
			if callErr == nil || !strings.Contains(callErr.Error(), "is not allowed for this identity") {
				t.Errorf("%s: a call after the refusal: %v", url, callErr)
			}
		}
	}
	if err == nil || !strings.Contains(err.Error(), "is not allowed for this identity") || !strings.Contains(err.Error(), "__*") {
		t.Errorf("%s (%s): %v, want a refusal naming what would grant the server", url, revisionName(revision), err)
	}
}
