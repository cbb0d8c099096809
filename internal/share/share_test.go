package share

import (
	"testing"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
)

func stdio(cmd string, args ...string) v1alpha1.MCPServer {
	return v1alpha1.MCPServer{Name: "s", Stdio: &v1alpha1.StdioServer{Command: cmd, Args: args}}
}

func TestEffective(t *testing.T) {
	explicit := stdio("npx", "-y", "@playwright/mcp@latest")
	explicit.Share = v1alpha1.ShareProject
	for _, tc := range []struct {
		name string
		s    v1alpha1.MCPServer
		want v1alpha1.Share
		why  bool
	}{
		{"plain server", stdio("npx", "-y", "@modelcontextprotocol/server-memory"), v1alpha1.ShareProject, false},
		{"playwright with a version", stdio("npx", "-y", "@playwright/mcp@latest"), v1alpha1.ShareSession, true},
		{"sequential thinking", stdio("npx", "-y", "@modelcontextprotocol/server-sequential-thinking"), v1alpha1.ShareSession, true},
		{"filesystem", stdio("npx", "@modelcontextprotocol/server-filesystem", "/tmp"), v1alpha1.ShareSession, true},
		{"serena from git", stdio("uvx", "--from", "git+https://github.com/oraios/serena", "serena", "start-mcp-server"), v1alpha1.ShareSession, true},
		{"serena program path", stdio("/opt/bin/serena-mcp-server"), v1alpha1.ShareSession, true},
		{"a look-alike package", stdio("npx", "@playwright/mcp-extra"), v1alpha1.ShareProject, false},
		{"puppeteer", stdio("npx", "-y", "@modelcontextprotocol/server-puppeteer"), v1alpha1.ShareSession, true},
		{"chrome devtools", stdio("npx", "chrome-devtools-mcp@latest", "--headless"), v1alpha1.ShareSession, true},
		{"a look-alike of chrome devtools", stdio("npx", "chrome-devtools-mcp-proxy"), v1alpha1.ShareProject, false},
		{"executeautomation playwright", stdio("npx", "-y", "@executeautomation/playwright-mcp-server"), v1alpha1.ShareSession, true},
		{"installed package run by node", stdio("/usr/bin/node", "/src/node_modules/@modelcontextprotocol/server-sequential-thinking/dist/index.js"), v1alpha1.ShareSession, true},
		{"a look-alike installed package", stdio("node", "/src/node_modules/@playwright/mcp-extra/cli.js"), v1alpha1.ShareProject, false},
		{"a package named in a flag's value", stdio("node", "server.js", "--name", "@playwright/mcp"), v1alpha1.ShareSession, true},
		{"explicit project wins", explicit, v1alpha1.ShareProject, false},
		{"http server", v1alpha1.MCPServer{Name: "h", HTTP: &v1alpha1.HTTPServer{URL: "https://x"}}, v1alpha1.ShareProject, false},
	} {
		got, why := Effective(tc.s)
		if got != tc.want || (why != "") != tc.why {
			t.Errorf("%s: Effective = %q, %q; want %q (reason given: %v)", tc.name, got, why, tc.want, tc.why)
		}
	}
}

func TestKeyAndLabel(t *testing.T) {
	who := Who{Principal: "system:serviceaccount:ns:alice", Session: "sess-1", Root: "/src/wt1"}
	if Key(v1alpha1.ShareProject, who) != "" || Label("") != "" {
		t.Fatal("project scope must have the empty key and label")
	}
	keys := map[string]bool{}
	for _, sc := range []v1alpha1.Share{v1alpha1.SharePrincipal, v1alpha1.ShareSession, v1alpha1.ShareWorktree} {
		k := Key(sc, who)
		if k == "" || keys[k] {
			t.Fatalf("%s: key %q empty or not distinct", sc, k)
		}
		keys[k] = true
		l := Label(k)
		if len(l) != 12 || l != Label(k) {
			t.Fatalf("%s: label %q not 12 stable hex digits", sc, l)
		}
	}
	if Key(v1alpha1.SharePrincipal, Who{Principal: "a"}) == Key(v1alpha1.SharePrincipal, Who{Principal: "b"}) {
		t.Fatal("two principals share a key")
	}
}

// Every entry of the table has a name and a reason, and is matched by a command line that
// names it, as the documentation's table shows it.
func TestTable(t *testing.T) {
	table := Table()
	if len(table) != len(stateful) || len(table) < 4 {
		t.Fatalf("Table has %d entries, the table %d", len(table), len(stateful))
	}
	seen := map[string]bool{}
	for i, e := range table {
		if e.Name == "" || e.Why == "" || seen[e.Name] {
			t.Errorf("entry %d: %+v: a name and a reason, each name once", i, e)
		}
		seen[e.Name] = true
		if !stateful[i].match(e.Name) && !stateful[i].match("@modelcontextprotocol/"+e.Name) {
			t.Errorf("entry %q does not match its own name", e.Name)
		}
	}
	for _, want := range []string{"@playwright/mcp", "serena", "server-sequential-thinking", "server-filesystem"} {
		if !seen[want] {
			t.Errorf("the table lacks %s", want)
		}
	}
}
