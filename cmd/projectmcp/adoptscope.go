package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// Claude Code reads a server from three scopes: the project's .mcp.json ("project"), and two
// kept in the user's ~/.claude.json: "local", the servers of one project folder
// (projects[<folder>].mcpServers), and "user", those of every folder (the top-level
// mcpServers). adopt moves servers of any of them into .dsh/mcp.json.
var adoptScopes = []string{"project", "local", "user"}

// claudeUserFile is Claude Code's own file in the user's home, which holds the local and user
// scopes.
const claudeUserFile = ".claude.json"

// scopedSource is where the local and user scopes live: the user's ~/.claude.json.
func scopedSource() (projectFile, error) {
	home, err := os.UserHomeDir()
	if err != nil {
		return projectFile{}, fmt.Errorf("the local and user scopes are in ~/%s: %w", claudeUserFile, err)
	}
	shown := filepath.Join(home, claudeUserFile)
	// A linked ~/.claude.json (dotfiles kept elsewhere) is written where it points, so it stays a link.
	real, err := filepath.EvalSymlinks(shown)
	if err != nil {
		real = shown
	}
	return projectFile{shown: shown, real: real}, nil
}

// projectKeys are the keys ~/.claude.json may file the project folder under, most likely
// first: Claude Code names a folder by its working directory, which the system gives with
// links resolved; the folder as given comes next.
func projectKeys(project string) []string {
	abs, err := filepath.Abs(project)
	if err != nil {
		return nil
	}
	keys := []string{}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		keys = append(keys, real)
	}
	if !slices.Contains(keys, abs) {
		keys = append(keys, abs)
	}
	return keys
}

// scopeContainer is the object of a scope's entries in ~/.claude.json's top object, and the
// path to it as the report names it; found is false when the scope has none.
func scopeContainer(top jsonValue, scope, project string) (container jsonValue, where string, found bool, err error) {
	holder, where := top, "mcpServers"
	if scope == "local" {
		projects, ok := top.member("projects")
		if !ok || projects.value.kind != '{' {
			return jsonValue{}, "", false, nil
		}
		var folder jsonMember
		for _, key := range projectKeys(project) {
			if folder, ok = projects.value.member(key); ok {
				break
			}
		}
		if !ok || folder.value.kind != '{' {
			return jsonValue{}, "", false, nil
		}
		holder, where = folder.value, fmt.Sprintf("projects[%q].mcpServers", folder.key)
	}
	m, ok := holder.member("mcpServers")
	switch {
	case !ok:
		return jsonValue{}, where, false, nil
	case m.value.kind != '{':
		return jsonValue{}, where, false, fmt.Errorf("%s must be an object", where)
	}
	return m.value, where, true, nil
}

// scopeEntries are the server entries of a scope of ~/.claude.json (src).
func scopeEntries(path string, src []byte, scope, project string) ([]jsonMember, error) {
	top, err := parseJSONC(src)
	if err != nil {
		return nil, fmt.Errorf("%s:%v", path, err)
	}
	if top.kind != '{' {
		return nil, fmt.Errorf("%s: the top level must be a JSON object", path)
	}
	container, _, _, err := scopeContainer(top, scope, project)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return container.members, nil
}

// removeEntries is ~/.claude.json (src) without the named entries of a scope, every other
// byte as it was, or nil when none of them is there.
func removeEntries(path string, src []byte, scope, project string, names []string) ([]byte, error) {
	top, err := parseJSONC(src)
	if err != nil {
		return nil, fmt.Errorf("%s:%v", path, err)
	}
	container, _, found, err := scopeContainer(top, scope, project)
	if err != nil || !found {
		return nil, err
	}
	s := newSplicer(src, top)
	s.removeMembers(container, func(key string) bool { return slices.Contains(names, key) })
	if len(s.edits) == 0 {
		return nil, nil
	}
	out := s.apply()
	if _, err := parseJSONC(out); err != nil {
		return nil, fmt.Errorf("%s: removing the entries would break the file (%v); remove them by hand", path, err)
	}
	return out, nil
}

// removeMembers deletes the object's members that drop says, each with the separator that
// joins it to a kept one, so the kept members keep their lines and indentation as they are.
func (s *splicer) removeMembers(obj jsonValue, drop func(key string) bool) {
	ms := obj.members
	keptAfter := make([]bool, len(ms)+1) // keptAfter[i]: some member from i on stays
	for i := len(ms) - 1; i >= 0; i-- {
		keptAfter[i] = keptAfter[i+1] || !drop(ms[i].key)
	}
	if !keptAfter[0] {
		if len(ms) > 0 {
			s.edits = append(s.edits, edit{obj.start + 1, obj.end - 1, ""})
		}
		return
	}
	for i, m := range ms {
		switch {
		case !drop(m.key):
		case keptAfter[i+1]:
			// Up to the next member's key: this one, its comma and the white space after it.
			s.edits = append(s.edits, edit{m.keyStart, ms[i+1].keyStart, ""})
		default:
			// The last ones: from the end of the one before, taking the comma before this one.
			s.edits = append(s.edits, edit{ms[i-1].value.end, m.value.end, ""})
		}
	}
}

// scopeClashes are the moves the project's .mcp.json (src) has a server entry of the same name
// for, not pointing at projectmcp: adopting the local or user entry would make that project
// entry the one the agent reads under the name, so the entry stays until the project's is
// adopted first.
func scopeClashes(path string, format clientFormat, src []byte, moves []movedServer) ([]leftEntry, error) {
	if src == nil {
		return nil, nil
	}
	entries, err := clientEntries(path, format, src)
	if err != nil {
		return nil, err
	}
	var left []leftEntry
	for _, m := range moves {
		i := slices.IndexFunc(entries, func(e jsonMember) bool { return e.key == m.name })
		if i >= 0 && !pointsAtProjectmcp(entries[i].value) {
			left = append(left, leftEntry{m.name, fmt.Sprintf("%s defines a server of that name too: adopt it first (--scope project), then this one", path)})
		}
	}
	return left, nil
}
