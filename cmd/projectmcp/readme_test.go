package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/buckets"
	"github.com/dsh-dev/projectmcp/internal/gateway"
	"github.com/dsh-dev/projectmcp/internal/oauth"
)

// The documentation's promises and the implementation agree: defaults, annotation names, the
// endpoint path, the session header, every flag of `projectmcp controller` with its default,
// and every value of the Helm chart. A default changed in code without the docs (or the other
// way round) fails here. The docs are the README (the user's) and the pages of docs/ (the
// operator's); each test reads the pages where its promise is made.

const (
	repoRoot   = "../.."
	readmePath = repoRoot + "/README.md"
	// The pages the flag tables are on: the README's generated table of the global flags, and
	// the controller's and the gateway's tables.
	flagsPage = "docs/flags.md"
	// The page of the Helm chart's values table.
	installPage = "docs/install.md"
	// The widest table cell the README may have: a longer one belongs in a docs/ page.
	maxReadmeCell = 300
)

func readme(t *testing.T) string {
	t.Helper()
	return docPage(t, "README.md")
}

// docPage is a page of the documentation, by its path from the repository's root.
func docPage(t *testing.T, rel string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// page is one page of the documentation: its path from the repository's root and its text.
type page struct {
	name, text string
}

// docPages are the README and the hand-written pages of docs/ (not the generated docs/cli):
// every page a promise of the docs may be on.
func docPages(t *testing.T) []page {
	t.Helper()
	pages := []page{{"README.md", readme(t)}}
	names, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(names) == 0 {
		t.Fatal("docs/ has no pages")
	}
	sort.Strings(names)
	for _, name := range names {
		rel := "docs/" + filepath.Base(name)
		pages = append(pages, page{rel, docPage(t, rel)})
	}
	return pages
}

// pagesNamed reads the pages given by their paths from the repository's root.
func pagesNamed(t *testing.T, names ...string) []page {
	t.Helper()
	var pages []page
	for _, name := range names {
		pages = append(pages, page{name, docPage(t, name)})
	}
	return pages
}

// allText joins the pages' texts, for the promises that hold wherever they are made.
func allText(pages []page) string {
	var b strings.Builder
	for _, p := range pages {
		b.WriteString(p.text)
		b.WriteString("\n")
	}
	return b.String()
}

// mdTable is a pipe table of a page: its header cells and its rows' cells.
type mdTable struct {
	page   string // where it is, for messages
	line   int    // of the header, 1-based
	header []string
	rows   [][]string
}

// where names a table's place for messages: page:line.
func (t mdTable) where() string { return fmt.Sprintf("%s:%d", t.page, t.line) }

// tablesOf parses the tables of every page.
func tablesOf(pages []page) []mdTable {
	var out []mdTable
	for _, p := range pages {
		for _, tbl := range readmeTables(p.text) {
			tbl.page = p.name
			out = append(out, tbl)
		}
	}
	return out
}

// readmeTables parses the pipe tables outside code fences.
func readmeTables(text string) []mdTable {
	var tables []mdTable
	var cur *mdTable
	fenced := false
	for i, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "```") {
			fenced = !fenced
		}
		if fenced || !strings.HasPrefix(trimmed, "|") {
			cur = nil
			continue
		}
		cells := splitRow(trimmed)
		switch {
		case cur == nil:
			tables = append(tables, mdTable{line: i + 1, header: cells})
			cur = &tables[len(tables)-1]
		case isSeparator(cells):
		default:
			cur.rows = append(cur.rows, cells)
		}
	}
	return tables
}

// splitRow splits `| a | b |` into trimmed cells; a `|` inside backticks or escaped as `\|`
// stays in its cell.
func splitRow(line string) []string {
	line = strings.TrimSuffix(strings.TrimPrefix(line, "|"), "|")
	var cells []string
	var cell strings.Builder
	code, escaped := false, false
	for _, r := range line {
		switch {
		case escaped:
			escaped = false
		case r == '\\':
			escaped = true
		case r == '`':
			code = !code
		case r == '|' && !code:
			cells = append(cells, strings.TrimSpace(cell.String()))
			cell.Reset()
			continue
		}
		cell.WriteRune(r)
	}
	return append(cells, strings.TrimSpace(cell.String()))
}

