package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
)

const file = ".dsh/mcp.json"

func TestParseValid(t *testing.T) {
	src := `{
  "$schema": "https://example.invalid/mcp.schema.json",
  "idleTimeoutMs": 0,
  "readyTimeoutMs": 2500,
  "mcpServers": {
    "zeta": {"url": "https://${HOST:-mcp.example.com}/mcp", "headers": {"X-Team": "a", "Authorization": "Bearer ${TOKEN}"}},
    "github": {
      "type": "stdio",
      "command": "npx",
      "args": ["-y", "@modelcontextprotocol/server-github", "\u00e9\ud83d\ude00"],
      "env": {"Z": "1", "GITHUB_TOKEN": "${GITHUB_TOKEN}"},
      "cwd": "/src",
      "tools": {"allow": ["search_*"], "deny": ["delete_*"]}
    },
    "legacy": {"type": "sse", "url": "http://127.0.0.1:9000/sse", "disabled": true},
    "remote": {"type": "http", "url": "https://mcp.example.com/mcp"}
  }
}`
	got, err := Parse(file, []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := &v1alpha1.ProjectMCPSpec{
		IdleTimeout:  &metav1.Duration{},
		ReadyTimeout: &metav1.Duration{Duration: 2500 * time.Millisecond},
		Servers: []v1alpha1.MCPServer{
			{Name: "github", Stdio: &v1alpha1.StdioServer{
				Command:    "npx",
				Args:       []string{"-y", "@modelcontextprotocol/server-github", "é😀"},
				Env:        []v1alpha1.NameValue{{Name: "GITHUB_TOKEN", Value: "${GITHUB_TOKEN}"}, {Name: "Z", Value: "1"}},
				WorkingDir: "/src",
			}, Tools: &v1alpha1.ToolFilter{Allow: []string{"search_*"}, Deny: []string{"delete_*"}}},
			{Name: "legacy", Disabled: true, HTTP: &v1alpha1.HTTPServer{URL: "http://127.0.0.1:9000/sse", Transport: v1alpha1.TransportSSE}},
			{Name: "remote", HTTP: &v1alpha1.HTTPServer{URL: "https://mcp.example.com/mcp", Transport: v1alpha1.TransportStreamableHTTP}},
			{Name: "zeta", HTTP: &v1alpha1.HTTPServer{
				URL:       "https://${HOST:-mcp.example.com}/mcp",
				Transport: v1alpha1.TransportStreamableHTTP,
				Headers:   []v1alpha1.NameValue{{Name: "Authorization", Value: "Bearer ${TOKEN}"}, {Name: "X-Team", Value: "a"}},
			}},
		},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("spec mismatch (-want +got):\n%s", d)
	}
}

// TestParseClientKeys reads the keys Claude Code's and VS Code's entries have beyond the
// server's definition, each into its meaning in the spec.
func TestParseClientKeys(t *testing.T) {
	src := `{"mcpServers": {
  "remote": {
    "type": "http", "url": "https://mcp.example.com/mcp",
    "headersHelper": "./bin/mcp-headers --server remote",
    "oauth": {"clientId": "abc", "callbackPort": 8123, "authServerMetadataUrl": "https://auth.example.com/.well-known/oauth-authorization-server", "scopes": "read write"},
    "timeout": 90000, "request_timeout_ms": 60000, "alwaysLoad": true
  },
  "local": {
    "command": "npx", "args": ["-y", "pkg"],
    "sandboxEnabled": true,
    "sandbox": {"filesystem": {"allowWrite": ["${workspaceFolder}"], "denyRead": ["~/.ssh"]}, "network": {"allowedDomains": ["api.github.com"]}},
    "dev": {"watch": "src/**/*.ts", "debug": {"type": "node"}},
    "timeout": 5000
  },
  "scoped": {"url": "https://h/mcp", "oauth": {"scopes": ["a", "b"]}},
  "idp": {"url": "https://h/mcp", "oauth": {"resource": "api://mcp", "audience": "mcp-api", "authorizeParams": {"prompt": "consent", "access_type": "offline"},
    "tokenEndpointAuthMethod": "client_secret_post", "grant": "clientCredentials"}}
}}`
	got, err := Parse(file, []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := []v1alpha1.MCPServer{
		{Name: "idp", HTTP: &v1alpha1.HTTPServer{
			URL: "https://h/mcp", Transport: v1alpha1.TransportStreamableHTTP,
			OAuth: &v1alpha1.OAuthClient{Resource: "api://mcp", Audience: "mcp-api",
				AuthorizeParams:         []v1alpha1.NameValue{{Name: "access_type", Value: "offline"}, {Name: "prompt", Value: "consent"}},
				TokenEndpointAuthMethod: "client_secret_post", Grant: v1alpha1.OAuthGrantClientCredentials},
		}},
		{
			Name:    "local",
			Stdio:   &v1alpha1.StdioServer{Command: "npx", Args: []string{"-y", "pkg"}},
			Timeout: &metav1.Duration{Duration: 5 * time.Second},
			Sandbox: &v1alpha1.Sandbox{
				Enabled:    true,
				Filesystem: &v1alpha1.SandboxFilesystem{AllowWrite: []string{"${workspaceFolder}"}, DenyRead: []string{"~/.ssh"}},
				Network:    &v1alpha1.SandboxNetwork{AllowedDomains: []string{"api.github.com"}},
			},
		},
		{
			Name: "remote",
			HTTP: &v1alpha1.HTTPServer{
				URL: "https://mcp.example.com/mcp", Transport: v1alpha1.TransportStreamableHTTP,
				HeadersHelper: "./bin/mcp-headers --server remote",
				OAuth: &v1alpha1.OAuthClient{
					ClientID: "abc", CallbackPort: 8123,
					AuthServerMetadataURL: "https://auth.example.com/.well-known/oauth-authorization-server",
					Scopes:                []string{"read", "write"},
				},
			},
			Timeout:    &metav1.Duration{Duration: time.Minute}, // the shorter of the two
			AlwaysLoad: true,
		},
		{Name: "scoped", HTTP: &v1alpha1.HTTPServer{
			URL: "https://h/mcp", Transport: v1alpha1.TransportStreamableHTTP,
			OAuth: &v1alpha1.OAuthClient{Scopes: []string{"a", "b"}},
		}},
	}
	if d := cmp.Diff(want, got.Servers); d != "" {
		t.Fatalf("servers mismatch (-want +got):\n%s", d)
	}
}

func TestParseDeterministic(t *testing.T) {
	a := `{"mcpServers": {"b": {"command": "x", "env": {"B": "1", "A": "2"}}, "a": {"url": "http://h/"}}}`
	b := `{"mcpServers": {"a": {"url": "http://h/"}, "b": {"env": {"A": "2", "B": "1"}, "command": "x"}}}`
	sa, err := Parse(file, []byte(a))
	if err != nil {
		t.Fatal(err)
	}
	sb, err := Parse(file, []byte(b))
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(sa, sb); d != "" {
		t.Fatalf("member order changed the spec:\n%s", d)
	}
}

func TestParseBOMAndEmptyServers(t *testing.T) {
	spec, err := Parse(file, []byte("\uFEFF{\"mcpServers\": {}}\n"))
	if err != nil {
		t.Fatalf("a UTF-8 byte order mark must be accepted: %v", err)
	}
	if len(spec.Servers) != 0 || spec.IdleTimeout != nil {
		t.Fatalf("unexpected spec %+v", spec)
	}
	// The BOM does not count as a column.
	_, err = Parse(file, []byte("\uFEFF{\"x\": 1, \"mcpServers\": {}}"))
	assertError(t, err, 1, 2, `unknown key "x" at the top level`)
}

func TestParseErrors(t *testing.T) {
	nested := strings.Repeat("[", 100000) + strings.Repeat("]", 100000)
	cases := []struct {
		name string
		src  string
		at   string // where the error points: a needle in src, or $START, $END
		want string
	}{
		{"empty file", "", "$END", "the file is empty"},
		{"only whitespace", " \n\t ", "$END", "the file is empty"},
		{"not JSON", "mcpServers: {}", `mcpServers`, `unexpected 'm'; expected a value`},
		{"truncated", `{"mcpServers": {`, "$END", "expected a quoted key"},
		{"trailing data", `{"mcpServers": {}} []`, `[]`, `unexpected '[' after the end of the top-level value`},
		{"trailing comma", `{"mcpServers": {},}`, `$LAST:}`, "expected a quoted key"},
		{"comment", "{// servers\n\"mcpServers\": {}}", "//", "expected a quoted key"},
		{"top level array", `[]`, `[]`, `must hold a JSON object with "mcpServers", not an array`},
		{"mcpServers missing", `{"servers": {}}`, `"servers"`, `unknown key "servers" at the top level; did you mean "mcpServers"?`},
		{"mcpServers missing alone", `{}`, `$START`, `missing "mcpServers"`},
		{"mcpServers not an object", `{"mcpServers": []}`, `[]`, `"mcpServers" must be an object mapping server names to servers, not an array`},
		{"mcpServers null", `{"mcpServers": null}`, `null`, `not null`},
		{"server not an object", `{"mcpServers": {"a": "npx"}}`, `"npx"`, `server "a" must be an object with "command" or "url", not a string`},
		{"both command and url", `{"mcpServers": {"a": {"command": "x", "url": "http://h"}}}`, `"url"`, `server "a" sets both "command" and "url"`},
		{"neither", `{"mcpServers": {"a": {"args": []}}}`, `{"args"`, `server "a" has neither "command"`},
		{"unknown type", `{"mcpServers": {"a": {"type": "websocket", "url": "http://h"}}}`, `"websocket"`, `unknown type "websocket" in server "a"; the types are "stdio", "http", "sse"`},
		{"type typo", `{"mcpServers": {"a": {"type": "stdo", "command": "x"}}}`, `"stdo"`, `did you mean "stdio"?`},
		{"type not a string", `{"mcpServers": {"a": {"type": 1, "command": "x"}}}`, `1,`, `"type" in server "a" must be a string, not a number`},
		{"sse with command", `{"mcpServers": {"a": {"type": "sse", "command": "x"}}}`, `"command"`, `server "a" has type "sse" but sets "command"`},
		{"http with command", `{"mcpServers": {"a": {"type": "http", "command": "x"}}}`, `"command"`, `server "a" has type "http" but sets "command"`},
		{"stdio with url", `{"mcpServers": {"a": {"type": "stdio", "url": "http://h"}}}`, `"url"`, `server "a" has type "stdio" but sets "url"`},
		{"headers on stdio", `{"mcpServers": {"a": {"command": "x", "headers": {}}}}`, `"headers"`, `"headers" does not apply to server "a", whose type is "stdio"`},
		{"args on http", `{"mcpServers": {"a": {"url": "http://h", "args": []}}}`, `"args"`, `"args" does not apply to server "a", whose type is "http"`},
		{"ws type", `{"mcpServers": {"a": {"type": "ws", "url": "ws://h/mcp"}}}`, `"ws"`, `server "a" has type "ws" (WebSocket), which is not an MCP transport of the specification`},
		{"envFile", `{"mcpServers": {"a": {"command": "x", "envFile": ".env"}}}`, `"envFile"`, `"envFile" in server "a" is not carried: the controller reads no file of the project for values; list each variable in "env" as ${NAME}`},
		{"headersHelper on stdio", `{"mcpServers": {"a": {"command": "x", "headersHelper": "h"}}}`, `"headersHelper"`, `"headersHelper" does not apply to server "a", whose type is "stdio"`},
		{"sandbox on http", `{"mcpServers": {"a": {"url": "http://h", "sandboxEnabled": true}}}`, `"sandboxEnabled"`, `"sandboxEnabled" does not apply to server "a", whose type is "http"`},
		{"timeout zero", `{"mcpServers": {"a": {"command": "x", "timeout": 0}}}`, `0}`, `"timeout" in server "a" must be greater than 0`},
		{"timeout fraction", `{"mcpServers": {"a": {"command": "x", "request_timeout_ms": 1.5}}}`, `1.5`, `"request_timeout_ms" in server "a" must be a whole number of milliseconds`},
		{"alwaysLoad string", `{"mcpServers": {"a": {"command": "x", "alwaysLoad": "yes"}}}`, `"yes"`, `"alwaysLoad" in server "a" must be a boolean`},
		{"oauth key typo", `{"mcpServers": {"a": {"url": "http://h", "oauth": {"clientID": "c"}}}}`, `"clientID"`, `unknown key "clientID" in "oauth" in server "a"; did you mean "clientId"?`},
		{"oauth grant", `{"mcpServers": {"a": {"url": "http://h", "oauth": {"grant": "password"}}}}`, `"password"`, `"grant" in "oauth" in server "a" must be one of authorizationCode, clientCredentials, not "password"`},
		{"oauth auth method", `{"mcpServers": {"a": {"url": "http://h", "oauth": {"tokenEndpointAuthMethod": "tls_client_auth"}}}}`, `"tls_`, `must be one of client_secret_basic, client_secret_post, private_key_jwt, none`},
		{"oauth flow param", `{"mcpServers": {"a": {"url": "http://h", "oauth": {"authorizeParams": {"state": "x"}}}}}`, `"state"`, `"state" in "authorizeParams" in "oauth" in server "a" is set by the sign-in itself`},
		{"oauth param kind", `{"mcpServers": {"a": {"url": "http://h", "oauth": {"authorizeParams": {"p": 1}}}}}`, `1}`, `"p" in "authorizeParams"`},
		{"oauth port", `{"mcpServers": {"a": {"url": "http://h", "oauth": {"callbackPort": 70000}}}}`, `70000`, `"callbackPort" in "oauth" in server "a" must be a port, 1 to 65535`},
		{"oauth scope too long", `{"mcpServers": {"a": {"url": "http://h", "oauth": {"scopes": "` + strings.Repeat("s", 257) + `"}}}}`, `"sss`, `"scopes" in "oauth" in server "a" has a scope of 257 bytes; the limit is 256`},
		{"oauth metadata url too long", `{"mcpServers": {"a": {"url": "http://h", "oauth": {"authServerMetadataUrl": "https://h/` + strings.Repeat("p", 2048) + `"}}}}`, `"https`, `the limit is 2048`},
		{"sandbox key typo", `{"mcpServers": {"a": {"command": "x", "sandbox": {"network": {"allowDomains": []}}}}}`, `"allowDomains"`, `did you mean "allowedDomains"?`},
		{"url not http", `{"mcpServers": {"a": {"url": "ftp://h/x"}}}`, `"ftp`, `"url" in server "a" must start with http:// or https://`},
		{"url relative", `{"mcpServers": {"a": {"url": "/mcp"}}}`, `"/mcp"`, `must start with http:// or https://`},
		{"url unparsable", `{"mcpServers": {"a": {"url": "http://h:port/"}}}`, `"http`, `"url" in server "a" is not a valid URL: invalid port`},
		{"url without host", `{"mcpServers": {"a": {"url": "http:///mcp"}}}`, `"http`, `has no host`},
		{"url bad reference", `{"mcpServers": {"a": {"url": "http://${HOST/mcp"}}}`, `"http`, `unterminated variable reference`},
		{"url not a string", `{"mcpServers": {"a": {"url": 5}}}`, `5}`, `"url" in server "a" must be a string, not a number`},
		{"empty command", `{"mcpServers": {"a": {"command": ""}}}`, `""}`, `"command" in server "a" is empty`},
		{"blank command", `{"mcpServers": {"a": {"command": "  "}}}`, `"  "`, `"command" in server "a" is empty`},
		{"command not a string", `{"mcpServers": {"a": {"command": ["npx"]}}}`, `["npx"]`, `"command" in server "a" must be a string, not an array`},
		{"empty server name", `{"mcpServers": {"": {"command": "x"}}}`, `""`, `a server name is empty`},
		{"long server name", `{"mcpServers": {"` + strings.Repeat("a", 65) + `": {"command": "x"}}}`, `"aaa`, `is 65 characters; the limit is 64`},
		{"server name with dot", `{"mcpServers": {"my.server": {"command": "x"}}}`, `"my.server"`, `server name "my.server" contains '.'`},
		{"server name with space", `{"mcpServers": {"my server": {"command": "x"}}}`, `"my server"`, `contains ' '`},
		{"server name non-ASCII", `{"mcpServers": {"café": {"command": "x"}}}`, `"café"`, `contains 'é'`},
		{"server name with double underscore", `{"mcpServers": {"a__b": {"command": "x"}}}`, `"a__b"`, `server name "a__b" contains "__"; tool names are <server>__<tool>, so a server name may not contain "__" nor start or end with '_'`},
		{"server name starting with underscore", "{\"mcpServers\": {\n  \"ok\": {\"command\": \"x\"},\n  \"_a\": {\"command\": \"x\"}}}", `"_a"`, `server name "_a" starts with '_'; tool names are <server>__<tool>`},
		{"server name ending with underscore", `{"mcpServers": {"a_": {"command": "x"}}}`, `"a_"`, `server name "a_" ends with '_'; tool names are <server>__<tool>`},
		{"server name of underscores", `{"mcpServers": {"___": {"command": "x"}}}`, `"___"`, `server name "___" contains "__"`},
		{"duplicate server", "{\"mcpServers\": {\n  \"a\": {\"command\": \"x\"},\n  \"a\": {\"command\": \"y\"}}}", `"a": {"command": "y"`, `duplicate key "a" (first at line 2, column 3)`},
		{"duplicate top key", `{"mcpServers": {}, "mcpServers": {}}`, `"mcpServers": {}}`, `duplicate key "mcpServers" (first at line 1, column 2)`},
		{"duplicate env key", `{"mcpServers": {"a": {"command": "x", "env": {"K": "1", "K": "2"}}}}`, `"K": "2"`, `duplicate key "K"`},
		{"duplicate nested in unknown", `{"mcpServers": {}, "x": {"k": 1, "k": 2}}`, `"k": 2`, `duplicate key "k"`},
		{"args not an array", `{"mcpServers": {"a": {"command": "x", "args": "-y"}}}`, `"-y"`, `"args" in server "a" must be an array, not a string`},
		{"args not strings", `{"mcpServers": {"a": {"command": "x", "args": ["-y", 3]}}}`, `3]`, `"args"[1] in server "a" must be a string, not a number`},
		{"env not an object", `{"mcpServers": {"a": {"command": "x", "env": ["A=1"]}}}`, `["A=1"]`, `"env" in server "a" must be an object, not an array`},
		{"env value not a string", `{"mcpServers": {"a": {"command": "x", "env": {"A": 1}}}}`, `1}`, `"env.A" in server "a" must be a string, not a number`},
		{"env name with equals", `{"mcpServers": {"a": {"command": "x", "env": {"A=B": "1"}}}}`, `"A=B"`, `environment variable name "A=B" must not contain '='`},
		{"headers not an object", `{"mcpServers": {"a": {"url": "http://h", "headers": "x"}}}`, `"x"`, `"headers" in server "a" must be an object, not a string`},
		{"header value not a string", `{"mcpServers": {"a": {"url": "http://h", "headers": {"X": true}}}}`, `true`, `"headers.X" in server "a" must be a string, not a boolean`},
		{"header bad name", `{"mcpServers": {"a": {"url": "http://h", "headers": {"X Y": "1"}}}}`, `"X Y"`, `"X Y" is not a valid HTTP header name`},
		{"header with newline", `{"mcpServers": {"a": {"url": "http://h", "headers": {"X": "a\r\nB: c"}}}}`, `"a\r`, `header "X" must not contain a line break`},
		{"bad variable reference", `{"mcpServers": {"a": {"command": "x", "args": ["${1X}"]}}}`, `"${1X}"`, `invalid variable reference at byte 0: a name is a letter`},
		{"nul in command", `{"mcpServers": {"a": {"command": "x\u0000"}}}`, `"x\u`, `contains a NUL character`},
		{"negative idle", `{"idleTimeoutMs": -1, "mcpServers": {}}`, `-1`, `"idleTimeoutMs" must not be negative (0 means never reclaim)`},
		{"negative ready", `{"readyTimeoutMs": -5, "mcpServers": {}}`, `-5`, `"readyTimeoutMs" must not be negative (0 means do not wait)`},
		{"fractional timeout", `{"idleTimeoutMs": 1.5, "mcpServers": {}}`, `1.5`, `"idleTimeoutMs" must be a whole number of milliseconds, not 1.5`},
		{"timeout as string", `{"readyTimeoutMs": "5000", "mcpServers": {}}`, `"5000"`, `"readyTimeoutMs" must be a number, not a string`},
		{"huge timeout", `{"idleTimeoutMs": 1e300, "mcpServers": {}}`, `1e300`, `the largest accepted is 2147483647`},
		{"unknown server key", "{\"mcpServers\": {\"github\": {\n  \"comand\": \"npx\"}}}", `"comand"`, `unknown key "comand" in server "github"; did you mean "command"?`},
		{"unknown key far from all", `{"mcpServers": {"a": {"command": "x", "zzzzzzzz": 1}}}`, `"zzzzzzzz"`, `unknown key "zzzzzzzz" in server "a"; known keys are "type"`},
		{"tools not an object", `{"mcpServers": {"a": {"command": "x", "tools": []}}}`, `[]}`, `"tools" in server "a" must be an object`},
		{"tools unknown key", `{"mcpServers": {"a": {"command": "x", "tools": {"alow": []}}}}`, `"alow"`, `unknown key "alow" in "tools" in server "a"; did you mean "allow"?`},
		{"tools empty pattern", `{"mcpServers": {"a": {"command": "x", "tools": {"deny": [""]}}}}`, `""]`, `is empty`},
		{"disabled not a bool", `{"mcpServers": {"a": {"command": "x", "disabled": "yes"}}}`, `"yes"`, `"disabled" in server "a" must be a boolean, not a string`},
		{"too deep", nested, `$COL:65`, `nesting is deeper than 64 levels`},
		{"raw control character", "{\"mcpServers\": {\"a\": {\"command\": \"x\ty\"}}}", "\t", `control character 0x09 inside a string`},
		{"invalid escape", `{"mcpServers": {"a": {"command": "x\qy"}}}`, `\q`, `invalid escape \q`},
		{"invalid utf8", "{\"mcpServers\": {\"a\": {\"command\": \"x\xffy\"}}}", "\xff", `invalid UTF-8 byte 0xff`},
		{"leading zero", `{"idleTimeoutMs": 0100, "mcpServers": {}}`, `0100`, `leading zero`},
		{"unterminated string", `{"mcpServers": {"a`, `$END`, `end of file inside a string`},
		{"missing colon", `{"mcpServers" {}}`, `{}}`, `after key "mcpServers"; expected ':'`},
		{"too many args", `{"mcpServers": {"a": {"command": "x", "args": [` + strings.TrimSuffix(strings.Repeat(`"a",`, 257), ",") + `]}}}`, `["a"`, `has 257 entries; the limit is 256`},
		{"arg too long", `{"mcpServers": {"a": {"command": "x", "args": ["` + strings.Repeat("a", 4097) + `"]}}}`, `"aaaa`, `is 4097 bytes long; the limit is 4096`},
		{"file too large", `{"mcpServers": {}}` + strings.Repeat(" ", MaxFileSize), `$START`, `the limit is 1048576 (1 MiB)`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			spec, err := Parse(file, []byte(tc.src))
			if spec != nil {
				t.Fatalf("a failed parse must return no spec, got %+v", spec)
			}
			line, col := position(t, tc.src, tc.at)
			assertError(t, err, line, col, tc.want)
		})
	}
}

// Names close to the rule on '_' that are fine: a single '_' inside, '-' anywhere.
func TestParseServerNamesAccepted(t *testing.T) {
	for _, name := range []string{"a_b", "a_b_c", "a-", "-a", "a-_-b", "a--b", "A1_z", strings.Repeat("a", 64)} {
		spec, err := Parse(file, []byte(`{"mcpServers": {"`+name+`": {"command": "x"}}}`))
		if err != nil {
			t.Errorf("%q refused: %v", name, err)
			continue
		}
		if got := spec.Servers[0].Name; got != name {
			t.Errorf("%q read as %q", name, got)
		}
	}
}

func TestParseReportsEveryProblem(t *testing.T) {
	src := "{\"mcpServers\": {\n" +
		"  \"a\": {\"comand\": \"x\"},\n" +
		"  \"b\": {\"url\": \"ftp://h\"},\n" +
		"  \"c\": {\"command\": \"ok\"}\n}}"
	_, err := Parse(file, []byte(src))
	var list ErrorList
	if !errors.As(err, &list) {
		t.Fatalf("want an ErrorList, got %T %v", err, err)
	}
	if len(list) != 3 {
		t.Fatalf("want 3 errors (unknown key, neither, bad url), got %d:\n%v", len(list), err)
	}
	for i := 1; i < len(list); i++ {
		if list[i].Line < list[i-1].Line {
			t.Fatalf("errors are not in file order:\n%v", err)
		}
	}
}

// position finds where an expected error points: the first occurrence of needle in src,
// "$LAST:x" for the last occurrence of x, "$START", "$END", or "$COL:n" on line 1.
func position(t *testing.T, src, needle string) (line, col int) {
	t.Helper()
	off := 0
	switch {
	case needle == "$START":
	case needle == "$END":
		off = len(src)
	case strings.HasPrefix(needle, "$COL:"):
		n, err := strconv.Atoi(strings.TrimPrefix(needle, "$COL:"))
		if err != nil {
			t.Fatal(err)
		}
		return 1, n
	case strings.HasPrefix(needle, "$LAST:"):
		off = strings.LastIndex(src, strings.TrimPrefix(needle, "$LAST:"))
	default:
		off = strings.Index(src, needle)
	}
	if off < 0 {
		t.Fatalf("needle %q is not in the source", needle)
	}
	line, col = 1, 1
	for _, c := range src[:off] {
		if c == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return line, col
}

func assertError(t *testing.T, err error, line, col int, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("want an error containing %q, got none", want)
	}
	var list ErrorList
	if !errors.As(err, &list) || len(list) == 0 {
		t.Fatalf("want an ErrorList, got %T: %v", err, err)
	}
	for _, e := range list {
		if e.File == file && e.Line == line && e.Column == col && strings.Contains(e.Msg, want) &&
			strings.HasPrefix(e.Error(), fmt.Sprintf("%s:%d:%d: ", file, line, col)) {
			return
		}
	}
	t.Fatalf("want %s:%d:%d: ...%s...\ngot  %v", file, line, col, want, err)
}

// FuzzParse checks that no input panics, that every accepted file is valid JSON, and that an
// accepted spec satisfies the rules admission would enforce.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		``, `{}`, `{"mcpServers": {}}`, "\uFEFF{\"mcpServers\":{}}",
		`{"mcpServers": {"a": {"command": "npx", "args": ["-y", "${X:-1}"], "env": {"K": "v"}}}}`,
		`{"mcpServers": {"b": {"type": "sse", "url": "https://h/${P}", "headers": {"A": "b"}}}, "idleTimeoutMs": 0}`,
		`{"mcpServers": {"a": {"command": "x", "tools": {"allow": ["a*"]}, "disabled": true}}, "readyTimeoutMs": 1e3}`,
		`{"mcpServers": {"a": {"url": "https://h", "headersHelper": "h", "oauth": {"clientId": "c", "callbackPort": 1, "scopes": "a b"}, "timeout": 5, "alwaysLoad": true}}}`,
		`{"mcpServers": {"a": {"command": "x", "sandboxEnabled": true, "sandbox": {"filesystem": {"allowWrite": ["/t"]}}, "dev": {}, "request_timeout_ms": 9}}}`,
		`{"mcpServers": {"a": {"command": "x", "share": "session"}, "b": {"url": "https://h", "share": "principal"}}}`,
		`{"mcpServers": {"a": {"command": "x"}, "a": {}}}`, `[[[[[[]]]]]]`, `"\ud800\udc00"`, `{"a":1}x`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		spec, err := Parse(file, data)
		if err != nil {
			if spec != nil {
				t.Fatal("error with a partial spec")
			}
			var list ErrorList
			if !errors.As(err, &list) || len(list) == 0 || list[0].Line < 1 || list[0].Column < 1 {
				t.Fatalf("error without a position: %v", err)
			}
			return
		}
		if !json.Valid([]byte(strings.TrimPrefix(string(data), "\uFEFF"))) {
			t.Fatalf("accepted input that is not JSON: %q", data)
		}
		for i, s := range spec.Servers {
			if !serverNameRE.MatchString(s.Name) || strings.Contains(s.Name, "__") || strings.HasPrefix(s.Name, "_") ||
				strings.HasSuffix(s.Name, "_") || (s.Stdio == nil) == (s.HTTP == nil) ||
				(s.Share != "" && !slices.Contains(shares, string(s.Share))) {
				t.Fatalf("accepted an invalid server %+v", s)
			}
			if i > 0 && spec.Servers[i-1].Name >= s.Name {
				t.Fatal("servers are not sorted and unique")
			}
		}
		again, _ := Parse(file, data)
		if d := cmp.Diff(spec, again); d != "" {
			t.Fatalf("parsing twice differs:\n%s", d)
		}
	})
}

