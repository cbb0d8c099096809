package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"syscall"

	"github.com/dsh-dev/projectmcp/internal/projectfs"
)

// An agent's config file is edited as text, not decoded and encoded again: the new entry is
// spliced in at the right place, so every other entry, the key order, the indentation and
// even comments (VS Code's files are JSON with comments) stay as the user left them.

// jsonValue is one value of a JSON (with comments) document and where it is in the text.
type jsonValue struct {
	start, end int          // byte offsets: [start, end)
	kind       byte         // '{', '[', '"' or 0 for the other scalars
	members    []jsonMember // of an object
	elems      []jsonValue  // of an array
	str        string       // a string's decoded value
}

type jsonMember struct {
	key      string
	keyStart int
	value    jsonValue
}

func (v jsonValue) member(key string) (jsonMember, bool) {
	for _, m := range v.members {
		if m.key == key {
			return m, true
		}
	}
	return jsonMember{}, false
}

// maxJSONDepth bounds nesting, so a hostile file cannot exhaust the stack.
const maxJSONDepth = 1000

// jsoncParser reads JSON with // and /* */ comments and trailing commas, as VS Code writes it.
type jsoncParser struct {
	src   []byte
	pos   int
	depth int
}

// parseJSONC parses a whole document; errors name the line and column.
func parseJSONC(src []byte) (jsonValue, error) {
	p := &jsoncParser{src: src}
	if bytes.HasPrefix(src, []byte("\xef\xbb\xbf")) {
		p.pos = 3
	}
	v, err := p.value()
	if err == nil {
		if err = p.skip(); err == nil && p.pos < len(p.src) {
			err = p.errorf("unexpected %q after the document", p.src[p.pos])
		}
	}
	return v, err
}

func (p *jsoncParser) errorf(format string, args ...any) error {
	line, col := 1, 1
	for _, b := range p.src[:min(p.pos, len(p.src))] {
		if b == '\n' {
			line, col = line+1, 1
		} else {
			col++
		}
	}
	return fmt.Errorf("%d:%d: %s", line, col, fmt.Sprintf(format, args...))
}

// skip passes whitespace and comments.
func (p *jsoncParser) skip() error {
	for p.pos < len(p.src) {
		switch c := p.src[p.pos]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			p.pos++
		case bytes.HasPrefix(p.src[p.pos:], []byte("//")):
			if i := bytes.IndexByte(p.src[p.pos:], '\n'); i >= 0 {
				p.pos += i + 1
			} else {
				p.pos = len(p.src)
			}
		case bytes.HasPrefix(p.src[p.pos:], []byte("/*")):
			i := bytes.Index(p.src[p.pos+2:], []byte("*/"))
			if i < 0 {
				return p.errorf("unterminated comment")
			}
			p.pos += i + 4
		default:
			return nil
		}
	}
	return nil
}

func (p *jsoncParser) value() (jsonValue, error) {
	if err := p.skip(); err != nil {
		return jsonValue{}, err
	}
	if p.pos >= len(p.src) {
		return jsonValue{}, p.errorf("unexpected end of the file")
	}
	switch p.src[p.pos] {
	case '{', '[':
		if p.depth++; p.depth > maxJSONDepth {
			return jsonValue{}, p.errorf("nested deeper than %d levels", maxJSONDepth)
		}
		defer func() { p.depth-- }()
		if p.src[p.pos] == '{' {
			return p.object()
		}
		return p.array()
	case '"':
		return p.string()
	}
	start := p.pos
	for p.pos < len(p.src) && !strings.ContainsRune(" \t\r\n,:]}/", rune(p.src[p.pos])) {
		p.pos++
	}
	if tok := p.src[start:p.pos]; len(tok) == 0 || !json.Valid(tok) || tok[0] == '{' || tok[0] == '[' || tok[0] == '"' {
		p.pos = start
		return jsonValue{}, p.errorf("expected a value, found %q", string(p.src[start:min(start+1, len(p.src))]))
	}
	return jsonValue{start: start, end: p.pos}, nil
}

