package testutil

import (
	"maps"
	"strconv"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Sample is one line of the Prometheus text exposition format.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// Metrics is one scrape of a /metrics endpoint.
type Metrics []Sample

// ParseMetrics reads the text exposition format (with the Prometheus client's own parser)
// into samples, one for each line the format would print: a histogram or summary gives its
// _bucket (or quantile), _sum and _count series.
func ParseMetrics(text string) (Metrics, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		return nil, err
	}
	var out Metrics
	for name, f := range families {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			add := func(suffix string, value float64, extra ...string) {
				s := Sample{Name: name + suffix, Labels: maps.Clone(labels), Value: value}
				for i := 0; i+1 < len(extra); i += 2 {
					s.Labels[extra[i]] = extra[i+1]
				}
				out = append(out, s)
			}
			switch {
			case m.Counter != nil:
				add("", m.GetCounter().GetValue())
			case m.Gauge != nil:
				add("", m.GetGauge().GetValue())
			case m.Untyped != nil:
				add("", m.GetUntyped().GetValue())
			case m.Histogram != nil:
				h := m.GetHistogram()
				for _, b := range h.GetBucket() {
					add("_bucket", float64(b.GetCumulativeCount()), "le", strconv.FormatFloat(b.GetUpperBound(), 'g', -1, 64))
				}
				add("_sum", h.GetSampleSum())
				add("_count", float64(h.GetSampleCount()))
			case m.Summary != nil:
				sm := m.GetSummary()
				for _, q := range sm.GetQuantile() {
					add("", q.GetValue(), "quantile", strconv.FormatFloat(q.GetQuantile(), 'g', -1, 64))
				}
				add("_sum", sm.GetSampleSum())
				add("_count", float64(sm.GetSampleCount()))
			}
		}
	}
	return out, nil
}

// Sum adds up the samples of a metric whose labels include the given ones, given as name,
// value pairs.
func (m Metrics) Sum(name string, labels ...string) float64 {
	total := 0.0
	for _, s := range m {
		if s.Name == name && s.has(labels) {
			total += s.Value
		}
	}
	return total
}

// Has reports whether a metric has a sample whose labels include the given ones.
func (m Metrics) Has(name string, labels ...string) bool {
	for _, s := range m {
		if s.Name == name && s.has(labels) {
			return true
		}
	}
	return false
}

func (s Sample) has(labels []string) bool {
	for i := 0; i+1 < len(labels); i += 2 {
		if v, ok := s.Labels[labels[i]]; !ok || v != labels[i+1] {
			return false
		}
	}
	return true
}
