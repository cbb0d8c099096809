package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/testenv"
	"github.com/dsh-dev/projectmcp/internal/testenv/harness"
)

// The official MCP conformance server suite (@modelcontextprotocol/conformance, pinned in
// test/node/package.json), run with each revision's --requirements against a server directly
// and through projectmcp: a per-server endpoint must score every check at least as the server
// does directly, and the project endpoint too, but for the scenarios that call a tool or prompt
// by its bare name (the project endpoint names them <server>__<name>). The servers are the Go
// SDK's conformance everything-server (stateful for 2025-11-25, stateless for 2026-07-28) and
// the npm server-everything at both (it speaks 2025-11-25 only: at 2026-07-28 the gateway
// bridges the revisions, and scores far better than the server alone). Where the gateway scores better
// (it checks Host and Origin; a deleted session's id gets 404), the log says so.
func TestConformanceSuite(t *testing.T) {
	node, dir := testenv.NodeScripts(t)
	everything := buildConformanceServer(t)
	stateful := startConformanceServer(t, exec.Command(everything, "-stateless=false"))
	stateless := startConformanceServer(t, exec.Command(everything, "-stateless=true"))
	npm := startConformanceServer(t, exec.Command(node, "--import", filepath.Join(dir, "loopback.mjs"),
		filepath.Join(dir, "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js"), "streamableHttp"))
	npm += "/mcp"

	ns := harness.NewNamespace(t)
	type target struct {
		server, direct, requirements string
	}
	targets := []target{
		{"go-stateful", stateful, "2025-11-25"},
		{"go-stateless", stateless, "2026-07-28"},
		{"npm-everything", npm, "2025-11-25"},
		{"npm-everything", npm, "2026-07-28"}, // it speaks 2025-11-25 only: the gateway bridges
	}
	endpoints := map[string][2]string{} // server: per-server endpoint, project endpoint
	for _, tg := range targets {
		if _, ok := endpoints[tg.server]; ok {
			continue
		}
		key := harness.Create(t, ns, tg.server, v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{
			{Name: "everything", HTTP: &v1alpha1.HTTPServer{URL: tg.direct}},
		}})
		obj := harness.WaitStatus(t, key, 60*time.Second, "Ready", func(o *v1alpha1.ProjectMCP) bool {
			return harness.IsReady(o) && o.Status.Endpoint != "" && len(o.Status.Servers) == 1 && o.Status.Servers[0].Endpoint != ""
		})
		endpoints[tg.server] = [2]string{obj.Status.Servers[0].Endpoint, obj.Status.Endpoint}
	}

	for _, tg := range targets {
		name := tg.server + "@" + tg.requirements
		t.Run(name, func(t *testing.T) {
			direct := runConformance(t, node, dir, tg.direct, tg.requirements)
			server := runConformance(t, node, dir, endpoints[tg.server][0], tg.requirements)
			project := runConformance(t, node, dir, endpoints[tg.server][1], tg.requirements)
			t.Logf("%s at %s: direct %s; per-server endpoint %s; project endpoint %s",
				tg.server, tg.requirements, score(direct), score(server), score(project))
			for _, c := range []struct {
				endpoint  string
				through   []check
				mayDiffer func(scenario string) bool
			}{
				{"per-server endpoint", server, func(string) bool { return false }},
				{"project endpoint", project, nameBound},
			} {
				worse, better := diverge(direct, c.through)
				for _, d := range better {
					t.Logf("%s scores better than direct: %s", c.endpoint, d)
				}
				for _, d := range worse {
					if !c.mayDiffer(d.scenario) {
						t.Errorf("%s scores worse than direct: %s", c.endpoint, d)
					}
				}
			}
		})
	}
}

// nameBound reports whether a scenario calls a tool or prompt by the bare name its server
// gives it (or needs one such call first), which the project endpoint names <server>__<name>.
func nameBound(scenario string) bool {
	switch {
	case strings.HasPrefix(scenario, "tools-call-"), strings.HasPrefix(scenario, "prompts-get-"),
		strings.HasPrefix(scenario, "elicitation-"), strings.HasPrefix(scenario, "input-required-result-"),
		strings.HasPrefix(scenario, "tasks-"):
		return true
	}
	return slices.Contains([]string{
		"completion-complete",                  // completes a prompt's argument by the prompt's name
		"json-schema-2020-12",                  // looks for the tool json_schema_2020_12_tool
		"server-stateless",                     // calls its diagnostic tools by name
		"server-sse-polling",                   // calls test_reconnection
		"http-custom-header-server-validation", // calls test_x_mcp_header
	}, scenario)
}