func (p *jsoncParser) string() (jsonValue, error) {
	start := p.pos
	for p.pos++; p.pos < len(p.src); p.pos++ {
		switch p.src[p.pos] {
		case '\\':
			p.pos++
		case '\n':
			return jsonValue{}, p.errorf("line break inside a string")
		case '"':
			p.pos++
			v := jsonValue{start: start, end: p.pos, kind: '"'}
			if err := json.Unmarshal(p.src[start:p.pos], &v.str); err != nil {
				p.pos = start
				return jsonValue{}, p.errorf("invalid string: %v", err)
			}
			return v, nil
		}
	}
	return jsonValue{}, p.errorf("unterminated string")
}

func (p *jsoncParser) object() (jsonValue, error) {
	v := jsonValue{start: p.pos, kind: '{'}
	p.pos++
	for {
		if err := p.skip(); err != nil {
			return v, err
		}
		if p.pos < len(p.src) && p.src[p.pos] == '}' {
			p.pos++
			v.end = p.pos
			return v, nil
		}
		if p.pos >= len(p.src) || p.src[p.pos] != '"' {
			return v, p.errorf("expected a key in quotes or }")
		}
		key, err := p.string()
		if err != nil {
			return v, err
		}
		if _, dup := v.member(key.str); dup {
			p.pos = key.start
			return v, p.errorf("duplicate key %q", key.str)
		}
		if err := p.skip(); err != nil {
			return v, err
		}
		if p.pos >= len(p.src) || p.src[p.pos] != ':' {
			return v, p.errorf("expected : after the key %q", key.str)
		}
		p.pos++
		val, err := p.value()
		if err != nil {
			return v, err
		}
		v.members = append(v.members, jsonMember{key: key.str, keyStart: key.start, value: val})
		if err := p.next('}'); err != nil {
			return v, err
		}
	}
}

func (p *jsoncParser) array() (jsonValue, error) {
	v := jsonValue{start: p.pos, kind: '['}
	p.pos++
	for {
		if err := p.skip(); err != nil {
			return v, err
		}
		if p.pos < len(p.src) && p.src[p.pos] == ']' {
			p.pos++
			v.end = p.pos
			return v, nil
		}
		el, err := p.value()
		if err != nil {
			return v, err
		}
		v.elems = append(v.elems, el)
		if err := p.next(']'); err != nil {
			return v, err
		}
	}
}

// next passes the comma after a member or element; the closing bracket is left for the caller.
func (p *jsoncParser) next(closing byte) error {
	if err := p.skip(); err != nil {
		return err
	}
	switch {
	case p.pos < len(p.src) && p.src[p.pos] == ',':
		p.pos++
		return nil
	case p.pos < len(p.src) && p.src[p.pos] == closing:
		return nil
	}
	return p.errorf("expected , or %c", closing)
}

// decode is the value as Go data (maps, slices, strings, float64...), for comparing entries.
func (v jsonValue) decode(src []byte) any {
	switch v.kind {
	case '{':
		out := map[string]any{}
		for _, m := range v.members {
			out[m.key] = m.value.decode(src)
		}
		return out
	case '[':
		out := []any{}
		for _, e := range v.elems {
			out = append(out, e.decode(src))
		}
		return out
	case '"':
		return v.str
	}
	var out any
	_ = json.Unmarshal(src[v.start:v.end], &out)
	return out
}

// marshalIndent is json.MarshalIndent without HTML escaping (URLs keep their &).
func marshalIndent(v any, prefix, indent string) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent(prefix, indent)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// edit replaces src[start:end] with text.
type edit struct {
	start, end int
	text       string
}

// splicer collects edits to one document and renders new values in its style.
type splicer struct {
	src   []byte
	unit  string // one level of indentation, as the file uses it
	edits []edit
}

func newSplicer(src []byte, top jsonValue) *splicer {
	s := &splicer{src: src, unit: "  "}
	// The first member of the top object on a line of its own shows the file's indentation.
	if len(top.members) > 0 && s.line(top.members[0].keyStart) != s.line(top.start) {
		if ind := s.indentAt(top.members[0].keyStart); ind != "" {
			s.unit = strings.TrimPrefix(ind, s.indentAt(top.start))
		}
	}
	return s
}

