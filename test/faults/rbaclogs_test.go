//go:build faults

package faults

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/gateway/access"
	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// loggingServer is an MCP server over streamable HTTP (2025-11-25) that logs outside any
// request whenever the suite says, and records every level it is set to.
type loggingServer struct {
	url    string
	server *mcp.Server
	mu     sync.Mutex
	levels []mcp.LoggingLevel // every logging/setLevel it got, in order
}

func startLoggingServer(t *testing.T, name string) *loggingServer {
	l := &loggingServer{server: mcp.NewServer(&mcp.Implementation{Name: name, Version: "1"}, &mcp.ServerOptions{
		SupportedProtocolVersions: []string{"2025-11-25"},
		Instructions:              "The " + name + " server.",
		Capabilities:              &mcp.ServerCapabilities{Logging: &mcp.LoggingCapabilities{}, Tools: &mcp.ToolCapabilities{}},
	})}
	mcp.AddTool(l.server, &mcp.Tool{Name: "query", Description: "Answers ok."}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil, nil
	})
	l.server.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if p, ok := req.GetParams().(*mcp.SetLoggingLevelParams); ok && method == "logging/setLevel" && p != nil {
				l.mu.Lock()
				l.levels = append(l.levels, p.Level)
				l.mu.Unlock()
			}
			return next(ctx, method, req)
		}
	})
	srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return l.server }, nil))
	t.Cleanup(srv.Close)
	l.url = srv.URL + "/mcp"
	return l
}

// setTo is every level the server was set to.
func (l *loggingServer) setTo() []mcp.LoggingLevel {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.levels)
}

// log has every session of the server (the controller's connections) send a line outside any
// request; the SDK sends it only at or above the level the session was set to.
func (l *loggingServer) log(level mcp.LoggingLevel, text string) {
	for ss := range l.server.Sessions() {
		_ = ss.Log(context.Background(), &mcp.LoggingMessageParams{Level: level, Logger: "sql", Data: text})
	}
}