// A value that is refused is named by its key and its line and column, never quoted: the
// message becomes the mirror's condition and event, and a value can be a secret written
// literally.
func TestParseErrorsQuoteNoValues(t *testing.T) {
	const secret = "s3cretXYZ"
	for name, src := range map[string]string{
		"url scheme":             `{"mcpServers": {"a": {"url": "ftp://user:s3cretXYZ@h/x"}}}`,
		"url without scheme":     `{"mcpServers": {"a": {"url": "s3cretXYZ/mcp"}}}`,
		"url port":               `{"mcpServers": {"a": {"url": "http://h:s3cretXYZ/mcp"}}}`,
		"url host":               `{"mcpServers": {"a": {"url": "http://s3cretXYZ h/mcp"}}}`,
		"url escape":             `{"mcpServers": {"a": {"url": "http://h/%s3cretXYZ"}}}`,
		"url control character":  `{"mcpServers": {"a": {"url": "http://h/s3cretXYZ\u0001"}}}`,
		"unterminated reference": `{"mcpServers": {"a": {"command": "x", "args": ["--token=${TOKEN s3cretXYZ"]}}}`,
		"invalid reference":      `{"mcpServers": {"a": {"command": "x", "env": {"T": "${s3cretXYZ-1}"}}}}`,
		"reference in a header":  `{"mcpServers": {"a": {"url": "http://h/mcp", "headers": {"Authorization": "Bearer ${s3cretXYZ"}}}}`,
		"reference in a url":     `{"mcpServers": {"a": {"url": "http://h/mcp?k=${s3cretXYZ"}}}`,
		"bad escape":             `{"mcpServers": {"a": {"command": "x", "args": ["\us3cr"]}}}`,
	} {
		_, err := Parse(DefaultPath, []byte(src))
		if err == nil {
			t.Errorf("%s: parsed", name)
			continue
		}
		if msg := err.Error(); strings.Contains(msg, secret) || strings.Contains(msg, "s3cr") || !strings.Contains(msg, DefaultPath+":1:") {
			t.Errorf("%s: %q quotes the value, or names no line", name, msg)
		}
	}
}

// What a spec carries and the controller does not act on yet is named per server and key, and
// so is a server opted out of the sandbox.
func TestUnacted(t *testing.T) {
	spec, err := Parse(file, []byte(`{"mcpServers": {
  "plain": {"url": "https://h/mcp", "alwaysLoad": true, "timeout": 1000},
  "api": {"url": "https://h/mcp", "headersHelper": "h", "oauth": {}},
  "box": {"command": "x", "sandbox": {"filesystem": {"denyRead": ["~/.ssh"]}}},
  "net": {"command": "x", "sandbox": {"network": {"allowedDomains": ["registry.npmjs.org"]}}},
  "open": {"command": "x", "sandbox": false}
}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`server "open": "sandbox": false runs it outside the controller's sandbox, where it may read what the other servers' user can`,
	}
	if d := cmp.Diff(want, Unacted(spec)); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
}
