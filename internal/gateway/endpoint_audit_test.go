package gateway_test

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/audit"
	"github.com/dsh-dev/projectmcp/internal/gateway"
	"github.com/dsh-dev/projectmcp/internal/testenv/harness"
	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// The audit log of a project under the default policy (Project) records each tool call and
// prompts/get, allowed, on both protocol revisions; with AuditArguments (--audit-arguments)
// its records carry the arguments as the session sent them, without it none does.
func TestGatewayAuditArguments(t *testing.T) {
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "shop", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "a")}})
	harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	for _, withArguments := range []bool{true, false} {
		t.Run(map[bool]string{true: "with arguments", false: "without"}[withArguments], func(t *testing.T) {
			logPath := filepath.Join(t.TempDir(), "audit.log")
			log, err := audit.Open(logPath, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, base := serveGateway(t, gateway.Options{Registry: harness.Ctl.Registry, Audit: log, AuditArguments: withArguments})
			for _, revision := range []string{"2025-11-25", ""} {
				auditedUses(t, base+gateway.Path(key), revision)
			}
			var records []audit.Record
			testutil.Eventually(t, 10*time.Second, "four records in the audit log", func() bool {
				records = readAudit(t, logPath)
				return len(records) >= 4
			})
			methods := map[string]int{}
			for _, r := range records {
				checkAuditedUse(t, r, ns, withArguments)
				methods[r.Method]++
			}
			if methods["tools/call"] != 2 || methods["prompts/get"] != 2 || len(records) != 4 {
				t.Errorf("audit records by method %v, want a tool call and a prompts/get of each revision", methods)
			}
		})
	}
}

// auditedUses calls a__echo with {"text": "audited"} and gets a__greet with {"name":
// "Ada"} in a session of revision ("" for 2026-07-28).
func auditedUses(t *testing.T, url, revision string) {
	t.Helper()
	header := http.Header{}
	if revision == "" {
		header.Set(gateway.SessionHeader, "audited")
	}
	s := harness.MustDial(t, mcp.NewClient(&mcp.Implementation{Name: "audit-test", Version: "1"}, nil), url, revision, header)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "a__echo", Arguments: map[string]any{"text": "audited"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetPrompt(ctx, &mcp.GetPromptParams{Name: "a__greet", Arguments: map[string]string{"name": "Ada"}}); err != nil {
		t.Fatal(err)
	}
}

// checkAuditedUse checks a record of auditedUses: the Project policy's allow, and the
// arguments exactly when they are asked for.
func checkAuditedUse(t *testing.T, r audit.Record, ns string, withArguments bool) {
	t.Helper()
	if r.Policy != string(v1alpha1.ToolAuthorizationProject) || r.Decision != "allow" || r.Outcome != "ok" ||
		r.Project != ns+"/shop" || r.Server != "a" || r.Principal == "" || len(r.Session) != 16 {
		t.Errorf("audit record %+v", r)
	}
	var want map[string]any
	switch {
	case r.Method == "tools/call" && r.Tool == "echo":
		want = map[string]any{"text": "audited"}
	case r.Method == "prompts/get" && r.Prompt == "greet":
		want = map[string]any{"name": "Ada"}
	default:
		t.Fatalf("audit record of %s %s%s: not a use the test made", r.Method, r.Tool, r.Prompt)
	}
	if !withArguments {
		if len(r.Arguments) != 0 {
			t.Errorf("without --audit-arguments, the record of %s holds arguments %s", r.Method, r.Arguments)
		}
		return
	}
	var got map[string]any
	if err := json.Unmarshal(r.Arguments, &got); err != nil || !maps.Equal(got, want) {
		t.Errorf("with --audit-arguments, the record of %s holds arguments %s, want %v", r.Method, r.Arguments, want)
	}
}
