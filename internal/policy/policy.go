// Package policy is the controller's security policy toward the MCP servers it runs and
// reaches, as the controller's flags set it: which stdio commands may start (--allow-command),
// what a stdio server process gets from the controller (its environment, its HOME, the user it
// runs as and the capabilities that takes: Isolation), and where a remote server may be
// reached (--allow-url, --deny-url: Egress, checked against the URL, against every address
// dialed after DNS, and against every request's origin).
//
// It is apart from the connections that apply it (internal/conn) because it is the security
// boundary (docs/security.md): what it allows and refuses is decided here alone, from the
// flags, and read and tested here alone, whatever a connection's transport or lifecycle does.
package policy

import (
	"path"
	"slices"
	"strings"
)

// CommandAllowed reports whether a stdio command, as it will run, matches an --allow-command
// pattern. A path must be clean (no "..", "." or doubled slashes: /opt/mcp/../../bin/sh is
// refused whatever the patterns say), and '*' and '?' match within one path segment, so
// /opt/mcp/* allows /opt/mcp/server but not /opt/mcp/sub/server.
func CommandAllowed(patterns []string, command string) bool {
	if command == "" || (strings.Contains(command, "/") && path.Clean(command) != command) {
		return false
	}
	segments := strings.Split(command, "/")
	return slices.ContainsFunc(patterns, func(pattern string) bool {
		parts := strings.Split(pattern, "/")
		if len(parts) != len(segments) {
			return false
		}
		for i := range parts {
			if !Glob(parts[i], segments[i]) {
				return false
			}
		}
		return true
	})
}

// RefusedVariable says why an environment variable of a stdio server's env is refused when an
// allowlist applies, or "" when it is not. The allowlist checks the executable; these names
// would have it, or a program it starts, run or fetch code the allowlist never saw: a runtime
// loading another library, module or startup script, another program found in its place, a
// package manager reading another index or configuration, git running a command of the
// variable's, trust in another certificate authority (a fetch served by another host), or
// configuration and caches read from elsewhere than the server's own HOME. Names compare
// without case: npm reads npm_config_* and NPM_CONFIG_* alike, and no legitimate server needs
// a lower-case twin of one of these.
func RefusedVariable(name string) string {
	upper := strings.ToUpper(name)
	for _, r := range refusals {
		if slices.Contains(r.names, upper) || slices.ContainsFunc(r.prefixes, func(p string) bool { return strings.HasPrefix(upper, p) }) {
			return r.why
		}
	}
	return ""
}

// refusal is a family of refused environment variables (RefusedVariable), in upper case, and
// why they are refused.
type refusal struct {
	why      string
	names    []string
	prefixes []string
}

var refusals = []refusal{{
	why: "it makes the server's runtime load code the allowlist did not check",
	names: []string{"NODE_OPTIONS", "NODE_PATH", "PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME", "PYTHONUSERBASE",
		"PYTHONBREAKPOINT", "PERL5OPT", "PERL5LIB", "PERLLIB", "PERL5DB", "RUBYOPT", "RUBYLIB", "GEM_HOME", "GEM_PATH",
		"BUNDLE_GEMFILE", "LUA_PATH", "LUA_CPATH", "LUA_INIT", "CLASSPATH", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS",
		"JDK_JAVA_OPTIONS", "JAVA_OPTS", "MAVEN_OPTS", "GRADLE_OPTS", "BASH_ENV", "ENV", "PROMPT_COMMAND", "PS4",
		"SHELLOPTS", "BASHOPTS", "ZDOTDIR", "GCONV_PATH", "GLIBC_TUNABLES", "OPENSSL_CONF", "OPENSSL_ENGINES",
		"OPENSSL_MODULES"},
	prefixes: []string{"LD_", "DYLD_", "BASH_FUNC_"},
}, {
	why: "it chooses the program that runs in place of the allowlisted command, or of one that command starts",
	names: []string{"PATH", "SHELL", "EDITOR", "VISUAL", "PAGER", "BROWSER", "SSH_ASKPASS", "SUDO_ASKPASS",
		"VIRTUAL_ENV", "CONDA_PREFIX", "JAVA_HOME", "GOROOT", "GOTOOLCHAIN", "RUSTC", "CC", "CXX"},
	prefixes: []string{"RUSTC_"},
}, {
	why:      "git runs the commands and reads the configuration it names (GIT_SSH_COMMAND, GIT_CONFIG_*)",
	prefixes: []string{"GIT_"},
}, {
	why: "it makes a package manager fetch code from another index, or read another configuration or cache",
	names: []string{"GOFLAGS", "GOPROXY", "GONOPROXY", "GOPRIVATE", "GOSUMDB", "GONOSUMDB", "GONOSUMCHECK",
		"GOINSECURE", "GOVCS", "GOENV", "GOPATH", "GOMODCACHE", "DENO_DIR"},
	prefixes: []string{"NPM_CONFIG_", "YARN_", "BUN_", "COREPACK_", "PIP_", "PIPX_", "UV_", "CARGO_", "RUSTUP_"},
}, {
	why: "it changes which certificates are trusted, so that a fetch may be served by another host",
	names: []string{"NODE_EXTRA_CA_CERTS", "NODE_TLS_REJECT_UNAUTHORIZED", "SSL_CERT_FILE", "SSL_CERT_DIR",
		"REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "PYTHONHTTPSVERIFY"},
}, {
	why:      "it moves where programs read their configuration and caches from the server's own HOME to a directory of the spec's",
	names:    []string{"HOME"},
	prefixes: []string{"XDG_"},
}}

// Glob matches name against a pattern where '*' matches any run of characters and '?' any one
// character; nothing else is special, so tool names with brackets or slashes match literally.
func Glob(pattern, name string) bool {
	p, n := []rune(pattern), []rune(name)
	pi, ni, star, mark := 0, 0, -1, 0
	for ni < len(n) {
		switch {
		case pi < len(p) && (p[pi] == '?' || p[pi] == n[ni]):
			pi++
			ni++
		case pi < len(p) && p[pi] == '*':
			star, mark = pi, ni
			pi++
		case star >= 0:
			pi, mark = star+1, mark+1
			ni = mark
		default:
			return false
		}
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}
