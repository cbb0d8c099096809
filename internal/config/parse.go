// Package config reads a project's .dsh/mcp.json (the shape of Claude Code's .mcp.json) into a
// ProjectMCP spec.
//
// The reader is strict because the file is the single source of truth for every agent session
// on the project: a typo must be reported where it is, with the nearest known key, and must
// never turn into a partial spec. Parse either returns a complete spec or an error; callers keep
// the last good spec running when it fails.
package config

import (
	"fmt"
	"math/big"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/toolname"
)

// MaxFileSize is the largest config file read. A real one is a few kilobytes.
const MaxFileSize = 1 << 20

// MaxTimeoutMs is the largest idleTimeoutMs or readyTimeoutMs accepted: 2^31-1 ms (24.8 days),
// the largest delay Node.js timers honour, so a value means the same here as in a Node host.
const MaxTimeoutMs = 1<<31 - 1

// DefaultPath is where a project keeps its config, relative to the project directory.
const DefaultPath = ".dsh/mcp.json"

// Error is one problem in a config file, at a line and column.
type Error struct {
	File   string
	Line   int
	Column int
	Msg    string
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Column, e.Msg)
}

// ErrorList is every problem found in a config file, in file order. Parse returns one whenever
// it fails; a syntax error ends reading, so it is then the only entry.
type ErrorList []*Error

func (l ErrorList) Error() string {
	msgs := make([]string, len(l))
	for i, e := range l {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "\n")
}

var (
	serverNameRE = regexp.MustCompile(v1alpha1.ServerNamePattern)
	// headerNameRE is an HTTP field name (RFC 9110 token).
	headerNameRE = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
)

// Known keys, for unknown-key errors and suggestions.
var (
	topKeys    = []string{"$schema", "mcpServers", "idleTimeoutMs", "readyTimeoutMs"}
	serverKeys = []string{
		"type", "command", "args", "env", "cwd", "url", "headers", "disabled", "tools",
		// the keys of Claude Code's and VS Code's entries (clientkeys.go)
		"timeout", "request_timeout_ms", "alwaysLoad", "headersHelper", "oauth",
		"sandboxEnabled", "sandbox", "dev", "envFile",
		// what clients are told of the server's tools (toolhints.go)
		"toolHints",
		// whose sessions share a connection (share.go)
		"share",
	}
	toolsKeys = []string{"allow", "deny"}
	types     = []string{"stdio", "http", "sse"}
	// misplaced lists, per server type, the keys that belong to the other type.
	misplaced = map[string][]string{
		"stdio": {"headers", "headersHelper", "oauth"},
		"http":  {"args", "env", "cwd", "sandboxEnabled", "sandbox"},
		"sse":   {"args", "env", "cwd", "sandboxEnabled", "sandbox"},
	}
)

// Parse reads a config file's bytes into a spec. file names the file in error messages.
// Servers come out sorted by name, env and headers sorted by name, so equal files give equal
// specs. ${VAR} references are checked for syntax and kept verbatim.
func Parse(file string, data []byte) (*v1alpha1.ProjectMCPSpec, error) {
	p := &parser{file: file}
	if len(data) > MaxFileSize {
		p.errorf(pos{1, 1}, "the file is %d bytes; the limit is %d (1 MiB)", len(data), MaxFileSize)
		return nil, p.errs
	}
	root, serr := parseJSON(data)
	if serr != nil {
		p.errorf(serr.at, "%s", serr.msg)
		return nil, p.errs
	}
	spec := p.top(root)
	if len(p.errs) > 0 {
		sort.SliceStable(p.errs, func(i, j int) bool {
			a, b := p.errs[i], p.errs[j]
			return a.Line < b.Line || (a.Line == b.Line && a.Column < b.Column)
		})
		return nil, p.errs
	}
	return spec, nil
}

type parser struct {
	file string
	errs ErrorList
}

func (p *parser) errorf(at pos, format string, args ...any) {
	p.errs = append(p.errs, &Error{File: p.file, Line: at.line, Column: at.col, Msg: fmt.Sprintf(format, args...)})
}

