package controllers

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
)

// An annotation's entries are spelled as destinations are: origins with their port, command
// lines with one space between words; what is not an origin is named, not guessed at.
func TestParseDestinations(t *testing.T) {
	for _, tc := range []struct {
		annotation string
		named      []string
		unusable   []string
	}{
		{"", nil, nil},
		{" , \n,", nil, nil},
		{"https://api.notion.com", []string{"https://api.notion.com:443"}, nil},
		{"HTTPS://API.Notion.com/", []string{"https://api.notion.com:443"}, nil},
		{"http://127.0.0.1:8080, https://[::1]", []string{"http://127.0.0.1:8080", "https://[::1]:443"}, nil},
		{"npx  -y\t@modelcontextprotocol/server-postgres@0.6.2\n/usr/bin/server --port 80",
			[]string{"npx -y @modelcontextprotocol/server-postgres@0.6.2", "/usr/bin/server --port 80"}, nil},
		{"https://api.notion.com/v1", nil, []string{`entry "https://api.notion.com/v1" is not an origin (http or https://host[:port], no path)`}},
		{"https://api.notion.com?x=1, https://user@api.notion.com, ftp://files, https://", nil, []string{
			`entry "https://api.notion.com?x=1" is not an origin (http or https://host[:port], no path)`,
			`entry "https://user@api.notion.com" is not an origin (http or https://host[:port], no path)`,
			`entry "ftp://files" is not an origin (http or https://host[:port], no path)`,
			`entry "https://" is not an origin (http or https://host[:port], no path)`,
		}},
	} {
		got := parseDestinations(tc.annotation)
		if named := slices.Sorted(maps.Keys(got.named)); !slices.Equal(named, slices.Sorted(slices.Values(tc.named))) {
			t.Errorf("%q names %q, want %q", tc.annotation, named, tc.named)
		}
		if !slices.Equal(got.unusable, tc.unusable) {
			t.Errorf("%q: unusable %q, want %q", tc.annotation, got.unusable, tc.unusable)
		}
	}
}

// A server's destination as the planner sees it (no values): the origin of its URL, or its
// command line; the same spelling the annotation's entries get.
func TestDestinationOf(t *testing.T) {
	for _, tc := range []struct {
		name    string
		server  v1alpha1.MCPServer
		want    string
		wantErr string
	}{
		{"remote", v1alpha1.MCPServer{HTTP: &v1alpha1.HTTPServer{URL: "https://API.example.com/mcp?k=${KEY}"}}, "https://api.example.com:443", ""},
		{"remote with a default port", v1alpha1.MCPServer{HTTP: &v1alpha1.HTTPServer{URL: "http://${HOST:-127.0.0.1}:${PORT:-8080}/"}}, "http://127.0.0.1:8080", ""},
		{"not a url", v1alpha1.MCPServer{HTTP: &v1alpha1.HTTPServer{URL: "${URL}"}}, "", `url "${URL}" does not expand to an absolute http(s) URL`},
		{"stdio", v1alpha1.MCPServer{Stdio: &v1alpha1.StdioServer{Command: "npx", Args: []string{"-y", "pkg@${V:-1.2}"}}}, "npx -y pkg@1.2", ""},
		{"stdio with an empty argument", v1alpha1.MCPServer{Stdio: &v1alpha1.StdioServer{Command: "server", Args: []string{"${NOTHING}"}}}, "",
			"args[0] is empty or holds a space or a comma"},
		{"stdio with a space", v1alpha1.MCPServer{Stdio: &v1alpha1.StdioServer{Command: "sh", Args: []string{"-c", "exec server"}}}, "",
			"args[1] is empty or holds a space or a comma"},
		{"stdio with another space", v1alpha1.MCPServer{Stdio: &v1alpha1.StdioServer{Command: "server", Args: []string{"a\u00a0b"}}}, "",
			"args[0] is empty or holds a space or a comma"},
		{"a command that reads as an origin", v1alpha1.MCPServer{Stdio: &v1alpha1.StdioServer{Command: "https://x:443"}}, "",
			`command holds "://", as an origin does, so the command line cannot be named in the annotation mcp.dsh.dev/allowed-destinations`},
		{"an argument with a scheme", v1alpha1.MCPServer{Stdio: &v1alpha1.StdioServer{Command: "server", Args: []string{"--url=https://x"}}},
			"server --url=https://x", ""},
		{"a malformed reference", v1alpha1.MCPServer{Stdio: &v1alpha1.StdioServer{Command: "${"}}, "", "unterminated variable reference"},
		{"neither", v1alpha1.MCPServer{}, "", "server has neither stdio nor http"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := destinationOf(tc.server, withoutValues)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("destination %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// consentOf: the project first, then the destination; both must be named.
func TestConsentOf(t *testing.T) {
	both := map[string]string{v1alpha1.AnnotationAllowedProjects: "web", v1alpha1.AnnotationAllowedDestinations: "https://x, server --port 80"}
	for _, tc := range []struct {
		annotations map[string]string
		destination string
		want        secretConsent
	}{
		{both, "https://x:443", consentGranted},
		{both, "server --port 80", consentGranted},
		{both, "https://y:443", consentElsewhere},
		{both, "", consentElsewhere},
		{map[string]string{v1alpha1.AnnotationAllowedProjects: "*"}, "https://x:443", consentElsewhere},
		{map[string]string{v1alpha1.AnnotationAllowedDestinations: "https://x"}, "https://x:443", consentRefused},
		{map[string]string{v1alpha1.AnnotationAllowedProjects: "api", v1alpha1.AnnotationAllowedDestinations: "https://x"}, "https://x:443", consentRefused},
	} {
		if got := consentOf(tc.annotations, "web", tc.destination); got != tc.want {
			t.Errorf("consentOf(%v, web, %q) = %q, want %q", tc.annotations, tc.destination, got, tc.want)
		}
	}
}
