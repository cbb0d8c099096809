package main

import (
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// CONTRIBUTING.md's Layout table names every package under internal/, each by its own path (a
// row may name several: "`internal/projection`, `internal/toolname`"), and names no package that
// is not there. A parent's row does not stand for its subpackages: `internal/testenv/harness`
// has a row of its own. A package moved, added or removed without its row fails here, naming it.

const (
	contributingPage = "CONTRIBUTING.md"
	layoutHeading    = "## Layout"
)

// internalPackages lists the Go packages under root's internal/: every directory holding a .go
// file that is not a test, as slash paths from root. Like the go command, it skips testdata and
// directories whose name begins with "." or "_", and a directory with a go.mod of its own (another
// module).
func internalPackages(root string) ([]string, error) {
	var pkgs []string
	base := filepath.Join(root, "internal")
	err := filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if p != base && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil && p != base {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(d.Name(), ".go") || strings.HasSuffix(d.Name(), "_test.go") {
			return nil
		}
		rel, err := filepath.Rel(root, filepath.Dir(p))
		if err != nil {
			return err
		}
		if rel = filepath.ToSlash(rel); !slices.Contains(pkgs, rel) {
			pkgs = append(pkgs, rel)
		}
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		return nil, err
	}
	slices.Sort(pkgs)
	return pkgs, nil
}

// layoutSection is the text of a page's Layout section: from its heading to the next heading
// of its level or above ("" when the page has none).
func layoutSection(text string) string {
	var b strings.Builder
	in := false
	for _, l := range proseLines(text) {
		heading := atxHeading.FindStringSubmatch(l.raw)
		switch {
		case heading != nil && strings.TrimSpace(l.raw) == layoutHeading:
			in = true
			continue
		case heading != nil && in && len(heading[1]) <= 2:
			return b.String()
		}
		if in {
			b.WriteString(l.raw + "\n")
		}
	}
	return b.String()
}

// layoutRows maps each internal/ path the Layout table's first column names to the row that
// names it (1-based within the table's rows, for messages).
func layoutRows(section string) (map[string]int, error) {
	tables := readmeTables(section)
	if len(tables) == 0 || len(tables[0].header) < 2 || tables[0].header[0] != "path" {
		return nil, fmt.Errorf("%s's Layout section has no `| path | what it holds |` table", contributingPage)
	}
	named := map[string]int{}
	for i, row := range tables[0].rows {
		for _, span := range codeSpans(row[0]) {
			p := strings.TrimSuffix(span, "/")
			if p == "internal" || strings.HasPrefix(p, "internal/") {
				named[p] = i + 1
			}
		}
	}
	return named, nil
}

// checkLayout checks the Layout table of root's CONTRIBUTING.md against root's internal/
// packages, and returns every problem found, each naming the package.
func checkLayout(root string) ([]string, error) {
	data, err := os.ReadFile(filepath.Join(root, contributingPage))
	if err != nil {
		return nil, err
	}
	section := layoutSection(string(data))
	if section == "" {
		return nil, fmt.Errorf("%s has no %q section", contributingPage, layoutHeading)
	}
	named, err := layoutRows(section)
	if err != nil {
		return nil, err
	}
	pkgs, err := internalPackages(root)
	if err != nil {
		return nil, err
	}
	var problems []string
	for _, p := range pkgs {
		if _, ok := named[p]; !ok {
			problems = append(problems, fmt.Sprintf("%s's Layout table has no row for the package %s: add one, saying what it holds", contributingPage, p))
		}
	}
	for _, p := range slices.Sorted(maps.Keys(named)) {
		if !slices.Contains(pkgs, p) {
			problems = append(problems, fmt.Sprintf("%s's Layout table, row %d, names %s, which is no package of internal/: rename or remove it", contributingPage, named[p], p))
		}
	}
	return problems, nil
}

func TestContributingLayout(t *testing.T) {
	problems, err := checkLayout(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// The checker, run on a tree of its own: a covered tree passes, and a package without its own
// row, a row for a package that is not there, and a table outside the Layout section are found.
func TestLayoutChecker(t *testing.T) {
	write := func(root string, files map[string]string) {
		for name, text := range files {
			writeFile(t, filepath.Join(root, filepath.FromSlash(name)), text)
		}
	}
	tree := map[string]string{
		"internal/a/a.go":              "package a\n",
		"internal/b/b.go":              "package b\n",
		"internal/b/sub/sub.go":        "package sub\n",
		"internal/onlytests/x_test.go": "package onlytests\n", // no package outside its tests
		"internal/a/testdata/t.go":     "package t\n",         // testdata is not a package
		"internal/_skip/s.go":          "package s\n",
		"internal/other/go.mod":        "module other\n", // another module
		"internal/other/o.go":          "package other\n",
		"internal/a/docs.md":           "# not code\n",
	}
	page := func(rows string) string {
		return "# Contributing\n\n## Getting started\n\n| path | what it holds |\n|---|---|\n| `internal/elsewhere` | a table of another section |\n\n" +
			"## Layout\n\n| path | what it holds |\n|---|---|\n" + rows + "| `cmd/x`, `config/` | not internal |\n\n### A subsection\n\ntext\n\n## Next\n\n| path | what it holds |\n|---|---|\n| `internal/gone` | past the section |\n"
	}

	clean := t.TempDir()
	write(clean, tree)
	write(clean, map[string]string{contributingPage: page("| `internal/a`, `internal/b` | two at once |\n| `internal/b/sub` | its own row |\n")})
	if problems, err := checkLayout(clean); err != nil || len(problems) != 0 {
		t.Fatalf("a covered tree: %v %q", err, problems)
	}

	gaps := t.TempDir()
	write(gaps, tree)
	write(gaps, map[string]string{contributingPage: page("| `internal/b/` | the parent only |\n| `internal/a`, `internal/gone` | one there, one not |\n")})
	problems, err := checkLayout(gaps)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		contributingPage + "'s Layout table has no row for the package internal/b/sub: add one, saying what it holds",
		contributingPage + "'s Layout table, row 2, names internal/gone, which is no package of internal/: rename or remove it",
	}
	if !slices.Equal(problems, want) {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(problems, "\n"), strings.Join(want, "\n"))
	}

	none := t.TempDir()
	write(none, map[string]string{contributingPage: "# Contributing\n\n## Getting started\n"})
	if _, err := checkLayout(none); err == nil {
		t.Error("a page without a Layout section passed")
	}
}