// line is the 0-based line of an offset.
func (s *splicer) line(off int) int { return bytes.Count(s.src[:off], []byte("\n")) }

// indentAt is the leading whitespace of the line holding off.
func (s *splicer) indentAt(off int) string {
	begin := bytes.LastIndexByte(s.src[:off], '\n') + 1
	end := begin
	for end < len(s.src) && (s.src[end] == ' ' || s.src[end] == '\t') {
		end++
	}
	return string(s.src[begin:end])
}

// render is v as JSON whose lines after the first start with prefix; compact on one line when
// oneLine.
func (s *splicer) render(v any, prefix string, oneLine bool) (string, error) {
	if oneLine {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v); err != nil {
			return "", err
		}
		return strings.TrimSpace(buf.String()), nil
	}
	out, err := marshalIndent(v, prefix, s.unit)
	return string(out), err
}

// insert adds an item (an object member when key is not nil, else an array element) at the
// end of the container, indented like its siblings.
func (s *splicer) insert(container jsonValue, key *string, value any) error {
	return s.insertAll(container, []member{{value: value}}, key != nil, func(int) string { return *key })
}

// insertAll adds items at the end of the container in one edit, so that several land in
// order (and an empty container is filled once). keyed says they are object members, named
// by keyOf(i) (an item's own key when keyOf is nil).
func (s *splicer) insertAll(container jsonValue, items []member, keyed bool, keyOf func(int) string) error {
	var lastEnd, firstStart int
	n := len(container.members) + len(container.elems)
	if n > 0 {
		if container.kind == '{' {
			firstStart = container.members[0].keyStart
			lastEnd = container.members[n-1].value.end
		} else {
			firstStart = container.elems[0].start
			lastEnd = container.elems[n-1].end
		}
	}
	// texts renders the items; sep goes between two of them.
	texts := func(prefix, sep string, oneLine bool) (string, error) {
		var parts []string
		for i, it := range items {
			text, err := s.render(it.value, prefix, oneLine)
			if err != nil {
				return "", err
			}
			if keyed {
				name := it.key
				if keyOf != nil {
					name = keyOf(i)
				}
				k, _ := json.Marshal(name)
				text = string(k) + ": " + text
			}
			parts = append(parts, text)
		}
		return strings.Join(parts, sep), nil
	}
	switch {
	case n > 0 && s.line(firstStart) == s.line(container.start):
		// A container written on one line stays on one line.
		text, err := texts("", ", ", true)
		if err != nil {
			return err
		}
		s.edits = append(s.edits, edit{lastEnd, lastEnd, ", " + text})
	case n > 0:
		ind := s.indentAt(firstStart)
		text, err := texts(ind, ",\n"+ind, false)
		if err != nil {
			return err
		}
		s.edits = append(s.edits, edit{lastEnd, lastEnd, ",\n" + ind + text})
	default:
		outer := s.indentAt(container.start)
		text, err := texts(outer+s.unit, ",\n"+outer+s.unit, false)
		if err != nil {
			return err
		}
		body := "\n" + outer + s.unit + text + "\n" + outer
		inner := s.src[container.start+1 : container.end-1]
		if len(bytes.TrimSpace(inner)) == 0 {
			// Nothing but white space inside: the new items replace it.
			s.edits = append(s.edits, edit{container.start + 1, container.end - 1, body})
		} else {
			// Comments inside stay, after the new items.
			s.edits = append(s.edits, edit{container.start + 1, container.start + 1, body})
		}
	}
	return nil
}

// replace puts value in place of an existing one, indented like the line it starts on.
func (s *splicer) replace(old jsonValue, value any) error {
	text, err := s.render(value, s.indentAt(old.start), false)
	if err != nil {
		return err
	}
	s.edits = append(s.edits, edit{old.start, old.end, text})
	return nil
}

// apply returns the document with every edit made.
func (s *splicer) apply() []byte {
	sort.Slice(s.edits, func(i, j int) bool { return s.edits[i].start > s.edits[j].start })
	out := append([]byte{}, s.src...)
	for _, e := range s.edits {
		out = append(out[:e.start], append([]byte(e.text), out[e.end:]...)...)
	}
	return out
}