// check is one check of a conformance run.
type check struct {
	scenario, id, status, message string
}

// runConformance runs the suite's server scenarios a revision requires against url.
func runConformance(t *testing.T, node, dir, url, requirements string) []check {
	t.Helper()
	out := t.TempDir()
	cmd := exec.Command(node, filepath.Join(dir, "conformance.mjs"), "server", "--url", url,
		"--requirements", requirements, "--output-dir", out, "--timeout", "20000")
	cmd.Dir = out
	log, err := cmd.CombinedOutput()
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) { // failing checks exit non-zero
		t.Fatalf("conformance suite: %v\n%s", err, log)
	}
	checks, err := readChecks(out)
	if err != nil || len(checks) == 0 {
		t.Fatalf("conformance suite left no checks in %s (%v):\n%s", out, err, log)
	}
	return checks
}

// scenarioDir is a result folder's name: server-<scenario>-<timestamp>.
var scenarioDir = regexp.MustCompile(`^server-(.+)-\d{4}-\d\d-\d\dT[\d-]+Z$`)

// readChecks reads every scenario's checks.json under dir, in scenario order.
func readChecks(dir string) ([]check, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []check
	for _, e := range entries {
		m := scenarioDir.FindStringSubmatch(e.Name())
		if m == nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name(), "checks.json"))
		if os.IsNotExist(err) { // the scenario ended before it recorded a check
			out = append(out, check{scenario: m[1], id: "no-checks", status: "FAILURE", message: "the scenario recorded no checks"})
			continue
		}
		if err != nil {
			return nil, err
		}
		var checks []struct {
			ID, Status, ErrorMessage string
		}
		if err := json.Unmarshal(data, &checks); err != nil {
			return nil, fmt.Errorf("%s: %w", e.Name(), err)
		}
		for _, c := range checks {
			out = append(out, check{scenario: m[1], id: c.ID, status: c.Status, message: c.ErrorMessage})
		}
	}
	slices.SortStableFunc(out, func(a, b check) int { return strings.Compare(a.scenario, b.scenario) })
	return out, nil
}

// rank orders the statuses that score: a check that informs or was skipped does not.
var rank = map[string]int{"FAILURE": 1, "WARNING": 2, "SUCCESS": 3}

// score is a run's figures as the suite counts them.
func score(checks []check) string {
	n := map[string]int{}
	for _, c := range checks {
		n[c.status]++
	}
	return fmt.Sprintf("%d passed, %d warned, %d failed", n["SUCCESS"], n["WARNING"], n["FAILURE"])
}

// divergence is a check that scored differently through the gateway than directly.
type divergence struct {
	scenario, id    string
	direct, through string // statuses ("" for absent)
	message         string // the worse run's message
}

func (d divergence) String() string {
	s := fmt.Sprintf("%s/%s: direct %s, through %s", d.scenario, d.id, or(d.direct, "absent"), or(d.through, "absent"))
	if d.message != "" {
		s += ": " + d.message
	}
	return s
}

func or(s, otherwise string) string {
	if s == "" {
		return otherwise
	}
	return s
}

