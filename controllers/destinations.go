package controllers

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"unicode"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/config"
	"github.com/dsh-dev/projectmcp/internal/policy"
)

// A Secret's values go only to the destinations its annotation
// v1alpha1.AnnotationAllowedDestinations names. Whoever may write a consented ProjectMCP (or
// commit to a .dsh/mcp.json a mirror applies) chooses its servers' URLs, headers and env, so
// consent to a project alone would let them send the values anywhere. A remote server's
// destination is its URL's origin: its headers and URL go there and nowhere else (SameOrigin).
// A stdio server's destination is its command line: its env goes to whatever that command runs.

// destinationList is an allowed-destinations annotation as read: the destinations it names,
// spelled as destinationOf spells them, and why each entry it cannot use is unusable.
type destinationList struct {
	named    map[string]bool
	unusable []string
}

// parseDestinations reads an allowed-destinations annotation: entries separated by commas or
// newlines, spaces around them ignored.
func parseDestinations(annotation string) destinationList {
	l := destinationList{named: map[string]bool{}}
	for _, entry := range strings.FieldsFunc(annotation, func(r rune) bool { return r == ',' || r == '\n' }) {
		if entry = strings.TrimSpace(entry); entry == "" {
			continue
		}
		d, err := normalDestination(entry)
		if err != nil {
			l.unusable = append(l.unusable, err.Error())
			continue
		}
		l.named[d] = true
	}
	return l
}

// normalDestination spells an entry as destinationOf spells a server's destination: an entry
// whose first word has "://" is an origin, scheme://host:port; any other is a command line,
// its words one space apart.
func normalDestination(entry string) (string, error) {
	words := strings.Fields(entry)
	if !strings.Contains(words[0], "://") {
		return strings.Join(words, " "), nil
	}
	u, err := url.Parse(entry)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("entry %q is not an origin (http or https://host[:port], no path)", entry)
	}
	return policy.OriginOf(u), nil
}

// withoutValues is the lookup of a Secret with no values: a reference expands to its default,
// or to nothing. A destination found with it names no value of the Secret.
func withoutValues(string) (string, bool) { return "", true }

// destinationOf is where a server's values go, with ${VAR} references expanded by lookup.
func destinationOf(s v1alpha1.MCPServer, lookup func(string) (string, bool)) (string, error) {
	switch {
	case s.HTTP != nil:
		return originOf(s.HTTP.URL, lookup)
	case s.Stdio != nil:
		return commandLineOf(s.Stdio, lookup)
	}
	return "", errors.New("server has neither stdio nor http")
}

// originOf is the origin of a url template once expanded; an error names the template, never
// what it expanded to.
func originOf(template string, lookup func(string) (string, bool)) (string, error) {
	raw, err := config.Expand(template, lookup)
	if err != nil {
		return "", err
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", &secretError{fmt.Sprintf("url %q does not expand to an absolute http(s) URL", template)}
	}
	return policy.OriginOf(u), nil
}

// commandLineOf is a stdio server's command and args once expanded, one space apart. A word
// that is empty or holds a space or a comma, or a command with "://", could not be told apart
// in the annotation (from other words, or from an origin), so such a command line is no
// destination.
func commandLineOf(st *v1alpha1.StdioServer, lookup func(string) (string, bool)) (string, error) {
	fs := commandLine(st)
	words := make([]string, 0, len(fs))
	for i, f := range fs {
		w, err := config.Expand(f.value, lookup)
		if err != nil {
			return "", err
		}
		if why := unnameable(w, i == 0); why != "" {
			return "", &secretError{fmt.Sprintf("%s %s, so the command line cannot be named in the annotation %s",
				f.where, why, v1alpha1.AnnotationAllowedDestinations)}
		}
		words = append(words, w)
	}
	return strings.Join(words, " "), nil
}

// unnameable says why a word of a command line cannot be written in the annotation, or "".
func unnameable(word string, command bool) string {
	switch {
	case word == "" || strings.ContainsFunc(word, unicode.IsSpace) || strings.Contains(word, ","):
		return "is empty or holds a space or a comma"
	case command && strings.Contains(word, "://"):
		return `holds "://", as an origin does`
	}
	return ""
}

// destinationRefusal explains why a Secret's values do not go to a server's destination,
// naming the annotation, the entries it cannot use, and the fix.
func destinationRefusal(secret, server, destination string, annotations map[string]string) error {
	annotation, ok := annotations[v1alpha1.AnnotationAllowedDestinations]
	fix := fmt.Sprintf("add the annotation %s: %s", v1alpha1.AnnotationAllowedDestinations, destination)
	if ok {
		fix = fmt.Sprintf("add %s to its annotation %s", destination, v1alpha1.AnnotationAllowedDestinations)
	}
	msg := fmt.Sprintf("server %q: Secret %q does not allow its values to go to %s: %s", server, secret, destination, fix)
	if unusable := parseDestinations(annotation).unusable; len(unusable) > 0 {
		msg += " (" + strings.Join(unusable, "; ") + ")"
	}
	return &secretError{msg}
}

// secretDestination is a server's destination when the Secret allows its values to go there.
// The destination is found with the Secret's values and must be the one found without them, so
// that no value chooses where the values go, and an error can name the destination.
func secretDestination(s v1alpha1.MCPServer, secret string, annotations map[string]string, lookup func(string) (string, bool)) error {
	dest, err := destinationOf(s, lookup)
	if err != nil {
		return fmt.Errorf("server %q: %w", s.Name, err)
	}
	if bare, _ := destinationOf(s, withoutValues); bare != dest {
		return &secretError{fmt.Sprintf("server %q: the origin of its url depends on values of Secret %q: a Secret's values may go only to a destination named without them; keep them out of the url's scheme, host and port",
			s.Name, secret)}
	}
	if !parseDestinations(annotations[v1alpha1.AnnotationAllowedDestinations]).named[dest] {
		return destinationRefusal(secret, s.Name, dest, annotations)
	}
	return nil
}
