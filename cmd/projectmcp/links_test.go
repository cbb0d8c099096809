package main

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// The documentation holds together: every relative link of README.md, CONTRIBUTING.md,
// DESIGN.md and the pages under docs/ reaches a file that exists, every #anchor a heading of
// its page, every page under docs/ is linked from another page, and every page or anchor a
// comment of the code cites (`docs/lifecycle-contracts.md#the-mounts-exception`) exists.
// Links to other sites are not followed.

// topPages are the pages at the repository's top; every .md file under docs/ is a page too.
var topPages = []string{"README.md", "CONTRIBUTING.md", "DESIGN.md"}

// markdownPages lists the pages under root that the links are checked on, as slash paths
// relative to root.
func markdownPages(root string) ([]string, error) {
	var pages []string
	for _, p := range topPages {
		if _, err := os.Stat(filepath.Join(root, p)); err == nil {
			pages = append(pages, p)
		}
	}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			rel, err := filepath.Rel(root, p)
			if err != nil {
				return err
			}
			pages = append(pages, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	slices.Sort(pages)
	return pages, nil
}

// slug is the anchor GitHub gives a heading: its text without markup, lowercased, with every
// character but letters, marks, numbers, connector punctuation ("_"), "-" and spaces dropped,
// and each space made "-".
// (A repeated slug gets "-1", "-2" on the same page: see anchors.)
func slug(heading string) string {
	text := mdLink.ReplaceAllString(heading, "$1") // a link's text, not its target
	text = htmlTag.ReplaceAllString(text, "")
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(text)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-', unicode.IsLetter(r), unicode.IsMark(r), unicode.IsNumber(r), unicode.Is(unicode.Pc, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

var (
	atxHeading = regexp.MustCompile(`^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)
	// mdLink is an inline link or image: [1] its text, [2] its target.
	mdLink = regexp.MustCompile(`!?\[([^\]]*)\]\(\s*<?([^()\s>]*)>?(?:\s+"[^"]*")?\s*\)`)
	// mdRefDef is a reference definition: [x]: target.
	mdRefDef = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$`)
	htmlTag  = regexp.MustCompile(`<[^>]*>`)
	htmlID   = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
)

// mdLine is a line of a page outside its fenced code blocks: as written, and with its inline
// code removed (where no link can be).
type mdLine struct {
	n         int // 1-based
	raw, text string
}

// proseLines are a page's lines outside fenced code.
func proseLines(text string) []mdLine {
	var out []mdLine
	fence := ""
	for i, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if fence == "" && (strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")) {
			fence = trimmed[:3]
			continue
		}
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			continue
		}
		out = append(out, mdLine{i + 1, line, withoutCode(line)})
	}
	return out
}

// withoutCode removes the code spans of a line: a run of backticks up to the next run of the
// same length.
func withoutCode(line string) string {
	var b strings.Builder
	for i := 0; i < len(line); {
		if line[i] != '`' {
			b.WriteByte(line[i])
			i++
			continue
		}
		n := 1
		for i+n < len(line) && line[i+n] == '`' {
			n++
		}
		ticks := line[i : i+n]
		end := -1
		for j := i + n; j < len(line); {
			k := strings.Index(line[j:], ticks)
			if k < 0 {
				break
			}
			k += j
			m := len(ticks)
			for k+m < len(line) && line[k+m] == '`' {
				m++
			}
			if m == len(ticks) {
				end = k
				break
			}
			j = k + m
		}
		if end < 0 { // no closing run: the backticks are text
			b.WriteString(ticks)
			i += n
			continue
		}
		i = end + n
	}
	return b.String()
}

// anchors are the anchors a page has: its headings' slugs (a repeated one numbered) and its
// explicit <a id> or <a name> anchors.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	count := map[string]int{}
	for _, l := range proseLines(text) {
		for _, m := range htmlID.FindAllStringSubmatch(l.text, -1) {
			out[m[1]] = true
		}
		m := atxHeading.FindStringSubmatch(l.raw) // code in a heading is part of its text
		if m == nil {
			continue
		}
		s := slug(m[2])
		if n := count[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		count[s]++
	}
	return out
}

// pageLink is a link of a page: its line and its target as written.
type pageLink struct {
	line   int
	target string
}

// pageLinks are the links of a page outside code: inline links, images and reference
// definitions.
func pageLinks(text string) []pageLink {
	var out []pageLink
	for _, l := range proseLines(text) {
		for _, m := range mdLink.FindAllStringSubmatch(l.text, -1) {
			out = append(out, pageLink{l.n, m[2]})
		}
		if m := mdRefDef.FindStringSubmatch(l.text); m != nil {
			out = append(out, pageLink{l.n, m[1]})
		}
	}
	return out
}

// external reports a link to another site (or a scheme of its own), which is not checked.
func external(target string) bool {
	return regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`).MatchString(target) || strings.HasPrefix(target, "//")
}

// docChecker checks the links of a tree of pages, reading each page once.
type docChecker struct {
	root     string
	texts    map[string]string          // page → text
	anchored map[string]map[string]bool // page → its anchors
	problems []string
}

func (c *docChecker) problem(format string, args ...any) {
	c.problems = append(c.problems, fmt.Sprintf(format, args...))
}

// text reads a file of the tree by its slash path ("" and false when it is not there).
func (c *docChecker) text(rel string) (string, bool) {
	if t, ok := c.texts[rel]; ok {
		return t, true
	}
	data, err := os.ReadFile(filepath.Join(c.root, filepath.FromSlash(rel)))
	if err != nil {
		return "", false
	}
	c.texts[rel] = string(data)
	return string(data), true
}

// resolve checks that the target (a slash path from the root, and an anchor or "") exists,
// and returns why not ("" when it does).
func (c *docChecker) resolve(target, anchor string) string {
	if target == ".." || strings.HasPrefix(target, "../") {
		return "it leads out of the repository"
	}
	info, err := os.Stat(filepath.Join(c.root, filepath.FromSlash(target)))
	if err != nil {
		return "no such file"
	}
	if anchor == "" {
		return ""
	}
	if info.IsDir() || !strings.HasSuffix(target, ".md") {
		return "an anchor on a page that is not Markdown"
	}
	if c.anchored[target] == nil {
		text, _ := c.text(target)
		c.anchored[target] = anchors(text)
	}
	if !c.anchored[target][anchor] {
		return fmt.Sprintf("%s has no heading with the anchor #%s", target, anchor)
	}
	return ""
}

// checkDocs checks the pages under root (see markdownPages) and the code's citations of them,
// and returns every problem found, each naming where it is.
func checkDocs(root string) ([]string, error) {
	pages, err := markdownPages(root)
	if err != nil {
		return nil, err
	}
	c := &docChecker{root: root, texts: map[string]string{}, anchored: map[string]map[string]bool{}}
	linkedFrom := map[string]bool{} // pages some other page links to
	for _, page := range pages {
		text, _ := c.text(page)
		for _, l := range pageLinks(text) {
			if l.target == "" || external(l.target) {
				continue
			}
			file, anchor, _ := strings.Cut(l.target, "#")
			target := page
			if file != "" {
				target = path.Clean(path.Join(path.Dir(page), file))
			}
			if why := c.resolve(target, anchor); why != "" {
				c.problem("%s:%d: the link %q is broken: %s", page, l.line, l.target, why)
				continue
			}
			if target != page {
				linkedFrom[target] = true
			}
		}
	}
	for _, page := range pages {
		if strings.HasPrefix(page, "docs/") && !linkedFrom[page] {
			c.problem("%s: no other page links to it", page)
		}
	}
	if err := c.checkCitations(); err != nil {
		return nil, err
	}
	return c.problems, nil
}

// citation is a page (and an anchor) named in a file of the code, from the repository's root:
// [1] the page, [2] the anchor.
var citation = regexp.MustCompile(`(?:^|[^A-Za-z0-9_./-])((?:docs/[A-Za-z0-9_./-]+\.md|README\.md|CONTRIBUTING\.md|DESIGN\.md))(?:#([A-Za-z0-9_-]+))?`)

// commentMarker is what starts a comment in a file of the code that may cite the
// documentation: "//" in Go and JavaScript, "#" in YAML, templates, shell, the Makefile and the
// Dockerfile; "" for any other file.
func commentMarker(name string) string {
	switch filepath.Ext(name) {
	case ".go", ".mjs":
		return "//"
	case ".yaml", ".yml", ".tpl", ".sh":
		return "#"
	}
	if name == "Makefile" || name == "Dockerfile" {
		return "#"
	}
	return ""
}

// comment is the comment of a line ("" for none): what follows the marker outside a string.
// Strings (test data, mostly) are not citations.
func comment(marker, line string) string {
	quoted := false
	for i := 0; i < len(line); i++ {
		switch {
		case line[i] == '"' || line[i] == '`':
			quoted = !quoted
		case !quoted && strings.HasPrefix(line[i:], marker):
			return line[i+len(marker):]
		}
	}
	return ""
}

// checkCitations checks every page and anchor the code's files cite.
func (c *docChecker) checkCitations() error {
	return filepath.WalkDir(c.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "node_modules", "bin", "testdata":
				return filepath.SkipDir
			}
			return nil
		}
		// This file's own test trees are full of pages that exist only there.
		marker := commentMarker(d.Name())
		if marker == "" || d.Name() == "links_test.go" {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(c.root, p)
		for i, line := range strings.Split(string(data), "\n") {
			for _, m := range citation.FindAllStringSubmatch(comment(marker, line), -1) {
				if why := c.resolve(m[1], m[2]); why != "" {
					cited := m[1]
					if m[2] != "" {
						cited += "#" + m[2]
					}
					c.problem("%s:%d: cites %s: %s", filepath.ToSlash(rel), i+1, cited, why)
				}
			}
		}
		return nil
	})
}

func TestLinks(t *testing.T) {
	problems, err := checkDocs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

func TestLinkSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"Quick start": "quick-start",
		"Connecting an agent: `projectmcp connect`": "connecting-an-agent-projectmcp-connect",
		"`.dsh/mcp.json`":       "dshmcpjson",
		"The mount's exception": "the-mounts-exception",
		"Status: two writers, each applying its own fields":   "status-two-writers-each-applying-its-own-fields",
		"Prompts, reads and completions at the message level": "prompts-reads-and-completions-at-the-message-level",
		"Flags of `projectmcp controller`":                    "flags-of-projectmcp-controller",
		"snake_case and kebab-case":                           "snake_case-and-kebab-case",
		"Two  spaces":                                         "two--spaces",
		"  Trimmed  ":                                         "trimmed",
		"A [link](other.md#x) in it":                          "a-link-in-it",
		"Größe & Ünïcode 2.0":                                 "größe--ünïcode-20",
		"<a id=\"x\"></a>Tagged":                              "tagged",
		"What is tested?":                                     "what-is-tested",
	} {
		if got := slug(heading); got != want {
			t.Errorf("slug(%q) = %q, want %q", heading, got, want)
		}
	}
	// A repeated heading gets -1, -2; headings in code do not count.
	got := anchors("# A\n## A\n### A\n```\n# B\n```\n<a id=\"c\"></a>\n#NotAHeading\n")
	for _, want := range []string{"a", "a-1", "a-2", "c"} {
		if !got[want] {
			t.Errorf("anchors: no %q in %v", want, got)
		}
	}
	if got["b"] || got["notaheading"] || len(got) != 4 {
		t.Errorf("anchors: %v", got)
	}
}