func isSeparator(cells []string) bool {
	for _, c := range cells {
		if strings.Trim(c, "-: ") != "" {
			return false
		}
	}
	return true
}

var codeSpan = regexp.MustCompile("`([^`]*)`")

// codeSpans lists the contents of a cell's backticked spans.
func codeSpans(s string) []string {
	var out []string
	for _, m := range codeSpan.FindAllStringSubmatch(s, -1) {
		out = append(out, m[1])
	}
	return out
}

// literal is the value a default cell states, when the whole cell is one code span that is not
// a placeholder such as `http://<bind address>`; "" when the cell is empty or a description
// ("in-cluster namespace", "none").
func literal(cell string) string {
	if m := regexp.MustCompile("^`([^`<>]+)`$").FindStringSubmatch(cell); m != nil {
		return m[1]
	}
	return ""
}

// controllerFlagSet is every flag `projectmcp controller` takes (its own and the global ones),
// outside a cluster unless inCluster.
func controllerFlagSet(t *testing.T, inCluster bool) *pflag.FlagSet {
	t.Helper()
	if inCluster {
		t.Setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
	} else {
		t.Setenv("KUBERNETES_SERVICE_HOST", "") // restored after the test
		os.Unsetenv("KUBERNETES_SERVICE_HOST")
	}
	return commandFlags(t, "controller")
}

// commandFlags is every flag of a command (given as its path below the root), its own and
// inherited.
func commandFlags(t *testing.T, path ...string) *pflag.FlagSet {
	t.Helper()
	cmd, _, err := newRootCmd(io.Discard, io.Discard).Find(path)
	if err != nil || cmd.Name() != path[len(path)-1] {
		t.Fatalf("no command %v: %v", path, err)
	}
	fs := pflag.NewFlagSet(cmd.CommandPath(), pflag.ContinueOnError)
	fs.AddFlagSet(cmd.LocalFlags())
	fs.AddFlagSet(cmd.InheritedFlags())
	return fs
}

// defaultOf is a flag's default as the README states it: "" for none (an empty list, a zero
// count).
func defaultOf(fl *pflag.Flag) string {
	switch {
	case fl.DefValue == "[]", fl.Value.Type() == "count" && fl.DefValue == "0":
		return ""
	}
	return fl.DefValue
}

// sameValue reports whether the README's text for a flag value means the flag's default.
func sameValue(fl *pflag.Flag, readme string) error {
	def := fl.DefValue
	switch fl.Value.Type() {
	case "duration":
		d, err := time.ParseDuration(readme)
		if err != nil {
			return fmt.Errorf("README's %q is not a duration: %v", readme, err)
		}
		if v, _ := time.ParseDuration(def); d != v {
			return fmt.Errorf("README says %s, the code's default is %s", readme, def)
		}
		return nil
	case "bool":
		b, err := strconv.ParseBool(readme)
		if v, _ := strconv.ParseBool(def); err != nil || b != v {
			return fmt.Errorf("README says %q, the code's default is %v", readme, def)
		}
		return nil
	}
	if readme != def {
		return fmt.Errorf("README says %q, the code's default is %q", readme, def)
	}
	return nil
}

// inCluster matches the README's way of giving a default that differs inside a cluster.
var inCluster = regexp.MustCompile("^`([^`]+)` outside a cluster, `([^`]+)` inside$")