// unknownKey reports a key outside known, suggesting the nearest known key when one is close.
func (p *parser) unknownKey(m member, where string, known []string) {
	msg := fmt.Sprintf("unknown key %q%s", m.key, where)
	if s := nearest(m.key, known); s != "" {
		msg += fmt.Sprintf("; did you mean %q?", s)
	} else {
		msg += fmt.Sprintf("; known keys are %s", quoteList(known))
	}
	p.errorf(m.keyAt, "%s", msg)
}

func (p *parser) top(root *node) *v1alpha1.ProjectMCPSpec {
	if root.kind != kindObject {
		p.errorf(root.at, "the file must hold a JSON object with \"mcpServers\", not %s", root.kind)
		return nil
	}
	spec := &v1alpha1.ProjectMCPSpec{}
	var servers *node
	for _, m := range root.members {
		switch m.key {
		case "$schema":
			p.expectKind(m.value, kindString, `"$schema"`)
		case "mcpServers":
			servers = m.value
		case "idleTimeoutMs":
			spec.IdleTimeout = p.millis(m.value, m.key, "never reclaim")
		case "readyTimeoutMs":
			spec.ReadyTimeout = p.millis(m.value, m.key, "do not wait")
		default:
			p.unknownKey(m, " at the top level", topKeys)
		}
	}
	switch {
	case servers == nil:
		p.errorf(root.at, "missing \"mcpServers\": the file must hold {\"mcpServers\": {...}}")
	case servers.kind != kindObject:
		p.errorf(servers.at, "\"mcpServers\" must be an object mapping server names to servers, not %s", servers.kind)
	default:
		if len(servers.members) > v1alpha1.MaxServers {
			p.errorf(servers.at, "\"mcpServers\" lists %d servers; the limit is %d", len(servers.members), v1alpha1.MaxServers)
		}
		for _, m := range servers.members {
			if s, ok := p.server(m); ok {
				spec.Servers = append(spec.Servers, s)
			}
		}
		sort.Slice(spec.Servers, func(i, j int) bool { return spec.Servers[i].Name < spec.Servers[j].Name })
	}
	return spec
}

// millis reads a non-negative whole number of milliseconds.
// zero says what 0 means, for the error message.
func (p *parser) millis(n *node, key, zero string) *metav1.Duration {
	if !p.expectKind(n, kindNumber, fmt.Sprintf("%q", key)) {
		return nil
	}
	v, ok := new(big.Rat).SetString(n.str)
	switch {
	case !ok || !v.IsInt():
		p.errorf(n.at, "%q must be a whole number of milliseconds, not %s", key, n.str)
	case v.Sign() < 0:
		p.errorf(n.at, "%q must not be negative (0 means %s)", key, zero)
	case v.Cmp(new(big.Rat).SetInt64(MaxTimeoutMs)) > 0:
		p.errorf(n.at, "%q is %s; the largest accepted is %d", key, n.str, MaxTimeoutMs)
	default:
		return &metav1.Duration{Duration: time.Duration(v.Num().Int64()) * time.Millisecond}
	}
	return nil
}

// expectKind reports n when it is not of kind k; what names the value in the message.
func (p *parser) expectKind(n *node, k kind, what string) bool {
	if n.kind != k {
		p.errorf(n.at, "%s must be %s, not %s", what, k, n.kind)
		return false
	}
	return true
}