// errEntryExists is the refusal to overwrite an entry without --force.
var errEntryExists = errors.New("refusing to overwrite a different entry of the same name")

// wantEntry is one entry a command puts in a client's config file.
type wantEntry struct {
	name  string
	entry serverEntry
	// ours says why an existing entry of this name that differs may give way without --force
	// (it is one projectmcp wrote, or the same server defined directly), or "" when it may not.
	// nil means never.
	ours func(src []byte, old jsonValue) string
}

// entryResult is what became of one entry: "created" (with the file), "added", "unchanged"
// or "replaced" (why says on what grounds).
type entryResult struct {
	name, outcome, why string
	url                string
}

// decideEntry is what to do with one wanted entry, given the entry of that name the file has
// (exists, equal), why it may be replaced ("" when it is someone else's) and --force.
// refused is true when the file's entry must stay and the command must fail.
func decideEntry(exists, equal bool, ours string, force bool) (outcome, why string, refused bool) {
	switch {
	case !exists:
		return "added", "", false
	case equal:
		return "unchanged", "", false
	case ours != "":
		return "replaced", ours, false
	case force:
		return "replaced", "--force", false
	}
	return "", "", true
}

// projectFile is a file of the project folder that connect and adopt read and write: shown is
// its name as the user gave it (messages name it so), real the path its reads and writes use,
// resolved so that no symlink takes them out of the project folder.
type projectFile struct{ shown, real string }

// projectPath is the file rel of the project folder. A symlink on the way that leads out of
// the folder is refused rather than followed: the folder is often a cloned repository, whose
// links can point at any file of the user's (a .vscode linked to the user's own settings). A
// link that stays inside the folder is followed, so a file shared by two clients is written
// where it is and stays a link.
func projectPath(project, rel string) (projectFile, error) {
	shown := filepath.Join(project, rel)
	real, err := projectfs.Resolve(project, rel)
	var link *projectfs.LinkError
	switch {
	case errors.As(err, &link):
		return projectFile{}, fmt.Errorf("%s: refusing to read or write it: %w (%s); make it a real file or directory, or a link that stays in the project", shown, err, project)
	case err != nil:
		return projectFile{}, fmt.Errorf("%s: %w", shown, err)
	}
	return projectFile{shown: shown, real: real}, nil
}

// writeClientConfig merges the entries into the client's config file f, creating it when
// there is none, and says what became of each. An entry of a wanted name that differs is
// replaced when the wanted entry's ours allows it, or with force; otherwise nothing is written.
func writeClientConfig(f projectFile, format clientFormat, want []wantEntry, bearer, force bool) ([]entryResult, error) {
	src, err := os.ReadFile(f.real)
	exists := err == nil
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	out, results, err := mergeClientConfig(f.shown, src, exists, format, want, bearer, force)
	if err != nil || out == nil {
		return results, err
	}
	if !exists {
		if err := makeDir(filepath.Dir(f.real)); err != nil {
			return nil, err
		}
	}
	return results, writeFileAtomic(f.real, out, fileMode(f.real))
}

// mergeClientConfig is the client's config file (src, when exists) with the entries merged in,
// or nil when nothing changes; it writes nothing.
func mergeClientConfig(path string, src []byte, exists bool, format clientFormat, want []wantEntry, bearer, force bool) ([]byte, []entryResult, error) {
	if !exists {
		doc, err := format.snippet(want, bearer)
		if err != nil {
			return nil, nil, err
		}
		var results []entryResult
		for _, w := range want {
			results = append(results, entryResult{name: w.name, outcome: "created", url: w.entry.URL})
		}
		return append(doc, '\n'), results, nil
	}
	top, err := parseJSONC(src)
	if err != nil {
		return nil, nil, fmt.Errorf("%s:%v", path, err)
	}
	if top.kind != '{' {
		return nil, nil, fmt.Errorf("%s: the top level must be a JSON object", path)
	}
	s := newSplicer(src, top)
	results, err := s.putEntries(path, top, format.container, want, force)
	if err != nil {
		return nil, nil, err
	}
	if format.name == "vscode" && bearer {
		if err := s.addInput(top, path); err != nil {
			return nil, nil, err
		}
	}
	if len(s.edits) == 0 {
		return nil, results, nil
	}
	out := s.apply()
	if _, err := parseJSONC(out); err != nil {
		return nil, nil, fmt.Errorf("%s: merging the entries would break the file (%v); add them by hand", path, err)
	}
	return out, results, nil
}

