package conn

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/test/fixture"
)

func TestSplitWords(t *testing.T) {
	cases := []struct {
		line string
		want []string
		err  string
	}{
		{"projectmcp token --audience projectmcp", []string{"projectmcp", "token", "--audience", "projectmcp"}, ""},
		{`  ./bin/h  'a b'  "c \"d\" \x"  e\ f `, []string{"./bin/h", "a b", `c "d" \x`, "e f"}, ""},
		{`sh -c 'vault read -field=token x | jq .'`, []string{"sh", "-c", "vault read -field=token x | jq ."}, ""},
		{"h --url ${URL}", []string{"h", "--url", "${URL}"}, ""}, // refused by helperHeaders, naming it
		{`h ''`, []string{"h", ""}, ""},
		{"h | jq", nil, `"|" needs a shell`},
		{"h $TOKEN", nil, `"$" needs a shell`},
		{`h "$(id)"`, nil, `"$" needs a shell`},
		{"h > out", nil, `">" needs a shell`},
		{"h 'open", nil, "unterminated single quote"},
		{`h "open`, nil, "unterminated double quote"},
		{`h \`, nil, "backslash at the end"},
		{"   ", nil, "names no command"},
	}
	for _, tc := range cases {
		got, err := splitWords(tc.line)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("splitWords(%q) = %q, %v; want an error saying %q", tc.line, got, err, tc.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("splitWords(%q) = %q, %v; want %q", tc.line, got, err, tc.want)
		}
	}
}

func TestLastLine(t *testing.T) {
	long := strings.Repeat("x", helperLineBytes+10)
	cases := map[string]string{
		"":                               "",
		"one\ntwo\n\n":                   "two",
		"a\r\nfailed: \x1b[31mno\x1b[0m": "failed: [31mno[0m",
		long:                             long[:helperLineBytes] + "...",
	}
	for in, want := range cases {
		if got := lastLine([]byte(in)); got != want {
			t.Errorf("lastLine(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseHelperOutput(t *testing.T) {
	cases := []struct {
		out, want, err string
	}{
		{`{"Authorization": "Bearer s3cr3t", "x-team": "a"}`, "Bearer s3cr3t", ""},
		{`[]`, "", "not a JSON object"},
		{`null`, "", "not a JSON object"},
		{`{"Authorization": 1}`, "", "not a JSON object"},
		{`{"Authorization": "Bearer s3cr3t"} trailing`, "", "not a JSON object"},
		{`{"bad name": "s3cr3t"}`, "", `"bad name" is not a valid header name`},
		{`{"X-A": "s3cr3t\nInjected: 1"}`, "", `the value of header "X-A" is not a valid header value`},
	}
	for _, tc := range cases {
		s := &scrubber{}
		h, err := parseHelperOutput([]byte(tc.out), s)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || strings.Contains(err.Error(), "s3cr3t") {
				t.Errorf("parseHelperOutput(%s): %v; want an error saying %q without the value", tc.out, err, tc.err)
			}
			continue
		}
		if err != nil || h.Get("Authorization") != tc.want {
			t.Errorf("parseHelperOutput(%s) = %v, %v", tc.out, h, err)
		}
		if s.redact("Bearer s3cr3t") == "Bearer s3cr3t" {
			t.Errorf("the helper's values are not scrubbed")
		}
	}
}

// writeHelper writes an executable shell script into dir and returns its path.
func writeHelper(t *testing.T, dir, body string) string {
	t.Helper()
	path := filepath.Join(dir, "helper.sh")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// A server's headersHelper runs at connect, under Claude Code's variables; its header reaches
// the server; when the server refuses it (401, at connect or on a forwarded call) the
// connection is made again with the helper run again, and calls work; its values appear in
// no status and no log line.
func TestHeadersHelperRunsAtConnectAndAfterARefusal(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	// The first token is refused: the connect fails with 401 and is made again.
	if err := os.WriteFile(tokens, []byte("secret-token-2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	helper := writeHelper(t, dir, fmt.Sprintf(`n=$(( $(cat %[1]s/count 2>/dev/null || echo 0) + 1 ))
echo $n > %[1]s/count
printf '%%s %%s\n' "$CLAUDE_CODE_MCP_SERVER_NAME" "$CLAUDE_CODE_MCP_SERVER_URL" > %[1]s/env
echo "helper run $n" >&2
printf '{"Authorization": "Bearer secret-token-%%d"}' $n
`, dir))
	url := fixture.StartHTTP(t, "--bearer-file", tokens) + "/mcp"
	sink := &logSink{}
	// No probe nor re-list comes by to find the refusal: the refused call itself must.
	c := start(t, Options{Log: sink.logger(), Settings: Settings{HealthInterval: time.Hour, RelistInterval: time.Hour}, Server: v1alpha1.MCPServer{Name: "r", HTTP: &v1alpha1.HTTPServer{
		URL: url, HeadersHelper: helper, Headers: []v1alpha1.NameValue{{Name: "Authorization", Value: "Bearer static"}},
	}}})
	var errors []string
	note := func(s Snapshot) { errors = append(errors, s.LastError) }
	first := waitFor(t, c, "ready with the second token", func(s Snapshot) bool { note(s); return s.Phase == v1alpha1.PhaseReady })
	if got := call(t, c, "echo", map[string]any{"text": "one"}); got != "one" {
		t.Fatalf("echo = %q", got)
	}
	if env, _ := os.ReadFile(filepath.Join(dir, "env")); string(env) != "r "+url+"\n" {
		t.Fatalf("the helper saw CLAUDE_CODE_MCP_SERVER_NAME and _URL as %q", env)
	}

	// The server revokes the token: the next call is refused, the session ends, and the
	// helper's next token connects it again; alike for a call the SDK sends and for one
	// forwarded as the gateway forwards an agent's.
	revoke := []struct {
		token string
		call  func() error
	}{
		{"secret-token-3", func() error {
			_, err := c.Call(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "refused"}}, nil)
			return err
		}},
		{"secret-token-4", func() error { _, err := forwardRaw(c, "refused", AcceptsStateful); return err }},
	}
	for _, r := range revoke {
		if err := os.WriteFile(tokens, []byte(r.token+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := r.call(); err == nil {
			t.Fatal("a call with a revoked token succeeded")
		}
		before := first.ReadySince
		first = waitFor(t, c, "ready again", func(s Snapshot) bool {
			note(s)
			return s.Phase == v1alpha1.PhaseReady && s.ReadySince.After(before)
		})
		if raw, err := forwardRaw(c, "again", AcceptsStateful); err != nil || !strings.Contains(string(raw), "again") {
			t.Fatalf("forwarded echo after the refusal = %s, %v", raw, err)
		}
	}
	if count, _ := os.ReadFile(filepath.Join(dir, "count")); strings.TrimSpace(string(count)) != "4" {
		t.Fatalf("the helper ran %q times, want 4", count)
	}
	seen := strings.Join(errors, "\n") + sink.all()
	if !strings.Contains(strings.Join(errors, "\n"), "401") {
		t.Errorf("no status said the server refused the first token: %q", errors)
	}
	if strings.Contains(seen, "secret-token") {
		t.Fatalf("a helper's value reached status or logs:\n%s", seen)
	}
}

// A failing helper fails the connect with its stderr's last line; one whose output is not a
// JSON object fails it saying so; neither repeats what it printed.
func TestHeadersHelperFailureNamesItsStderr(t *testing.T) {
	cases := map[string]struct{ body, want string }{
		"exits 3":  {"echo 'reading the vault' >&2\necho 'vault: permission denied for role mcp' >&2\necho '{\"A\": \"secret-out\"}'\nexit 3\n", "headersHelper: vault: permission denied for role mcp"},
		"not JSON": {"echo 'Bearer secret-out'\n", "headersHelper: its output is not a JSON object of string values"},
		"silent":   {"exit 7\n", "headersHelper: exit status 7"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			helper := writeHelper(t, t.TempDir(), tc.body)
			c := start(t, Options{Server: v1alpha1.MCPServer{Name: "r", HTTP: &v1alpha1.HTTPServer{URL: "http://127.0.0.1:1/mcp", HeadersHelper: helper}}})
			s := waitFor(t, c, "the connect to fail", func(s Snapshot) bool { return s.LastError != "" })
			if !strings.Contains(s.LastError, tc.want) || strings.Contains(s.LastError, "secret-out") {
				t.Fatalf("last error %q; want it to say %q", s.LastError, tc.want)
			}
		})
	}
}

// A helper is refused, named and never run when no --allow-command pattern allows its command
// (as a stdio server's would be), or when its line refers to a variable (a command line is
// readable by every user, and a Secret's consent names no helper).
func TestHeadersHelperRefused(t *testing.T) {
	cases := map[string]struct {
		allow      []string
		args, want string
	}{
		"not allowed":                   {[]string{"/opt/mcp/*"}, " --flag", "headersHelper: command %q is not allowed here"},
		"a variable":                    {nil, " --token ${TOKEN}", "headersHelper: it refers to ${TOKEN}, and a helper's command line takes no ${VAR} reference"},
		"a variable under an allowlist": {[]string{"/opt/mcp/*"}, " ${TOKEN}", "takes no ${VAR} reference"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			helper := writeHelper(t, dir, fmt.Sprintf("touch %s/ran\necho '{}'\n", dir))
			vars := func(context.Context) (map[string]string, error) {
				return map[string]string{"TOKEN": "secret-value"}, nil
			}
			c := start(t, Options{Settings: Settings{AllowCommands: tc.allow}, Variables: vars,
				Server: v1alpha1.MCPServer{Name: "r", HTTP: &v1alpha1.HTTPServer{URL: "http://127.0.0.1:1/mcp", HeadersHelper: helper + tc.args}}})
			s := waitFor(t, c, "the connect to fail", func(s Snapshot) bool { return s.LastError != "" })
			want := tc.want
			if strings.Contains(want, "%q") {
				want = fmt.Sprintf(want, helper)
			}
			if !strings.Contains(s.LastError, want) || strings.Contains(s.LastError, "secret-value") {
				t.Fatalf("last error %q; want it to say %q", s.LastError, want)
			}
			if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
				t.Fatal("the refused helper ran")
			}
		})
	}
}

// A helper that outlives its bound is ended with its group, and the connect fails saying so.
func TestHeadersHelperBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out the helper's bound")
	}
	helper := writeHelper(t, t.TempDir(), "sleep 60\n")
	c := start(t, Options{Settings: Settings{ConnectTimeout: 30 * time.Second}, Server: v1alpha1.MCPServer{Name: "r", HTTP: &v1alpha1.HTTPServer{URL: "http://127.0.0.1:1/mcp", HeadersHelper: helper}}})
	s := waitFor(t, c, "the connect to fail", func(s Snapshot) bool { return s.LastError != "" })
	if !strings.Contains(s.LastError, "headersHelper: it did not finish within") {
		t.Fatalf("last error %q", s.LastError)
	}
}

// On the legacy SSE transport too, a server's refusal of a request ends the session (the SDK
// closes the connection on a failed write), and the helper's next token connects it again.
func TestHeadersHelperAfterARefusalOverSSE(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("secret-token-1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	helper := writeHelper(t, dir, fmt.Sprintf(`n=$(( $(cat %[1]s/count 2>/dev/null || echo 0) + 1 ))
echo $n > %[1]s/count
printf '{"Authorization": "Bearer secret-token-%%d"}' $n
`, dir))
	url := fixture.StartHTTP(t, "--sse", "--bearer-file", tokens) + "/sse"
	c := start(t, Options{Settings: Settings{HealthInterval: time.Hour, RelistInterval: time.Hour}, Server: v1alpha1.MCPServer{Name: "r",
		HTTP: &v1alpha1.HTTPServer{URL: url, Transport: v1alpha1.TransportSSE, HeadersHelper: helper}}})
	first := waitPhase(t, c, v1alpha1.PhaseReady)
	if err := os.WriteFile(tokens, []byte("secret-token-2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Call(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "refused"}}, nil); err == nil {
		t.Fatal("a call with a revoked token succeeded")
	}
	waitFor(t, c, "ready again", func(s Snapshot) bool {
		return s.Phase == v1alpha1.PhaseReady && s.ReadySince.After(first.ReadySince)
	})
	if got := call(t, c, "echo", map[string]any{"text": "two"}); got != "two" {
		t.Fatalf("echo after the refusal = %q", got)
	}
}
