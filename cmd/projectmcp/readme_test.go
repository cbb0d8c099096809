package main

import (
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/gateway"
)

// The README's promises and the implementation agree: defaults, annotation names, the endpoint
// path, the session header and every flag of `projectmcp controller` with its default. A
// default changed in code without the README (or the other way round) fails here.

const readmePath = "../../README.md"

func readme(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// mdTable is a pipe table of the README: its header cells and its rows' cells.
type mdTable struct {
	line   int // of the header, 1-based
	header []string
	rows   [][]string
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

// Every flag of `projectmcp controller` is in a README flag table (`| flag | default | ... |`
// or `| gateway flag | default | ... |`) with the code's default, and every flag those tables
// list exists. A row whose flags end in "..." (the zap flags) stands for every flag sharing
// their prefix.
func TestReadmeControllerFlags(t *testing.T) {
	fs := controllerFlagSet(t, false)
	documented := map[string]bool{}
	var families []string
	rows := 0
	for _, tbl := range readmeTables(readme(t)) {
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
				t.Errorf("README.md:%d: a flag table row names no --flag: %q", tbl.line, row[0])
				continue
			}
			for _, name := range names {
				if fs.Lookup(name) == nil {
					t.Errorf("README documents --%s, which `projectmcp controller` does not define", name)
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
				t.Errorf("README.md:%d: one flag per row, or a family ending in \"...\": %q", tbl.line, row[0])
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
		t.Fatal("README.md has no `| flag | default | meaning |` table")
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
		t.Errorf("--%s (default %q) is missing from the README's controller flag tables", fl.Name, fl.DefValue)
	})
}

// The prose repeats some flag defaults: "`--session-timeout` (30 min)", "(4 MiB)".
func TestReadmeFlagDefaultsInProse(t *testing.T) {
	fs := controllerFlagSet(t, false)
	units := map[string]string{"min": "m", "s": "s", "ms": "ms", "h": "h"}
	matches := regexp.MustCompile("`--([a-z-]+)` \\((\\d+) (min|s|ms|h|MiB|KiB)\\)").FindAllStringSubmatch(readme(t), -1)
	if len(matches) == 0 {
		t.Fatal("no \"`--flag` (N unit)\" in README.md; update this test if the prose changed form")
	}
	for _, m := range matches {
		fl := fs.Lookup(m[1])
		if fl == nil {
			t.Errorf("README mentions --%s, which `projectmcp controller` does not define", m[1])
			continue
		}
		n, _ := strconv.ParseInt(m[2], 10, 64)
		var err error
		switch m[3] {
		case "MiB":
			err = sameValue(fl, strconv.FormatInt(n<<20, 10))
		case "KiB":
			err = sameValue(fl, strconv.FormatInt(n<<10, 10))
		default:
			err = sameValue(fl, m[2]+units[m[3]])
		}
		if err != nil {
			t.Errorf("%q: %v", m[0], err)
		}
	}
}

// find returns the first submatch of every match of re in the README, failing when there is none.
func find(t *testing.T, text, re string) []string {
	t.Helper()
	var out []string
	for _, m := range regexp.MustCompile(re).FindAllStringSubmatch(text, -1) {
		out = append(out, m[1])
	}
	if len(out) == 0 {
		t.Errorf("README.md has no match for %s", re)
	}
	return out
}

// The spec defaults the README states are the API's (the CRD's defaults equal these constants;
// test/crd checks that against the API server).
func TestReadmeSpecDefaults(t *testing.T) {
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
		for _, s := range find(t, text, c.re) {
			if d, err := time.ParseDuration(s); err != nil || d != c.want {
				t.Errorf("README: %s gives %q, the code's default is %s", c.re, s, c.want)
			}
		}
	}
	for _, s := range find(t, text, "`maxAttempts` default (\\d+)") {
		if s != strconv.Itoa(int(v1alpha1.DefaultMaxAttempts)) {
			t.Errorf("README: reconnect.maxAttempts default %s, the code's is %d", s, v1alpha1.DefaultMaxAttempts)
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
// every mcp.dsh.dev/ key it mentions exists.
func TestReadmeAnnotations(t *testing.T) {
	text := readme(t)
	known := map[string]bool{
		v1alpha1.AnnotationReconnectRequestedAt: true,
		v1alpha1.AnnotationReconnectServers:     true,
		v1alpha1.Finalizer:                      true,
	}
	for _, a := range []string{v1alpha1.AnnotationReconnectRequestedAt, v1alpha1.AnnotationReconnectServers} {
		if !strings.Contains(text, "`"+a) {
			t.Errorf("README.md does not name the annotation %s", a)
		}
	}
	for _, k := range regexp.MustCompile(`mcp\.dsh\.dev/[A-Za-z0-9._-]+`).FindAllString(text, -1) {
		if !known[k] {
			t.Errorf("README.md names %s, which the code does not define", k)
		}
	}
}

// endpointURL matches an endpoint in the README, with or without its scheme and host:
// [1] scheme and host, [2] namespace, [3] name, [4] what follows (ends at a quote, backtick,
// parenthesis or brace).
var endpointURL = regexp.MustCompile("(https?://[^/\\s\"'`]+)?/projects/([^/\\s]+)/([^/\\s]+)/([^\\s\"'`)}]*)")

// The endpoint URLs in the README have the gateway's path and its default address, and the
// stateless session header is spelled as the gateway reads it.
func TestReadmeEndpointAndHeader(t *testing.T) {
	text := readme(t)
	if want := gateway.Path(types.NamespacedName{Namespace: "<namespace>", Name: "<name>"}); !strings.Contains(text, want) {
		t.Errorf("README.md does not give the endpoint path form %s", want)
	}
	addr := controllerFlagSet(t, false).Lookup("gateway-bind-address").DefValue
	urls := endpointURL.FindAllStringSubmatch(text, -1)
	if len(urls) == 0 {
		t.Fatal("README.md shows no endpoint")
	}
	for _, m := range urls {
		path := strings.TrimPrefix(m[0], m[1])
		if want := gateway.Path(types.NamespacedName{Namespace: m[2], Name: m[3]}); path != want {
			t.Errorf("README.md shows the endpoint %s; the gateway serves %s", m[0], want)
		}
		if m[1] != "" && m[1] != "http://"+addr {
			t.Errorf("README.md shows the endpoint %s; the default gateway address is %s", m[0], addr)
		}
	}

	if !strings.Contains(text, "`"+gateway.SessionHeader+"`") {
		t.Errorf("README.md does not name the session header %s", gateway.SessionHeader)
	}
	for _, h := range regexp.MustCompile(`(?i)X-ProjectMCP-[A-Za-z-]+`).FindAllString(text, -1) {
		if h != gateway.SessionHeader {
			t.Errorf("README.md names the header %s; the gateway reads %s", h, gateway.SessionHeader)
		}
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