// diverge lines up two runs' scoring checks (by scenario, id and occurrence) and returns those
// that scored worse through the gateway than directly, and those that scored better. A check
// only one run made counts when it changes the scenario's score: a pass or warning only the
// direct run has is lost through the gateway, and a failure only the run through the gateway
// has is a new one when the scenario had none directly (a scenario that fails directly stops
// at another step than one that gets further through the gateway).
func diverge(direct, through []check) (worse, better []divergence) {
	key := func(checks []check) (map[string]check, []string, map[string]bool) {
		seen, byKey, order, failing := map[string]int{}, map[string]check{}, []string(nil), map[string]bool{}
		for _, c := range checks {
			if rank[c.status] == 0 {
				continue
			}
			k := c.scenario + "\x00" + c.id
			seen[k]++
			k += fmt.Sprint("\x00", seen[k])
			byKey[k] = c
			order = append(order, k)
			failing[c.scenario] = failing[c.scenario] || c.status == "FAILURE"
		}
		return byKey, order, failing
	}
	d, dOrder, dFailing := key(direct)
	g, gOrder, _ := key(through)
	for _, k := range dOrder {
		dc := d[k]
		gc, ok := g[k]
		if !ok {
			if dc.status != "FAILURE" {
				worse = append(worse, divergence{dc.scenario, dc.id, dc.status, "", ""})
			}
			continue
		}
		switch {
		case rank[gc.status] < rank[dc.status]:
			worse = append(worse, divergence{dc.scenario, dc.id, dc.status, gc.status, gc.message})
		case rank[gc.status] > rank[dc.status]:
			better = append(better, divergence{dc.scenario, dc.id, dc.status, gc.status, dc.message})
		}
	}
	for _, k := range gOrder { // checks only the run through the gateway made
		if _, ok := d[k]; !ok {
			gc := g[k]
			if gc.status == "FAILURE" && !dFailing[gc.scenario] {
				worse = append(worse, divergence{gc.scenario, gc.id, "", gc.status, gc.message})
			} else if gc.status != "FAILURE" {
				better = append(better, divergence{gc.scenario, gc.id, "", gc.status, gc.message})
			}
		}
	}
	return worse, better
}

// buildConformanceServer builds the Go SDK's conformance everything-server, at the SDK version
// go.mod names.
func buildConformanceServer(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "everything-server")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/modelcontextprotocol/go-sdk/conformance/everything-server")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the conformance server: %v\n%s", err, out)
	}
	return bin
}

// startConformanceServer starts cmd on a free loopback port (-http for the Go server, PORT
// for the npm one) and returns its URL once it accepts connections; the test's end kills it.
func startConformanceServer(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	_, port, _ := net.SplitHostPort(addr)
	if filepath.Base(cmd.Path) == "everything-server" {
		cmd.Args = append(cmd.Args, "-http", addr)
	}
	cmd.Env = append(os.Environ(), "PORT="+port)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err == nil {
			c.Close()
			return "http://" + addr
		}
		if ctx.Err() != nil {
			t.Fatalf("%s did not listen on %s: %v", cmd.Path, addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestDiverge(t *testing.T) {
	direct := []check{
		{scenario: "a", id: "x", status: "SUCCESS"},
		{scenario: "a", id: "x", status: "WARNING"}, // a second check of the same id
		{scenario: "a", id: "info", status: "INFO"},
		{scenario: "b", id: "y", status: "FAILURE"},
		{scenario: "c", id: "z", status: "SUCCESS"},
	}
	direct = append(direct,
		check{scenario: "e", id: "setup", status: "FAILURE"}, // fails directly at another step
		check{scenario: "e", id: "w", status: "WARNING"})
	through := []check{
		{scenario: "a", id: "x", status: "SUCCESS"},
		{scenario: "a", id: "x", status: "FAILURE", message: "broke"},
		{scenario: "b", id: "y", status: "SUCCESS"},
		{scenario: "d", id: "new", status: "FAILURE"},
		{scenario: "d", id: "fine", status: "SUCCESS"},
		{scenario: "e", id: "later", status: "FAILURE"},
		{scenario: "e", id: "w", status: "WARNING"},
	}
	worse, better := diverge(direct, through)
	var w, b []string
	for _, d := range worse {
		w = append(w, d.String())
	}
	for _, d := range better {
		b = append(b, d.String())
	}
	wantWorse := []string{"a/x: direct WARNING, through FAILURE: broke", "c/z: direct SUCCESS, through absent", "d/new: direct absent, through FAILURE"}
	wantBetter := []string{"b/y: direct FAILURE, through SUCCESS", "d/fine: direct absent, through SUCCESS"}
	if !slices.Equal(w, wantWorse) || !slices.Equal(b, wantBetter) {
		t.Fatalf("worse %q\nbetter %q", w, b)
	}
}
