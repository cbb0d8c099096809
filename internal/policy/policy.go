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

// LoaderVariable reports environment variables that make a runtime load code of their
// choosing (a library, a module, a startup script): with an allowlist they would run what the
// allowlist never checked.
func LoaderVariable(name string) bool {
	switch name {
	case "NODE_OPTIONS", "NODE_PATH", "PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME", "PERL5OPT", "PERL5LIB",
		"RUBYOPT", "RUBYLIB", "BASH_ENV", "ENV", "JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS":
		return true
	}
	return strings.HasPrefix(name, "LD_") || strings.HasPrefix(name, "DYLD_")
}

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
