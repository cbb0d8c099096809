// Package share decides a server's sharing scope and the key of the connection a session is
// bound to under it. It is pure: the registry keys connections by what it returns, status
// publishes only Label's hash of a key, and the stateful table is the one place the servers
// known to keep state per client are named (docs/sharing.md).
package share

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"path"
	"strings"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
)

// Who is what a session brings to the choice of its connection.
type Who struct {
	Principal string // the authenticated principal (in local mode, the uid)
	Session   string // the session's wire identity
	Root      string // the session's first root, a folder (worktree scope)
}

// Key is the connection key of a session under a scope: empty for project (one connection),
// and otherwise the scope's part of who, prefixed so two scopes' keys never meet. It is held
// in memory only; status and metrics see Label(Key).
func Key(scope v1alpha1.Share, who Who) string {
	switch scope {
	case v1alpha1.SharePrincipal:
		return "principal:" + who.Principal
	case v1alpha1.ShareSession:
		return "session:" + who.Session
	case v1alpha1.ShareWorktree:
		return "worktree:" + who.Root
	default:
		return ""
	}
}

// labelKey is the process's secret for Label: a published label can be compared with another,
// never guessed from a principal's name or a session id.
var labelKey = func() []byte {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return b
}()

// Label is the name a connection key is published under: empty for the project's one
// connection, else 12 hex digits of an HMAC of the key.
func Label(key string) string {
	if key == "" {
		return ""
	}
	m := hmac.New(sha256.New, labelKey)
	m.Write([]byte(key))
	return hex.EncodeToString(m.Sum(nil))[:12]
}

// Effective is the scope a server runs under, and why when it was not written: spec's share
// if set, session for a server the stateful table knows, project otherwise.
func Effective(s v1alpha1.MCPServer) (v1alpha1.Share, string) {
	if s.Share != "" {
		return s.Share, ""
	}
	if name, ok := KnownStateful(s); ok {
		return v1alpha1.ShareSession, name + " keeps state per client"
	}
	return v1alpha1.ShareProject, ""
}

// stateful are the servers known to keep state per client, by the package or program that
// names them in a stdio command line. Each keeps, per process, what one client's session
// builds up; shared, one session's state is another's. why says what that state is, as
// docs/sharing.md's table says it.
var stateful = []struct {
	name  string // as docs and conditions name it
	why   string
	match func(word string) bool
}{
	{"@playwright/mcp", "one browser: its tabs, cookies and storage are every session's",
		pkg("@playwright/mcp")},
	{"serena", "activate_project is global: one session switches another's project",
		program("serena", "serena-mcp-server")},
	{"server-sequential-thinking", "one thought history and one set of branches: sessions' thoughts interleave",
		pkg("@modelcontextprotocol/server-sequential-thinking")},
	{"server-filesystem", "its allowed directories are its client's roots, which one connection cannot hold per session",
		pkg("@modelcontextprotocol/server-filesystem")},
	{"server-puppeteer", "one browser and one page: a session navigates the page another reads",
		pkg("@modelcontextprotocol/server-puppeteer")},
	{"chrome-devtools-mcp", "one Chrome and one selected page for every session",
		pkg("chrome-devtools-mcp")},
	{"@executeautomation/playwright-mcp-server", "one browser and page per process, as @playwright/mcp",
		pkg("@executeautomation/playwright-mcp-server")},
}

// Entry is one server of the stateful table: its name and the state it keeps per client.
type Entry struct{ Name, Why string }

// Table is the stateful table, in its order, for the documentation and its test.
func Table() []Entry {
	out := make([]Entry, len(stateful))
	for i, e := range stateful {
		out[i] = Entry{Name: e.name, Why: e.why}
	}
	return out
}

// KnownStateful names the stateful-table entry a stdio server's command line matches.
func KnownStateful(s v1alpha1.MCPServer) (string, bool) {
	if s.Stdio == nil {
		return "", false
	}
	words := append([]string{s.Stdio.Command}, s.Stdio.Args...)
	for _, e := range stateful {
		for _, w := range words {
			if e.match(w) {
				return e.name, true
			}
		}
	}
	return "", false
}

// pkg matches an npm package word, with or without a version (@playwright/mcp@latest), or a
// path into the package as installed (node node_modules/@playwright/mcp/cli.js).
func pkg(name string) func(string) bool {
	return func(w string) bool {
		return w == name || strings.HasPrefix(w, name+"@") || strings.Contains(w, "node_modules/"+name+"/")
	}
}

// program matches a word naming one of the programs, as a path's last element or in a git URL
// (uvx --from git+https://github.com/oraios/serena serena start-mcp-server).
func program(names ...string) func(string) bool {
	return func(w string) bool {
		base := path.Base(strings.TrimSuffix(w, ".git"))
		for _, n := range names {
			if base == n {
				return true
			}
		}
		return false
	}
}