// Every flag of `projectmcp controller` is in a flag table (`| flag | default | ... |`,
// `| gateway flag | default | ... |` or the README's `| global flag | default | ... |`) with the
// code's default, and every flag those tables list exists. A row whose flags end in "..." (the
// zap flags) stands for every flag sharing their prefix.
func TestReadmeControllerFlags(t *testing.T) {
	fs := controllerFlagSet(t, false)
	documented := map[string]bool{}
	var families []string
	rows := 0
	for _, tbl := range tablesOf(pagesNamed(t, "README.md", flagsPage)) {
		if len(tbl.header) < 3 || !strings.HasSuffix(tbl.header[0], "flag") || tbl.header[1] != "default" {
			continue
		}
		for _, row := range tbl.rows {
			rows++
			var names []string
			for _, span := range codeSpans(row[0]) {
				if name, ok := strings.CutPrefix(span, "--"); ok {
					names = append(names, name)
				}
			}
			if len(names) == 0 {
				t.Errorf("%s: a flag table row names no --flag: %q", tbl.where(), row[0])
				continue
			}
			for _, name := range names {
				if fs.Lookup(name) == nil {
					t.Errorf("%s documents --%s, which `projectmcp controller` does not define", tbl.where(), name)
				}
				documented[name] = true
			}
			if strings.HasSuffix(row[0], "...") {
				for _, name := range names {
					families = append(families, name[:strings.IndexByte(name, '-')+1])
				}
				continue // a family of flags: no single default to check
			}
			if len(names) != 1 {
				t.Errorf("%s: one flag per row, or a family ending in \"...\": %q", tbl.where(), row[0])
				continue
			}
			name, cell := names[0], row[1]
			fl := fs.Lookup(name)
			if fl == nil {
				continue
			}
			if m := inCluster.FindStringSubmatch(cell); m != nil {
				if err := sameValue(fl, m[1]); err != nil {
					t.Errorf("--%s outside a cluster: %v", name, err)
				}
				if err := sameValue(controllerFlagSet(t, true).Lookup(name), m[2]); err != nil {
					t.Errorf("--%s inside a cluster: %v", name, err)
				}
				continue
			}
			lit, def := literal(cell), defaultOf(fl)
			switch {
			case def == "" && lit != "":
				t.Errorf("--%s: README gives the default `%s`, the code has none (the README may describe it in words)", name, lit)
			case def != "" && lit == "":
				t.Errorf("--%s: README gives no default (%q), the code's is %q", name, cell, def)
			case lit != "":
				if err := sameValue(fl, lit); err != nil {
					t.Errorf("--%s: %v", name, err)
				}
			}
		}
	}
	if rows == 0 {
		t.Fatalf("%s has no `| flag | default | meaning |` table", flagsPage)
	}
	fs.VisitAll(func(fl *pflag.Flag) {
		if documented[fl.Name] {
			return
		}
		for _, prefix := range families {
			if prefix != "" && strings.HasPrefix(fl.Name, prefix) {
				return
			}
		}
		t.Errorf("--%s (default %q) is missing from the flag tables of %s", fl.Name, fl.DefValue, flagsPage)
	})
}

// The prose repeats some flag defaults: "`--session-timeout` (30 min)", "(4 MiB)", in the README
// and in the pages of docs/. A flag of another command than the controller is named with it:
// "`projectmcp connect --wait` (10 s)".
func TestReadmeFlagDefaultsInProse(t *testing.T) {
	controller := controllerFlagSet(t, false)
	prose := regexp.MustCompile("`(?:projectmcp ([a-z]+) )?--([a-z-]+)` \\((\\d+) (min|s|ms|h|MiB|KiB)\\)")
	seen := 0
	for _, p := range docPages(t) {
		for _, m := range prose.FindAllStringSubmatch(p.text, -1) {
			seen++
			fs, cmd := controller, "controller"
			if m[1] != "" {
				fs, cmd = commandFlags(t, m[1]), m[1]
			}
			fl := fs.Lookup(m[2])
			if fl == nil {
				t.Errorf("%s mentions --%s, which `projectmcp %s` does not define", p.name, m[2], cmd)
				continue
			}
			checkProseDefault(t, p.name, m[0], fl, m[3], m[4])
		}
	}
	if seen == 0 {
		t.Fatal("no \"`--flag` (N unit)\" in the docs; update this test if the prose changed form")
	}
}