// server reads one mcpServers entry. ok is false when the entry had errors.
func (p *parser) server(m member) (v1alpha1.MCPServer, bool) {
	before := len(p.errs)
	name := m.key
	in := fmt.Sprintf(" in server %q", name)
	s := v1alpha1.MCPServer{Name: name}
	p.serverName(m)
	if m.value.kind != kindObject {
		p.errorf(m.value.at, "server %q must be an object with \"command\" or \"url\", not %s", name, m.value.kind)
		return s, false
	}
	fields := map[string]member{}
	for _, f := range m.value.members {
		if !slices.Contains(serverKeys, f.key) {
			p.unknownKey(f, in, serverKeys)
			continue
		}
		fields[f.key] = f
	}
	kind := p.serverType(name, m.value, fields)
	for _, key := range misplaced[kind] {
		if f, ok := fields[key]; ok {
			p.errorf(f.keyAt, "%q does not apply to server %q, whose type is %q", key, name, kind)
		}
	}
	switch kind {
	case "stdio":
		s.Stdio = &v1alpha1.StdioServer{
			Command:    p.command(name, fields["command"]),
			Args:       p.stringList(fields["args"], in, v1alpha1.MaxArgs, false),
			Env:        p.stringMap(fields["env"], in, p.envName),
			WorkingDir: p.plainString(fields["cwd"], in),
		}
	case "http", "sse":
		s.HTTP = &v1alpha1.HTTPServer{
			URL:       p.url(name, fields["url"]),
			Transport: v1alpha1.TransportStreamableHTTP,
			Headers:   p.stringMap(fields["headers"], in, p.headerName),
		}
		if kind == "sse" {
			s.HTTP.Transport = v1alpha1.TransportSSE
		}
	}
	if f, ok := fields["disabled"]; ok && p.expectKind(f.value, kindBool, fmt.Sprintf("%q%s", "disabled", in)) {
		s.Disabled = f.value.boolean
	}
	if f, ok := fields["tools"]; ok {
		s.Tools = p.toolFilter(f.value, in)
	}
	p.clientKeys(&s, fields, in)
	if f, ok := fields["toolHints"]; ok {
		s.ToolHints = p.toolHints(f, in)
	}
	if f, ok := fields["share"]; ok {
		s.Share = p.share(f, name)
	}
	return s, len(p.errs) == before
}

