package conn

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/dsh-dev/projectmcp/internal/bound"
)

// The errors of the bounds on a server's lists (MaxListItems, MaxListPages, MaxListBytes,
// MaxSchemaBytes), which the lister holds them to; the bound on one message is held by
// internal/bound. Each names its flag and value, and never repeats what the server sent.

// tooMany is the refusal of a list holding more than max items.
func tooMany(what string, max int) error {
	return fmt.Errorf("the server lists more than %d %s, over --max-list-items (%d); refused", max, what, max)
}

// tooManyPages is the refusal of a list whose pages go on past max.
func tooManyPages(method string, max int) error {
	return fmt.Errorf("the server's %s goes on past %d pages, over --max-list-pages (%d); refused", method, max, max)
}

// tooManyBytes is the refusal of a list whose items come to more than max bytes of JSON.
func tooManyBytes(what string, max int64) error {
	return fmt.Errorf("the server's %s come to more than --max-list-bytes (%s) of JSON; refused", what, bound.SizeText(max))
}

// shortName quotes a name the server gave for a message of ours, cut to a sane length.
func shortName(name string) string {
	const max = 64
	if len(name) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(name[cut]) {
			cut--
		}
		return fmt.Sprintf("%q...", name[:cut])
	}
	return fmt.Sprintf("%q", name)
}

// schemaNote says which tools were left out for their schemas' size.
func schemaNote(omitted []string, sizes []int64, limit int64) string {
	const shown = 5
	var b strings.Builder
	fmt.Fprintf(&b, "left out %d tool(s) whose input and output schemas exceed --max-schema-bytes (%s): ", len(omitted), bound.SizeText(limit))
	for i, name := range omitted[:min(len(omitted), shown)] {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s (%s)", shortName(name), aboutSize(sizes[i]))
	}
	if len(omitted) > shown {
		fmt.Fprintf(&b, " and %d more", len(omitted)-shown)
	}
	return b.String()
}

// aboutSize writes a measured size, rounded: 2.0 MiB, 97.7 KiB, 300 bytes.
func aboutSize(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d bytes", n)
}