// proseUnits are the units prose gives durations in, as Go spells them.
var proseUnits = map[string]string{"min": "m", "s": "s", "ms": "ms", "h": "h"}

// checkProseDefault checks one "`--flag` (N unit)" of a page against the flag's default.
func checkProseDefault(t *testing.T, page, text string, fl *pflag.Flag, number, unit string) {
	t.Helper()
	n, _ := strconv.ParseInt(number, 10, 64)
	var err error
	switch unit {
	case "MiB":
		err = sameValue(fl, strconv.FormatInt(n<<20, 10))
	case "KiB":
		err = sameValue(fl, strconv.FormatInt(n<<10, 10))
	default:
		err = sameValue(fl, number+proseUnits[unit])
	}
	if err != nil {
		t.Errorf("%s: %q: %v", page, text, err)
	}
}

// find returns the first submatch of every match of re in the pages, failing when the first
// page (the one that must state it) has none.
func find(t *testing.T, pages []page, re string) []string {
	t.Helper()
	var out []string
	for i, p := range pages {
		ms := regexp.MustCompile(re).FindAllStringSubmatch(p.text, -1)
		if i == 0 && len(ms) == 0 {
			t.Errorf("%s has no match for %s", p.name, re)
		}
		for _, m := range ms {
			out = append(out, m[1])
		}
	}
	return out
}

// The spec defaults the README states are the API's (the CRD's defaults equal these constants;
// test/crd checks that against the API server), and so are those the pages of docs/ repeat.
func TestReadmeSpecDefaults(t *testing.T) {
	pages := docPages(t) // the README first
	text := readme(t)
	durations := []struct {
		re   string
		want time.Duration
	}{
		{"`idleTimeout` \\(default `([^`]+)`", v1alpha1.DefaultIdleTimeout},
		{"`readyTimeout` \\(default `([^`]+)`", v1alpha1.DefaultReadyTimeout},
		{"`initialBackoff` ([0-9.]+(?:ns|us|µs|ms|s|m|h))\\b", v1alpha1.DefaultInitialBackoff},
		{"`maxBackoff` ([0-9.]+(?:ns|us|µs|ms|s|m|h))\\b", v1alpha1.DefaultMaxBackoff},
	}
	for _, c := range durations {
		for _, s := range find(t, pages, c.re) {
			if d, err := time.ParseDuration(s); err != nil || d != c.want {
				t.Errorf("the docs: %s gives %q, the code's default is %s", c.re, s, c.want)
			}
		}
	}
	for _, s := range find(t, pages, "`maxAttempts` default (\\d+)") {
		if s != strconv.Itoa(int(v1alpha1.DefaultMaxAttempts)) {
			t.Errorf("the docs: reconnect.maxAttempts default %s, the code's is %d", s, v1alpha1.DefaultMaxAttempts)
		}
	}

	// .dsh/mcp.json's table gives the same defaults in milliseconds.
	ms := map[string]time.Duration{"idleTimeoutMs": v1alpha1.DefaultIdleTimeout, "readyTimeoutMs": v1alpha1.DefaultReadyTimeout}
	seen := map[string]bool{}
	for _, tbl := range readmeTables(text) {
		for _, row := range tbl.rows {
			key := strings.Trim(row[0], "`")
			want, ok := ms[key]
			if !ok || len(row) < 2 {
				continue
			}
			seen[key] = true
			m := regexp.MustCompile(`\(default (\d+)[;)]`).FindStringSubmatch(row[1])
			if m == nil {
				t.Errorf("README.md:%d: the %s row states no \"(default N\": %q", tbl.line, key, row[1])
				continue
			}
			if m[1] != strconv.FormatInt(want.Milliseconds(), 10) {
				t.Errorf("README: %s default %s, the code's is %d (%s)", key, m[1], want.Milliseconds(), want)
			}
		}
	}
	for key := range ms {
		if !seen[key] {
			t.Errorf("README.md's config table has no %s row", key)
		}
	}
}

