package testutil

import (
	"fmt"
	"strconv"
	"strings"
)

// Sample is one line of the Prometheus text exposition format.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// Metrics is one scrape of a /metrics endpoint.
type Metrics []Sample

// ParseMetrics reads the text exposition format (comments and blank lines are skipped).
func ParseMetrics(text string) (Metrics, error) {
	var out Metrics
	for _, line := range strings.Split(text, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		s, ok := parseSample(line)
		if !ok {
			return nil, fmt.Errorf("not a sample: %q", line)
		}
		out = append(out, s)
	}
	return out, nil
}

// parseSample reads `name{label="value",...} value [timestamp]`.
func parseSample(line string) (Sample, bool) {
	s := Sample{Labels: map[string]string{}}
	i := strings.IndexAny(line, "{ ")
	if i <= 0 {
		return s, false
	}
	s.Name, line = line[:i], line[i:]
	if line[0] == '{' {
		line = line[1:]
		for {
			if line == "" {
				return s, false
			}
			if line[0] == '}' {
				line = line[1:]
				break
			}
			eq := strings.IndexByte(line, '=')
			if eq <= 0 || len(line) < eq+2 || line[eq+1] != '"' {
				return s, false
			}
			name, value, rest, ok := quoted(line[:eq], line[eq+2:])
			if !ok {
				return s, false
			}
			s.Labels[name] = value
			line = strings.TrimPrefix(rest, ",")
		}
	}
	fields := strings.Fields(line)
	if len(fields) == 0 {
		return s, false
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	s.Value = v
	return s, err == nil
}

// quoted reads a label value up to its closing quote, undoing the format's escapes.
func quoted(name, line string) (string, string, string, bool) {
	var b strings.Builder
	for i := 0; i < len(line); i++ {
		switch c := line[i]; {
		case c == '"':
			return name, b.String(), line[i+1:], true
		case c == '\\' && i+1 < len(line):
			i++
			if line[i] == 'n' {
				b.WriteByte('\n')
			} else {
				b.WriteByte(line[i])
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", "", "", false
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