// The checker, run on a tree of its own: a clean one passes, and each kind of break is found.
func TestLinkCheckerFindsBrokenLinks(t *testing.T) {
	write := func(root string, files map[string]string) {
		for name, text := range files {
			writeFile(t, filepath.Join(root, filepath.FromSlash(name)), text)
		}
	}
	good := map[string]string{
		"README.md":        "# Top\n\nSee [the docs](docs/README.md), [a section](docs/a.md#a-section), [here](#top), [the site](https://example.com/x.md) and `[not](a-link.md)`.\n",
		"DESIGN.md":        "# Design\n\n## Same\n\n## Same\n\n[back](README.md#top) and [the second](#same-1).\n",
		"docs/README.md":   "# Docs\n\n- [A](a.md)\n- [CLI](cli/tool.md)\n- [up](../DESIGN.md#same)\n\n```\n[in code](missing.md)\n```\n",
		"docs/a.md":        "# A\n\n## A section\n\n[index](README.md) [ref]\n\n[ref]: ../README.md\n",
		"docs/cli/tool.md": "# tool\n\n[index](../README.md)\n",
		"main.go":          "package main\n\n// See docs/a.md#a-section and DESIGN.md.\n",
	}
	clean := t.TempDir()
	write(clean, good)
	if problems, err := checkDocs(clean); err != nil || len(problems) != 0 {
		t.Fatalf("a clean tree: %v %q", err, problems)
	}

	broken := t.TempDir()
	write(broken, good)
	gone := "docs/gone.md"
	write(broken, map[string]string{
		"README.md":        "# Top\n\n[gone](" + gone + ") [no anchor](docs/a.md#nowhere) [self](#nope) [out](../../etc/passwd)\n\n[docs](docs/README.md)\n",
		"docs/README.md":   "# Docs\n\n- [A](a.md)\n- [up](../DESIGN.md#same)\n",
		"docs/orphan.md":   "# Orphan\n\n[index](README.md)\n",
		"docs/cli/tool.md": "# tool\n\n[itself](tool.md)\n",
		"main.go":          "package main\n\n// See docs/a.md#missing-anchor and " + gone + ".\n",
	})
	problems, err := checkDocs(broken)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`README.md:3: the link "` + gone + `" is broken: no such file`,
		`README.md:3: the link "docs/a.md#nowhere" is broken: docs/a.md has no heading with the anchor #nowhere`,
		`README.md:3: the link "#nope" is broken: README.md has no heading with the anchor #nope`,
		`README.md:3: the link "../../etc/passwd" is broken: it leads out of the repository`,
		`docs/orphan.md: no other page links to it`,
		`docs/cli/tool.md: no other page links to it`, // a link to itself does not count
		`main.go:3: cites docs/a.md#missing-anchor: docs/a.md has no heading with the anchor #missing-anchor`,
		`main.go:3: cites ` + gone + `: no such file`,
	} {
		if !slices.Contains(problems, want) {
			t.Errorf("missing problem %q in:\n%s", want, strings.Join(problems, "\n"))
		}
	}
	if len(problems) != 8 {
		t.Errorf("%d problems, want 8:\n%s", len(problems), strings.Join(problems, "\n"))
	}
}