// The annotations the README names are the ones the controller reads, spelled alike, and
// every mcp.dsh.dev/ key the README or a page of docs/ mentions exists.
func TestReadmeAnnotations(t *testing.T) {
	text := readme(t)
	known := map[string]bool{
		v1alpha1.AnnotationReconnectRequestedAt: true,
		v1alpha1.AnnotationReconnectServers:     true,
		v1alpha1.Finalizer:                      true,
		v1alpha1.AnnotationAllowedProjects:      true,
		v1alpha1.AnnotationAllowedDestinations:  true,
		buckets.LabelPin:                        true,
		buckets.LabelReplica:                    true,
		buckets.AnnotationAddress:               true,
		oauth.LabelGrant:                        true,
		oauth.AnnotationGrantProject:            true,
		oauth.AnnotationGrantServer:             true,
	}
	for _, a := range []string{v1alpha1.AnnotationReconnectRequestedAt, v1alpha1.AnnotationReconnectServers} {
		if !strings.Contains(text, "`"+a) {
			t.Errorf("README.md does not name the annotation %s", a)
		}
	}
	for _, p := range docPages(t) {
		// Not tools.mcp.dsh.dev/<name> and the like: resource names (rbac.go), not keys.
		for _, m := range regexp.MustCompile(`(?:^|[^.A-Za-z0-9])(mcp\.dsh\.dev/[A-Za-z0-9._-]+)`).FindAllStringSubmatch(p.text, -1) {
			if k := m[1]; !known[k] {
				t.Errorf("%s names %s, which the code does not define", p.name, k)
			}
		}
	}
}

// endpointURL matches an endpoint in the docs, with or without its scheme and host:
// [1] scheme and host, [2] namespace, [3] name, [4] what follows (ends at a quote, backtick,
// parenthesis or brace).
var endpointURL = regexp.MustCompile("(https?://[^/\\s\"'`]+)?/projects/([^/\\s]+)/([^/\\s]+)/([^\\s\"'`)}]*)")

// knownHeaders are the X-ProjectMCP- headers there are: the stateless session's, and those the
// replicas add to what they proxy (internal/buckets).
var knownHeaders = []string{gateway.SessionHeader, buckets.HeaderProxiedBy, buckets.HeaderMoved, buckets.HeaderClientAddr, buckets.HeaderClientUID, buckets.HeaderReplicaToken}

// The endpoint URLs in the README and the pages of docs/ have the gateway's paths (the
// project's and the per-server ones) and its default address, and every X-ProjectMCP- header is
// one there is, spelled as the code spells it.
func TestReadmeEndpointAndHeader(t *testing.T) {
	pages := docPages(t)
	if want := gateway.Path(types.NamespacedName{Namespace: "<namespace>", Name: "<name>"}); !strings.Contains(allText(pages), want) {
		t.Errorf("the docs do not give the endpoint path form %s", want)
	}
	if urls := endpointURL.FindAllString(readme(t), -1); len(urls) == 0 {
		t.Error("README.md shows no endpoint")
	}
	addr := controllerFlagSet(t, false).Lookup("gateway-bind-address").DefValue
	for _, p := range pages {
		for _, m := range endpointURL.FindAllStringSubmatch(p.text, -1) {
			// The project endpoint may carry the except-list of the entry for the rest.
			path, query, _ := strings.Cut(strings.TrimPrefix(m[0], m[1]), "?")
			key := types.NamespacedName{Namespace: m[2], Name: m[3]}
			want, takes := gateway.Path(key), "except="
			if server, ok := strings.CutPrefix(m[4], "servers/"); ok { // a per-server endpoint
				want, takes = gateway.ServerPath(key, strings.TrimSuffix(server, "/mcp")), "?" // none
			}
			if query != "" && !strings.HasPrefix(query, takes) {
				t.Errorf("%s shows the endpoint %s; the only query an endpoint takes is the project's except=", p.name, m[0])
			}
			if path != want {
				t.Errorf("%s shows the endpoint %s; the gateway serves %s", p.name, m[0], want)
			}
			if m[1] != "" && m[1] != "http://"+addr {
				t.Errorf("%s shows the endpoint %s; the default gateway address is %s", p.name, m[0], addr)
			}
		}
		for _, h := range regexp.MustCompile(`(?i)X-ProjectMCP-[A-Za-z-]+`).FindAllString(p.text, -1) {
			if !slices.Contains(knownHeaders, h) {
				t.Errorf("%s names the header %s; the gateway and the replicas know %v", p.name, h, knownHeaders)
			}
		}
	}
	if !strings.Contains(readme(t), "`"+gateway.SessionHeader+"`") {
		t.Errorf("README.md does not name the session header %s", gateway.SessionHeader)
	}
}

