package policy

import (
	"strings"
	"testing"
)

// '*' matches any run of characters and '?' any one; nothing else is special.
func TestGlob(t *testing.T) {
	cases := []struct {
		pattern, name string
		want          bool
	}{
		{"*", "anything", true}, {"search_*", "search_issues", true}, {"search_*", "get_issue", false},
		{"*delete*", "bulk_delete_all", true}, {"get_?", "get_a", true}, {"get_?", "get_ab", false},
		{"a*b*c", "axxbyyc", true}, {"a*b*c", "axxbyy", false}, {"[x]", "[x]", true}, {"", "", true}, {"", "a", false},
	}
	for _, c := range cases {
		if got := Glob(c.pattern, c.name); got != c.want {
			t.Errorf("Glob(%q, %q) = %v", c.pattern, c.name, got)
		}
	}
}

// The allowlist checks the command as it will run: a clean path, '*' within one segment.
func TestCommandAllowed(t *testing.T) {
	patterns := []string{"/opt/mcp/*", "npx", "/usr/bin/node"}
	for command, want := range map[string]bool{
		"/opt/mcp/server": true, "npx": true, "/usr/bin/node": true,
		"/opt/mcp/../../bin/sh": false, "/opt/mcp/sub/server": false, "/opt/mcp//server": false,
		"/opt/mcp/./server": false, "/bin/sh": false, "": false, "npx2": false,
	} {
		if got := CommandAllowed(patterns, command); got != want {
			t.Errorf("CommandAllowed(%q) = %v, want %v", command, got, want)
		}
	}
}

// With an allowlist, a variable that runs or fetches code the allowlist never saw is refused,
// saying why; names compare without case (npm reads npm_config_* in either); a server's own
// settings and credentials pass.
func TestRefusedVariable(t *testing.T) {
	cases := []struct {
		name string
		why  string // a part of the reason; "" for a name that passes
	}{
		{"LD_PRELOAD", "load code"}, {"DYLD_INSERT_LIBRARIES", "load code"}, {"NODE_OPTIONS", "load code"},
		{"PYTHONPATH", "load code"}, {"BASH_ENV", "load code"}, {"ENV", "load code"}, {"PROMPT_COMMAND", "load code"},
		{"BASH_FUNC_node%%", "load code"}, {"SHELLOPTS", "load code"}, {"PS4", "load code"}, {"OPENSSL_CONF", "load code"},
		{"PATH", "program that runs"}, {"path", "program that runs"}, {"SHELL", "program that runs"},
		{"VIRTUAL_ENV", "program that runs"}, {"GOTOOLCHAIN", "program that runs"}, {"RUSTC_WRAPPER", "program that runs"},
		{"GIT_SSH_COMMAND", "git runs"}, {"GIT_CONFIG_COUNT", "git runs"}, {"GIT_CONFIG_KEY_0", "git runs"},
		{"GIT_ASKPASS", "git runs"}, {"git_exec_path", "git runs"},
		{"npm_config_registry", "another index"}, {"NPM_CONFIG_REGISTRY", "another index"},
		{"Npm_Config_Script_Shell", "another index"}, {"npm_config_userconfig", "another index"},
		{"PIP_INDEX_URL", "another index"}, {"PIP_EXTRA_INDEX_URL", "another index"}, {"PIP_CONFIG_FILE", "another index"},
		{"UV_INDEX_URL", "another index"}, {"UV_EXTRA_INDEX_URL", "another index"}, {"UV_DEFAULT_INDEX", "another index"},
		{"YARN_NPM_REGISTRY_SERVER", "another index"}, {"GOPROXY", "another index"}, {"GOFLAGS", "another index"},
		{"CARGO_HOME", "another index"}, {"COREPACK_NPM_REGISTRY", "another index"},
		{"NODE_EXTRA_CA_CERTS", "certificates"}, {"NODE_TLS_REJECT_UNAUTHORIZED", "certificates"},
		{"SSL_CERT_FILE", "certificates"}, {"REQUESTS_CA_BUNDLE", "certificates"},
		{"HOME", "HOME"}, {"XDG_CONFIG_HOME", "HOME"}, {"XDG_CACHE_HOME", "HOME"},
		{"API_TOKEN", ""}, {"GITHUB_TOKEN", ""}, {"DATABASE_URL", ""}, {"LANG", ""}, {"TMPDIR", ""},
		{"NPM_TOKEN", ""}, {"HTTPS_PROXY", ""}, {"PIPELINE", ""}, {"UVICORN_PORT", ""}, {"GITHUB_HOST", ""},
		{"ENVIRONMENT", ""}, {"CCACHE", ""}, {"PATHS", ""}, {"MY_PATH", ""},
	}
	for _, c := range cases {
		got := RefusedVariable(c.name)
		if (got == "") != (c.why == "") || !strings.Contains(got, c.why) {
			t.Errorf("RefusedVariable(%q) = %q, want a reason with %q", c.name, got, c.why)
		}
	}
}