// itemToken creates a ServiceAccount that may use every ProjectMCP of ns (the Role agentToken
// made) and is granted rules besides, and returns a token of it.
func (s *suite) itemToken(t *testing.T, name string, rules []rbacv1.PolicyRule) string {
	ctx := context.Background()
	objs := []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name + "-use", Namespace: ns},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "agent"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Rules: rules},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: name},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: name, Namespace: ns}}},
	}
	for _, o := range objs {
		if err := s.env.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	s.undo = append(s.undo, func() {
		for _, o := range objs {
			_ = s.env.Client.Delete(ctx, o)
		}
	})
	cs, err := kubernetes.NewForConfig(s.env.Config)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// dialAs opens a 2025-11-25 session of token on url.
func dialAs(ctx context.Context, url, token string, opts *mcp.ClientOptions) (*mcp.ClientSession, error) {
	hc := &http.Client{Transport: bearer{token, http.DefaultTransport}}
	return mcp.NewClient(&mcp.Implementation{Name: "rbac-logs", Version: "1"}, opts).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
}

// rbacLogs runs an RBAC project of two servers that log outside any request: the suite's own
// identity (granted `use` alone) sets debug beside a reader granted one tool of db.
func (s *suite) rbacLogs(t *testing.T) {
	s.fault(t, row{fault: "an RBAC-denied session beside a permitted one, at log level debug",
		sees:       "the denied session gets no log line and no instructions, its `logging/setLevel debug` reaches no server, and a server's own endpoint refuses it naming the grant it lacks; the permitted session gets its server's lines at its own level, and none of the server it holds no grant on",
		guaranteed: "on an RBAC project a server's lines outside requests, its level and its instructions are for the identities holding a grant on it, decided when the session is mounted and kept on it (the goroutine that delivers lines asks for no review); each server logs at the most verbose level of its holders alone",
	}, func(t *testing.T, r *row) {
		db, vault := startLoggingServer(t, "db"), startLoggingServer(t, "vault")
		key := s.project(t, "rbaclogs", v1alpha1.ProjectMCPSpec{ToolAuthorization: v1alpha1.ToolAuthorizationRBAC, Servers: []v1alpha1.MCPServer{
			{Name: "db", HTTP: &v1alpha1.HTTPServer{URL: db.url}}, {Name: "vault", HTTP: &v1alpha1.HTTPServer{URL: vault.url}},
		}}, true)
		reader := s.itemToken(t, "rbaclogs-reader", []rbacv1.PolicyRule{{APIGroups: []string{v1alpha1.GroupVersion.Group},
			Resources: []string{access.ResourceTools}, ResourceNames: []string{key.Name + "/db__query"}, Verbs: []string{access.ItemVerb}}})

		var deniedLines, readerLines atomic.Int64
		var mu sync.Mutex
		var got []string // the reader's lines
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		denied, err := dialAs(ctx, s.endpoint(key), s.token, &mcp.ClientOptions{
			LoggingMessageHandler: func(context.Context, *mcp.LoggingMessageRequest) { deniedLines.Add(1) }})
		if err != nil {
			t.Fatal(err)
		}
		s.undo = append(s.undo, func() { _ = denied.Close() })
		permitted, err := dialAs(ctx, s.endpoint(key), reader, &mcp.ClientOptions{
			LoggingMessageHandler: func(_ context.Context, req *mcp.LoggingMessageRequest) {
				readerLines.Add(1)
				mu.Lock()
				got = append(got, fmt.Sprintf("%s: %v", req.Params.Logger, req.Params.Data))
				mu.Unlock()
			}})
		if err != nil {
			t.Fatal(err)
		}
		s.undo = append(s.undo, func() { _ = permitted.Close() })
		if err := denied.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "debug"}); err != nil {
			t.Fatal(err)
		}
		if err := permitted.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
			t.Fatal(err)
		}
		if in := denied.InitializeResult().Instructions; in != "" {
			t.Errorf("the denied session was given instructions: %q", in)
		}
		if in := permitted.InitializeResult().Instructions; !strings.Contains(in, "## db") || strings.Contains(in, "vault") {
			t.Errorf("the permitted session's instructions: %q, want db's alone", in)
		}
		testutil.Eventually(t, 10*time.Second, "db set to the permitted session's level", func() bool { return len(db.setTo()) > 0 })

		// Lines outside any request, until the permitted session has its first.
		sent := 0
		testutil.Eventually(t, 15*time.Second, "the permitted session's line of db", func() bool {
			db.log("info", "SELECT salary FROM payroll")
			db.log("debug", "plan: seq scan on payroll")
			vault.log("emergency", "unsealed with key 7f3a")
			sent += 3
			time.Sleep(200 * time.Millisecond)
			return readerLines.Load() > 0
		})
		time.Sleep(time.Second) // a line meant for no one would have come by now
		mu.Lock()
		lines := slices.Clone(got)
		mu.Unlock()
		for _, line := range lines {
			if line != "db/sql: SELECT salary FROM payroll" {
				t.Errorf("the permitted session got %q: only db's lines at info or above are its", line)
			}
		}
		if n := deniedLines.Load(); n != 0 {
			t.Errorf("the denied session got %d lines", n)
		}
		if levels := db.setTo(); !slices.Equal(levels, []mcp.LoggingLevel{"info"}) {
			t.Errorf("db was set to %v, want the permitted session's info alone", levels)
		}
		if levels := vault.setTo(); len(levels) != 0 {
			t.Errorf("vault, which no session holds a grant on, was set to %v", levels)
		}

		// A server's own endpoint takes only the identities granted something of it.
		serverURL := func(server string) string {
			return fmt.Sprintf("http://%s/projects/%s/%s/servers/%s/mcp", s.addrs.gateway, key.Namespace, key.Name, server)
		}
		refusal, refused := "", 0
		for _, c := range []struct {
			server, token string
			admitted      bool
		}{{"db", s.token, false}, {"vault", reader, false}, {"db", reader, true}} {
			cs, err := dialAs(ctx, serverURL(c.server), c.token, nil)
			if err == nil {
				_ = cs.Close()
			}
			switch {
			case c.admitted && err != nil:
				t.Errorf("a granted identity on %s's endpoint: %v", c.server, err)
			case !c.admitted && (err == nil || !strings.Contains(err.Error(), "is not allowed for this identity")):
				t.Errorf("an identity granted nothing of %s, on its endpoint: %v, want a refusal", c.server, err)
			case !c.admitted:
				refused++
				if refusal == "" {
					refusal = err.Error()
					if i := strings.Index(refusal, "server \""); i >= 0 {
						refusal = refusal[i:]
					}
				}
			}
		}
		r.figure("denied session: %d lines of %d sent outside requests (permitted: %d, its own server's at its level); levels set: db %v, vault %v",
			deniedLines.Load(), sent, len(lines), db.setTo(), vault.setTo())
		r.figure("server endpoints: %d of 2 sessions of identities granted nothing of the server refused: %s", refused, cut(refusal, 110))
	})
}

// cut shortens s to n bytes, marking the cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