// The table parser itself, on the forms the README uses.
func TestReadmeTableParser(t *testing.T) {
	tables := readmeTables("text\n\n| flag | default | meaning |\n|---|---|---|\n| `--a` | `1m` | x |\n| `--b`, `--c`, ... | | y \\| z |\n\n```\n| not | a | table |\n```\n| k | v |\n|:-|-:|\n| `a|b` | c |\n")
	if len(tables) != 2 {
		t.Fatalf("tables: %+v", tables)
	}
	if got := tables[0]; got.line != 3 || len(got.rows) != 2 || got.rows[0][1] != "`1m`" || got.rows[1][1] != "" || got.rows[1][2] != "y \\| z" || got.rows[1][0] != "`--b`, `--c`, ..." {
		t.Fatalf("first table: %+v", got)
	}
	if got := tables[1].rows; len(got) != 1 || got[0][0] != "`a|b`" || got[0][1] != "c" {
		t.Fatalf("second table: %+v", got)
	}
	for cell, want := range map[string]string{"`30s`": "30s", "": "", "in-cluster namespace": "", "`http://<bind address>`": "", "`true` outside": ""} {
		if got := literal(cell); got != want {
			t.Errorf("literal(%q) = %q, want %q", cell, got, want)
		}
	}
}

// The README's exit code table gives the codes run returns, each for what it means.
func TestReadmeExitCodes(t *testing.T) {
	want := map[string]string{strconv.Itoa(exitOK): "success", strconv.Itoa(exitFailure): "failed", strconv.Itoa(exitUsage): "usage error"}
	seen := 0
	for _, tbl := range readmeTables(readme(t)) {
		if len(tbl.header) < 2 || tbl.header[0] != "code" {
			continue
		}
		for _, row := range tbl.rows {
			code := strings.Trim(row[0], "`")
			if w, ok := want[code]; !ok || !strings.Contains(row[1], w) {
				t.Errorf("README.md:%d: exit code %s, %q: the code's meaning is %q", tbl.line, code, row[1], w)
			}
			seen++
		}
	}
	if seen != len(want) {
		t.Errorf("README.md's exit code table has %d rows, want %d", seen, len(want))
	}
}

// The README is for the user who reads it through: no table cell is a page of its own. Longer
// cells belong in a page of docs/.
func TestReadmeTableCells(t *testing.T) {
	for _, tbl := range tablesOf(pagesNamed(t, "README.md")) {
		for i, row := range append([][]string{tbl.header}, tbl.rows...) {
			for _, cell := range row {
				if n := utf8.RuneCountInString(cell); n > maxReadmeCell {
					t.Errorf("%s, row %d: a cell of %d characters (at most %d): %.60q...", tbl.where(), i, n, maxReadmeCell, cell)
				}
			}
		}
	}
}

const (
	chartSchema = repoRoot + "/charts/projectmcp/values.schema.json"
	chartValues = repoRoot + "/charts/projectmcp/values.yaml"
)