// putEntries adds or replaces each wanted entry in the top object's container, refusing (with
// every refused entry named) before any edit when one may not be replaced.
func (s *splicer) putEntries(path string, top jsonValue, containerKey string, want []wantEntry, force bool) ([]entryResult, error) {
	container, found := top.member(containerKey)
	if found && container.value.kind != '{' {
		return nil, fmt.Errorf("%s: %q must be an object", path, containerKey)
	}
	var results []entryResult
	var refusals []string
	var added orderedObject
	for _, w := range want {
		old, exists := container.value.member(w.name)
		ours := ""
		if exists && w.ours != nil {
			ours = w.ours(s.src, old.value)
		}
		equal := exists && reflect.DeepEqual(old.value.decode(s.src), toGeneric(w.entry))
		outcome, why, refused := decideEntry(exists, equal, ours, force)
		switch {
		case refused:
			refusals = append(refusals, fmt.Sprintf("%q in %q is %s", w.name, containerKey, s.src[old.value.start:old.value.end]))
			continue
		case outcome == "added":
			added = append(added, member{w.name, w.entry})
		case outcome == "replaced":
			if err := s.replace(old.value, w.entry); err != nil {
				return nil, err
			}
		}
		results = append(results, entryResult{name: w.name, outcome: outcome, why: why, url: w.entry.URL})
	}
	if len(refusals) > 0 {
		return nil, fmt.Errorf("%s: %w (--force replaces it): %s", path, errEntryExists, strings.Join(refusals, "; "))
	}
	switch {
	case len(added) == 0:
		return results, nil
	case found:
		return results, s.insertAll(container.value, added, true, nil)
	}
	key := containerKey
	return results, s.insert(top, &key, added)
}

// addInput adds VS Code's token prompt to "inputs" unless an input of that id is there.
func (s *splicer) addInput(top jsonValue, path string) error {
	inputs, found := top.member("inputs")
	if !found {
		key := "inputs"
		return s.insert(top, &key, []vscodeInput{tokenInput})
	}
	if inputs.value.kind != '[' {
		return fmt.Errorf("%s: \"inputs\" must be an array", path)
	}
	for _, e := range inputs.value.elems {
		if id, ok := e.member("id"); ok && id.value.str == vscodeTokenInput {
			return nil
		}
	}
	return s.insert(inputs.value, nil, tokenInput)
}

// toGeneric is v as decoded JSON (maps and slices), for comparing with what a file holds.
func toGeneric(v any) any {
	data, _ := json.Marshal(v)
	var out any
	_ = json.Unmarshal(data, &out)
	return out
}

// writeFileAtomic replaces path by renaming a finished temporary file of the same directory
// over it, so an agent never reads half a file; the file and then the directory are synced,
// so after a crash the path holds the old content or the new, never an empty file.
func writeFileAtomic(path string, data []byte, perm fs.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // fails harmlessly once renamed
	if err := writeSynced(tmp, data, perm); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	return syncDir(filepath.Dir(path))
}

// makeDir creates dir (and its missing parents) for a file about to be written into it; a dir
// it creates is synced into its parent, so that the file written next survives a crash with it.
func makeDir(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return syncDir(filepath.Dir(dir))
}

// syncFile syncs a file or a directory to its disk (a test counts the syncs).
var syncFile = (*os.File).Sync

// writeSynced writes data to f, sets its mode, and syncs and closes it.
func writeSynced(f *os.File, data []byte, perm fs.FileMode) error {
	_, err := f.Write(data)
	if err == nil {
		err = f.Chmod(perm)
	}
	if err == nil {
		err = syncFile(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// syncDir makes a rename in dir durable. A file system that cannot sync a directory says
// EINVAL (or ENOTSUP); the rename then stands as the file system keeps it.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := syncFile(d); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOTSUP) {
		return fmt.Errorf("syncing %s after writing into it: %w", dir, err)
	}
	return nil
}
