package config

import (
	"fmt"
	"strings"
)

// References in config values have two forms, as in Claude Code's .mcp.json:
//
//	${NAME}            the value of NAME; an error when NAME is not set
//	${NAME:-default}   the value of NAME, or default when NAME is not set or empty
//
// NAME is [A-Za-z_][A-Za-z0-9_]*. A '$' not followed by '{' is literal text. The parser only
// checks the syntax and keeps references verbatim; the controller expands them at connect time
// from the project's Secret, so resolved values never reach the API.

// reference is one ${...} occurrence in a string.
type reference struct {
	start, end int // byte offsets of "${" and one past "}"
	name       string
	def        string
	hasDefault bool
}

// scanReferences returns the references in s, or an error describing the first malformed one.
// The error says where the reference starts and never quotes it: the value around it may be a
// secret written literally, and the error reaches status and events.
func scanReferences(s string) ([]reference, error) {
	var refs []reference
	for i := 0; i < len(s); {
		j := strings.Index(s[i:], "${")
		if j < 0 {
			break
		}
		start := i + j
		body := s[start+2:]
		end := strings.IndexByte(body, '}')
		if end < 0 {
			return nil, fmt.Errorf("unterminated variable reference at byte %d: expected ${NAME} or ${NAME:-default}", start)
		}
		inner := body[:end]
		ref := reference{start: start, end: start + 2 + end + 1, name: inner}
		if k := strings.Index(inner, ":-"); k >= 0 {
			ref.name, ref.def, ref.hasDefault = inner[:k], inner[k+2:], true
		}
		if !isVarName(ref.name) {
			return nil, fmt.Errorf("invalid variable reference at byte %d: a name is a letter or '_' followed by letters, digits or '_'", start)
		}
		refs = append(refs, ref)
		i = ref.end
	}
	return refs, nil
}

func isVarName(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		letter := c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z')
		if !letter && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// MissingVariableError reports a ${NAME} reference with no value and no default. It names the
// variable, never a value.
type MissingVariableError struct{ Name string }

func (e *MissingVariableError) Error() string {
	return fmt.Sprintf("variable %q is not set and has no default", e.Name)
}

// Expand replaces every reference in s using lookup. A reference whose variable lookup does not
// find (or finds empty, for the :- form) takes its default; without a default that is a
// *MissingVariableError.
func Expand(s string, lookup func(name string) (string, bool)) (string, error) {
	refs, err := scanReferences(s)
	if err != nil || len(refs) == 0 {
		return s, err
	}
	var b strings.Builder
	last := 0
	for _, ref := range refs {
		b.WriteString(s[last:ref.start])
		v, ok := lookup(ref.name)
		switch {
		case ref.hasDefault && (!ok || v == ""):
			v = ref.def
		case !ok:
			return "", &MissingVariableError{Name: ref.name}
		}
		b.WriteString(v)
		last = ref.end
	}
	b.WriteString(s[last:])
	return b.String(), nil
}

// References lists the variable names s refers to, in order, without duplicates.
func References(s string) ([]string, error) {
	refs, err := scanReferences(s)
	if err != nil {
		return nil, err
	}
	var names []string
	seen := map[string]bool{}
	for _, r := range refs {
		if !seen[r.name] {
			seen[r.name] = true
			names = append(names, r.name)
		}
	}
	return names, nil
}

func shorten(s string) string {
	const limit = 40
	if len(s) <= limit {
		return s
	}
	return s[:limit] + "..."
}