// chartValueNames are the values the chart's schema admits, as dotted paths: its leaves (an
// object the schema gives no properties, such as resources or annotations, is one value).
func chartValueNames(t *testing.T) map[string]bool {
	t.Helper()
	data, err := os.ReadFile(chartSchema)
	if err != nil {
		t.Fatal(err)
	}
	type node struct {
		Properties map[string]*json.RawMessage `json:"properties"`
	}
	names := map[string]bool{}
	var walk func(prefix string, raw []byte)
	walk = func(prefix string, raw []byte) {
		var n node
		if err := json.Unmarshal(raw, &n); err != nil {
			t.Fatalf("%s: %v", chartSchema, err)
		}
		if len(n.Properties) == 0 {
			names[strings.TrimSuffix(prefix, ".")] = true
			return
		}
		for name, sub := range n.Properties {
			walk(prefix+name+".", *sub)
		}
	}
	walk("", data)
	return names
}

// chartValue is a value of values.yaml by its dotted path, decoded as YAML decodes it.
func chartValue(values map[string]any, path string) (any, bool) {
	var v any = values
	for _, key := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = m[key]; !ok {
			return nil, false
		}
	}
	return v, true
}

// Every value of the Helm chart is in the values table of docs/install.md, every value the
// table names is one the chart's schema admits, and a default the table gives as code (`8484`,
// `""`, `[]`) is the one values.yaml sets. A row may name several values: one default stands
// for all of them, or one default per value, in order.
func TestDocsHelmValues(t *testing.T) {
	admitted := chartValueNames(t)
	data, err := os.ReadFile(chartValues)
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(data, &values); err != nil {
		t.Fatalf("%s: %v", chartValues, err)
	}
	documented := map[string]bool{}
	rows := 0
	for _, tbl := range tablesOf(pagesNamed(t, installPage)) {
		if len(tbl.header) < 3 || tbl.header[0] != "value" || tbl.header[1] != "default" {
			continue
		}
		for _, row := range tbl.rows {
			rows++
			names := codeSpans(row[0])
			if len(names) == 0 {
				t.Errorf("%s: a values table row names no value: %q", tbl.where(), row[0])
				continue
			}
			var defaults []string
			if strings.HasPrefix(row[1], "`") { // else the default is told in words
				defaults = codeSpans(row[1])
			}
			if len(defaults) > 1 && len(defaults) != len(names) {
				t.Errorf("%s: %d values and %d defaults: %q", tbl.where(), len(names), len(defaults), row[1])
				continue
			}
			for i, name := range names {
				if !admitted[name] {
					t.Errorf("%s documents the value %s, which the chart's schema does not admit", tbl.where(), name)
					continue
				}
				documented[name] = true
				if len(defaults) == 0 {
					continue
				}
				def := defaults[min(i, len(defaults)-1)]
				var want any
				if err := yaml.Unmarshal([]byte(def), &want); err != nil {
					t.Errorf("%s: %s: the default `%s` is not YAML: %v", tbl.where(), name, def, err)
					continue
				}
				if got, ok := chartValue(values, name); !ok {
					t.Errorf("%s: values.yaml sets no %s", tbl.where(), name)
				} else if !reflect.DeepEqual(got, want) {
					t.Errorf("%s: %s: the table says `%s`, values.yaml sets %#v", tbl.where(), name, def, got)
				}
			}
		}
	}
	if rows == 0 {
		t.Fatalf("%s has no `| value | default | sets |` table", installPage)
	}
	for _, name := range slices.Sorted(maps.Keys(admitted)) {
		if !documented[name] {
			t.Errorf("the chart's value %s is missing from the values table of %s", name, installPage)
		}
	}
}

// maxReadmeLines is how long the README may grow: it keeps the user's path (what projectmcp
// does, the quick start, connecting an agent, the config and the resource in short) and links
// to docs/ for the rest; a README past it has taken in what belongs on a docs page.
const maxReadmeLines = 500

func TestReadmeStaysShort(t *testing.T) {
	if n := strings.Count(readme(t), "\n"); n > maxReadmeLines {
		t.Errorf("README.md has %d lines, more than %d: move what is not the user's path to a page of docs/ and link to it", n, maxReadmeLines)
	}
}
