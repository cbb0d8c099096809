package metrics

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/dsh-dev/projectmcp/internal/controlplane"
)

// docs/metrics.md has a row for every metric the registry serves, with its labels (those of
// --metrics-project-labels aside), and names no metric the registry does not serve.
func TestMetricsDocumented(t *testing.T) {
	documented := documentedMetrics(t)
	served := servedMetrics(t)
	for name, labels := range served {
		row, ok := documented[name]
		switch {
		case !ok:
			t.Errorf("docs/metrics.md has no row for %s", name)
		case !slices.Equal(row, labels):
			t.Errorf("docs/metrics.md gives %s the labels %v, the metric has %v", name, row, labels)
		}
	}
	for name := range documented {
		if _, ok := served[name]; !ok {
			t.Errorf("docs/metrics.md has a row for %s, which is not registered", name)
		}
	}
	// A metric registered without register would be missed above: none is.
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if _, ok := served[f.GetName()]; strings.HasPrefix(f.GetName(), "projectmcp_") && !ok {
			t.Errorf("%s is registered, but not through register", f.GetName())
		}
	}
}

var (
	descName   = regexp.MustCompile(`fqName: "([^"]*)"`)
	descLabels = regexp.MustCompile(`variableLabels: \{([^}]*)\}`)
)

// servedMetrics are the projectmcp_ metrics of the registered collectors, by name, with their
// label names (without project labels).
func servedMetrics(t *testing.T) map[string][]string {
	t.Helper()
	var collectors []prometheus.Collector
	for _, c := range registered {
		if _, ok := c.(configured); ok { // it describes nothing: its set does
			collectors = append(collectors, newSet(false).collectors()...)
			continue
		}
		collectors = append(collectors, c)
	}
	ch := make(chan *prometheus.Desc, 64)
	go func() {
		for _, c := range collectors {
			c.Describe(ch)
		}
		close(ch)
	}()
	out := map[string][]string{}
	for d := range ch {
		s := d.String()
		name, labels := descName.FindStringSubmatch(s), descLabels.FindStringSubmatch(s)
		if name == nil || labels == nil {
			t.Fatalf("cannot read the metric's name and labels in %s", s)
		}
		if strings.HasPrefix(name[1], "projectmcp_") {
			out[name[1]] = splitLabels(labels[1])
		}
	}
	if len(out) == 0 {
		t.Fatal("no projectmcp_ metric registered")
	}
	return out
}

// documentedMetrics are the rows of docs/metrics.md's table: each metric with the labels its
// second column names.
func documentedMetrics(t *testing.T) map[string][]string {
	t.Helper()
	root, err := controlplane.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(root, "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("^\\| `(projectmcp_[a-z_]+)` \\|([^|]*)\\|")
	label := regexp.MustCompile("`([a-z_]+)`")
	out := map[string][]string{}
	for _, line := range strings.Split(string(data), "\n") {
		m := row.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		if _, dup := out[m[1]]; dup {
			t.Errorf("docs/metrics.md has two rows for %s", m[1])
		}
		labels := []string{}
		for _, l := range label.FindAllStringSubmatch(m[2], -1) {
			labels = append(labels, l[1])
		}
		out[m[1]] = labels
	}
	if len(out) == 0 {
		t.Fatal("docs/metrics.md has no table of metrics")
	}
	return out
}

func splitLabels(s string) []string {
	if s == "" {
		return []string{}
	}
	return strings.Split(s, ",")
}