func (p *parser) serverName(m member) {
	switch name := m.key; {
	case name == "":
		p.errorf(m.keyAt, "a server name is empty; names are 1 to %d characters of A-Z a-z 0-9 _ -", v1alpha1.MaxServerNameLength)
	case len(name) > v1alpha1.MaxServerNameLength:
		p.errorf(m.keyAt, "server name %q is %d characters; the limit is %d", shorten(name), len(name), v1alpha1.MaxServerNameLength)
	case !serverNameRE.MatchString(name):
		bad := strings.IndexFunc(name, func(c rune) bool {
			return !(c == '_' || c == '-' || (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'))
		})
		c, _ := utf8.DecodeRuneInString(name[bad:])
		p.errorf(m.keyAt, "server name %q contains %q; names use only A-Z a-z 0-9 _ - (they prefix tool names)", name, c)
	case strings.Contains(name, toolname.Separator):
		p.errorf(m.keyAt, "server name %q contains %q; %s", name, toolname.Separator, serverNameUnderscores)
	case strings.HasPrefix(name, "_"):
		p.errorf(m.keyAt, "server name %q starts with '_'; %s", name, serverNameUnderscores)
	case strings.HasSuffix(name, "_"):
		p.errorf(m.keyAt, "server name %q ends with '_'; %s", name, serverNameUnderscores)
	}
}

// serverNameUnderscores explains the rule on '_' in server names.
const serverNameUnderscores = `tool names are <server>__<tool>, so a server name may not contain "__" nor start or end with '_'`

// serverType decides whether a server is stdio, http or sse from its "type" and its fields,
// and reports contradictions. It returns "" when no kind can be decided.
func (p *parser) serverType(name string, obj *node, fields map[string]member) string {
	cmd, hasCmd := fields["command"]
	u, hasURL := fields["url"]
	declared := ""
	if t, ok := fields["type"]; ok && p.expectKind(t.value, kindString, fmt.Sprintf("\"type\" in server %q", name)) {
		declared = t.value.str
		if declared == "ws" {
			p.errorf(t.value.at, "server %q has type \"ws\" (WebSocket), which is not an MCP transport of the specification: "+
				"projectmcp reaches servers over stdio, streamable http or sse", name)
			return ""
		}
		if !slices.Contains(types, declared) {
			msg := fmt.Sprintf("unknown type %q in server %q; the types are %s", declared, name, quoteList(types))
			if s := nearest(declared, types); s != "" {
				msg = fmt.Sprintf("unknown type %q in server %q; did you mean %q? (the types are %s)", declared, name, s, quoteList(types))
			}
			p.errorf(t.value.at, "%s", msg)
			return ""
		}
	}
	switch {
	case hasCmd && hasURL:
		p.errorf(u.keyAt, "server %q sets both \"command\" and \"url\"; a server is either a stdio command or a remote url", name)
		return ""
	case !hasCmd && !hasURL:
		p.errorf(obj.at, "server %q has neither \"command\" (a stdio server) nor \"url\" (an http or sse server)", name)
		return ""
	case declared == "stdio" && hasURL:
		p.errorf(u.keyAt, "server %q has type \"stdio\" but sets \"url\"; a stdio server needs \"command\"", name)
		return ""
	case declared != "" && declared != "stdio" && hasCmd:
		p.errorf(cmd.keyAt, "server %q has type %q but sets \"command\"; an http or sse server needs \"url\"", name, declared)
		return ""
	case hasCmd:
		return "stdio"
	case declared == "":
		return "http"
	default:
		return declared
	}
}

func (p *parser) command(server string, f member) string {
	in := fmt.Sprintf(" in server %q", server)
	s := p.plainString(f, in)
	if strings.TrimSpace(s) == "" && f.value != nil && f.value.kind == kindString {
		p.errorf(f.value.at, "\"command\" in server %q is empty", server)
	}
	return s
}

// plainString reads an optional string field: at most MaxArgLength, no NUL, valid references.
func (p *parser) plainString(f member, in string) string {
	if f.value == nil || !p.expectKind(f.value, kindString, fmt.Sprintf("%q%s", f.key, in)) {
		return ""
	}
	p.checkValue(f.value, fmt.Sprintf("%q%s", f.key, in), v1alpha1.MaxArgLength)
	return f.value.str
}

// checkValue checks a string that ends up in a command line, environment or request.
func (p *parser) checkValue(n *node, what string, limit int) {
	switch {
	case len(n.str) > limit:
		p.errorf(n.at, "%s is %d bytes long; the limit is %d", what, len(n.str), limit)
	case strings.ContainsRune(n.str, 0):
		p.errorf(n.at, "%s contains a NUL character", what)
	default:
		if _, err := scanReferences(n.str); err != nil {
			p.errorf(n.at, "%s: %v", what, err)
		}
	}
}

func (p *parser) stringList(f member, in string, limit int, nonEmpty bool) []string {
	if f.value == nil || !p.expectKind(f.value, kindArray, fmt.Sprintf("%q%s", f.key, in)) {
		return nil
	}
	if len(f.value.items) > limit {
		p.errorf(f.value.at, "%q%s has %d entries; the limit is %d", f.key, in, len(f.value.items), limit)
	}
	out := make([]string, 0, len(f.value.items))
	for i, item := range f.value.items {
		what := fmt.Sprintf("%q[%d]%s", f.key, i, in)
		if !p.expectKind(item, kindString, what) {
			continue
		}
		if nonEmpty && item.str == "" {
			p.errorf(item.at, "%s is empty", what)
		}
		p.checkValue(item, what, v1alpha1.MaxArgLength)
		out = append(out, item.str)
	}
	return out
}

// stringMap reads an object of string values (env or headers) into a list sorted by name.
func (p *parser) stringMap(f member, in string, checkName func(m member, what string)) []v1alpha1.NameValue {
	if f.value == nil || !p.expectKind(f.value, kindObject, fmt.Sprintf("%q%s", f.key, in)) {
		return nil
	}
	if len(f.value.members) > v1alpha1.MaxEnvVars {
		p.errorf(f.value.at, "%q%s has %d entries; the limit is %d", f.key, in, len(f.value.members), v1alpha1.MaxEnvVars)
	}
	var out []v1alpha1.NameValue
	for _, m := range f.value.members {
		what := fmt.Sprintf("%q%s", f.key+"."+m.key, in)
		checkName(m, what)
		if !p.expectKind(m.value, kindString, what) {
			continue
		}
		p.checkValue(m.value, what, v1alpha1.MaxArgLength)
		out = append(out, v1alpha1.NameValue{Name: m.key, Value: m.value.str})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (p *parser) envName(m member, what string) {
	switch {
	case m.key == "" || len(m.key) > v1alpha1.MaxEnvNameLength:
		p.errorf(m.keyAt, "environment variable names must be 1 to %d characters (%s)", v1alpha1.MaxEnvNameLength, what)
	case strings.ContainsAny(m.key, "=\x00"):
		p.errorf(m.keyAt, "environment variable name %q must not contain '=' or NUL", m.key)
	}
}

func (p *parser) headerName(m member, what string) {
	if len(m.key) > v1alpha1.MaxEnvNameLength || !headerNameRE.MatchString(m.key) {
		p.errorf(m.keyAt, "%q is not a valid HTTP header name (%s)", m.key, what)
	}
	if strings.ContainsAny(m.value.str, "\r\n") {
		p.errorf(m.value.at, "header %q must not contain a line break", m.key)
	}
}

// url checks that a server URL is an absolute http(s) URL. References are replaced by a
// placeholder for the check, so "https://${HOST}/mcp" passes and the real value is checked when
// the controller connects.
func (p *parser) url(server string, f member) string {
	in := fmt.Sprintf(" in server %q", server)
	if !p.expectKind(f.value, kindString, fmt.Sprintf("\"url\"%s", in)) {
		return ""
	}
	raw := f.value.str
	if len(raw) > v1alpha1.MaxURLLength {
		p.errorf(f.value.at, "\"url\"%s is %d bytes long; the limit is %d", in, len(raw), v1alpha1.MaxURLLength)
		return raw
	}
	refs, err := scanReferences(raw)
	if err != nil {
		p.errorf(f.value.at, "\"url\"%s: %v", in, err)
		return raw
	}
	probe := raw
	for i := len(refs) - 1; i >= 0; i-- {
		probe = probe[:refs[i].start] + "x" + probe[refs[i].end:]
	}
	u, err := url.Parse(probe)
	switch {
	case err != nil:
		p.errorf(f.value.at, "\"url\"%s is not a valid URL: %s", in, urlProblem(err))
	case u.Scheme != "http" && u.Scheme != "https":
		p.errorf(f.value.at, "\"url\"%s must start with http:// or https://", in)
	case u.Host == "":
		p.errorf(f.value.at, "\"url\"%s has no host", in)
	}
	return raw
}

// urlProblem is what is wrong with a URL, without the parts of it net/url quotes (a port, a
// character, an escape): a URL can hold a credential, and the message reaches status and
// events, so it names the problem and the file's line and column point at the value.
func urlProblem(err error) string {
	if ue, ok := err.(*url.Error); ok { //nolint:errorlint // only the *url.Error url.Parse returns is unwrapped; a wrapping error keeps its words
		err = ue.Err
	}
	return quoted.ReplaceAllString(err.Error(), "")
}

// quoted matches a quoted fragment in an error message, with the space before it.
var quoted = regexp.MustCompile(` ?"(?:[^"\\]|\\.)*"`)

func (p *parser) toolFilter(n *node, in string) *v1alpha1.ToolFilter {
	if !p.expectKind(n, kindObject, fmt.Sprintf("\"tools\"%s", in)) {
		return nil
	}
	tf := &v1alpha1.ToolFilter{}
	for _, m := range n.members {
		switch m.key {
		case "allow":
			tf.Allow = p.patterns(m, in)
		case "deny":
			tf.Deny = p.patterns(m, in)
		default:
			p.unknownKey(m, " in \"tools\""+in, toolsKeys)
		}
	}
	return tf
}

func (p *parser) patterns(m member, in string) []string {
	list := p.stringList(m, " in \"tools\""+in, v1alpha1.MaxToolPatterns, true)
	for i, s := range list {
		if len(s) > v1alpha1.MaxToolPatternLength {
			p.errorf(m.value.items[i].at, "pattern %q is longer than %d characters", shorten(s), v1alpha1.MaxToolPatternLength)
		}
	}
	return list
}

// nearest returns the known word closest to s by edit distance, or "" when none is close
// enough to be a likely typo.
func nearest(s string, known []string) string {
	best, bestDist := "", -1
	for _, k := range known {
		d := editDistance(strings.ToLower(s), strings.ToLower(k))
		if bestDist < 0 || d < bestDist {
			best, bestDist = k, d
		}
	}
	if bestDist < 0 || bestDist > max(2, len(best)/3) {
		return ""
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, by bytes.
func editDistance(a, b string) int {
	if len(a) > 256 || len(b) > 256 {
		return max(len(a), len(b)) // too long to be a typo; keep the cost bounded
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func quoteList(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = fmt.Sprintf("%q", w)
	}
	return strings.Join(q, ", ")
}
