package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/config"
	"github.com/dsh-dev/projectmcp/internal/share"
)

const adoptLong = `Moves the MCP servers an agent's project config file defines directly (a stdio command with
its args and env, or an http url with its headers) into the project's .dsh/mcp.json, and
points the file's entries at the servers' own projectmcp endpoints under the SAME names: the
agent keeps naming the tools as before (mcp__memory__read_graph in Claude Code), so its
permission rules and hooks keep matching.

  claude-code  .mcp.json          "mcpServers" (the default)
  vscode       .vscode/mcp.json   "servers"
  cursor       .cursor/mcp.json   "mcpServers"

--scope local or user (with claude-code) adopts from Claude Code's other scopes, kept in
~/.claude.json: "local" is projects[<the project folder>].mcpServers, "user" the top-level
mcpServers. The moved servers' entries go into the project's .mcp.json, pointing at their
endpoints. Claude Code prefers a local entry to the project's, so the local ones are removed
from ~/.claude.json, every other byte of it kept; the user scope's stay, as your other
folders use them, and the project's entry comes first. Each report line names the file and
scope the entry came from.

Without --write it writes nothing and prints the change of both files as a diff. --write
applies it: .dsh/mcp.json is created, or the servers are added to it; the client's file is
edited in place, every comment, other entry and its formatting kept. Entries that already
point at projectmcp are left as they are.

${VAR} references move as they are written, never expanded: the controller resolves them
from spec.secretRef's Secret. VS Code's and Cursor's ${env:VAR} becomes ${VAR}, and VS Code's
${input:id} (a value it prompts for) becomes ${ID}, so no value is copied. ${workspaceFolder}
becomes ${PROJECT_DIR}, the project folder, and ${userHome} ${USER_HOME}, your home: both
take their values where .dsh/mcp.json is read (a mirror for a cluster refuses ${USER_HOME},
its servers running on another machine). Their other variables cannot move without
resolving them. VS Code's
envFile becomes one ${NAME} in env per variable the file sets (the values stay in the file;
adopt prints the kubectl line that puts them in a Secret), and its dev is dropped. The keys
Claude Code's entries have beyond the server (timeout, request_timeout_ms, alwaysLoad,
headersHelper, oauth) and VS Code's sandboxEnabled and sandbox move as written. A server
known to keep state per client (a browser, Serena, sequential-thinking, filesystem) gets
"share": "session" written, so each session has a connection of its own, and a note says
why; an entry's own share is kept.

One entry that cannot move never stops the others: it stays in the client's file as it is,
and adopt says why, one line each. So does an entry whose env, headers, args or url hold a
value that looks like a credential written literally (.dsh/mcp.json is usually committed,
and its spec is readable by everyone with get on ProjectMCPs), unless --allow-literals; and
a server .dsh/mcp.json already has with another definition, naming both files (the same
definition is fine). adopt fails only when a file cannot be read or written.

The entries point at the ProjectMCP's endpoint (NAME, default the folder's name, as dev and
mirror name it), read from the cluster as connect does; while it exists without one, adopt
waits up to --wait (with --write, .dsh/mcp.json is written first, so a running
"projectmcp dev" or mirror applies it meanwhile). --endpoint gives the project's endpoint
instead. When there is none (no cluster, or no ProjectMCP yet), adopt writes .dsh/mcp.json
alone and leaves the client's file; once the project is served, "projectmcp connect --write"
points the entries at their endpoints (it replaces an entry that defines the very server
.dsh/mcp.json has). As with connect, the endpoint must be https://, or http:// on this
machine, unless --allow-insecure-http; and one read from status must be on the gateway
trusted for the cluster (--gateway-url, or the one the first --write meets; see connect).

Both files are read and written only inside the project folder: a symlink on the way that
leads out of it (a .vscode linked to the user's own settings) is refused, naming it and
where it points; one that stays inside is followed, and stays a link.`

// adoptOptions are the flags of `projectmcp adopt`.
type adoptOptions struct {
	client   string
	project  string
	write    bool
	endpoint string
	auth     string
	wait     time.Duration
	// insecureHTTP admits a plain http:// endpoint on another machine.
	insecureHTTP bool
	// gatewayURL is the gateway the user trusts (--gateway-url), or "".
	gatewayURL string
	// allowLiterals moves entries holding values that look like credentials written literally.
	allowLiterals bool
	// scope is the Claude Code scope whose servers move: project, local or user.
	scope string
}

func newAdoptCmd(g *globalFlags, stdout, stderr io.Writer) *cobra.Command {
	o := adoptOptions{client: "claude-code", project: ".", auth: "auto", wait: defaultEndpointWait, scope: "project"}
	cmd := &cobra.Command{
		Use:   "adopt [NAME]",
		Short: "Move an agent config's servers into .dsh/mcp.json, keeping their entry names",
		Long:  adoptLong,
		Example: `  # what adopting this folder's .mcp.json would change (writes nothing)
  projectmcp adopt

  # do it
  projectmcp adopt --write

  # VS Code's .vscode/mcp.json, with the endpoint given rather than read from the cluster
  projectmcp adopt --client vscode --endpoint http://127.0.0.1:8484/projects/default/shop/mcp --write`,
		Args:              positional(nil, "NAME"),
		ValidArgsFunction: completeProjects(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			format, err := lookupClient(o.client)
			switch {
			case err != nil:
				return err
			case format.file == "":
				return usageErrorf("--client %s has no config file to adopt from", o.client)
			case !slices.Contains(adoptScopes, o.scope):
				return usageErrorf("--scope must be project, local or user, not %q", o.scope)
			case o.scope != "project" && format.name != "claude-code":
				return usageErrorf("--scope %s is Claude Code's: it goes with --client claude-code", o.scope)
			case !slices.Contains([]string{"auto", "none", "bearer"}, o.auth):
				return usageErrorf("--auth must be auto, none or bearer, not %q", o.auth)
			case o.endpoint != "" && !isProjectEndpoint(o.endpoint):
				return usageErrorf("--endpoint must be a project's endpoint, http(s)://HOST/projects/NAMESPACE/NAME/mcp, not %q", o.endpoint)
			case o.endpoint != "":
				if err := checkEndpoint(o.endpoint, o.insecureHTTP); err != nil {
					return usageErrorf("--endpoint: %v", err)
				}
			}
			if err := checkGatewayURL(o.gatewayURL); err != nil {
				return err
			}
			return adopt(cmd.Context(), g, args, format, o, stdout, stderr)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.client, "client", o.client, "the agent client whose file is adopted: claude-code, vscode, cursor")
	fs.StringVar(&o.project, "project", o.project, "project folder: where both files are, and whose name NAME defaults to")
	fs.BoolVar(&o.write, "write", false, "write both files (without it, print their diff and write nothing)")
	fs.StringVar(&o.endpoint, "endpoint", "", "the project's endpoint (…/projects/NAMESPACE/NAME/mcp), in place of the ProjectMCP's status.endpoint")
	fs.DurationVar(&o.wait, "wait", o.wait, "how long to wait for the ProjectMCP's status.endpoint when it exists without one yet")
	fs.StringVar(&o.auth, "auth", o.auth, `"auto": ask the endpoint whether it checks bearer tokens; "none"; "bearer": add the Authorization header`)
	fs.BoolVar(&o.insecureHTTP, insecureHTTPFlag, false, insecureHTTPUsage)
	fs.StringVar(&o.gatewayURL, gatewayURLFlag, "", gatewayURLUsage)
	fs.StringVar(&o.scope, "scope", o.scope, `Claude Code's scope to adopt: "project" (.mcp.json), "local" (~/.claude.json's entry for the project folder) or "user" (~/.claude.json's own)`)
	fs.BoolVar(&o.allowLiterals, "allow-literals", false, "move entries whose env, headers, args or url hold values that look like credentials written literally (they are left otherwise)")
	_ = cmd.RegisterFlagCompletionFunc("client", cobra.FixedCompletions([]string{"claude-code", "vscode", "cursor"}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("scope", cobra.FixedCompletions(adoptScopes, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("auth", cobra.FixedCompletions([]string{"auto", "none", "bearer"}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.MarkFlagDirname("project")
	return cmd
}

// gatewayPath is the path of a projectmcp endpoint: a project's, or one server's.
var gatewayPath = regexp.MustCompile(`/projects/[^/]+/[^/]+/(servers/[^/]+/)?mcp$`)

func isProjectEndpoint(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" &&
		gatewayPath.MatchString(u.Path) && !strings.Contains(u.Path, "/servers/")
}

// pointsAtProjectmcp is whether a client entry's url is a projectmcp endpoint.
func pointsAtProjectmcp(v jsonValue) bool {
	u, ok := v.member("url")
	if !ok || u.value.kind != '"' {
		return false
	}
	parsed, err := url.Parse(u.value.str)
	return err == nil && gatewayPath.MatchString(parsed.Path)
}

// movedServer is one server adopt takes from the client's file.
type movedServer struct {
	name   string
	value  any // the definition as .dsh/mcp.json holds it, keys in the file's order
	server v1alpha1.MCPServer
}

// clientRef matches a ${...} reference of a client's config value.
var clientRef = regexp.MustCompile(`\$\{([^}]*)\}`)

// dshReferences is s with the client's references in .dsh/mcp.json's form. Claude Code's
// ${VAR} and ${VAR:-default} are .dsh/mcp.json's own and stay as written. VS Code and Cursor
// read the environment only as ${env:VAR}, which becomes ${VAR}; VS Code's ${input:id}, a
// secret it prompts for, becomes ${ID}, a variable of the Secret spec.secretRef names, so the
// value is never copied. ${workspaceFolder} (the folder open, the project's) and ${userHome}
// become the variables .dsh/mcp.json gives those meanings (placeVariables). Their other
// variables (${workspaceFolderBasename}, ${file}...) have no meaning in .dsh/mcp.json and
// cannot be moved without resolving them.
func dshReferences(format clientFormat, entry, s string) (string, error) {
	if format.name == "claude-code" {
		return s, nil
	}
	var bad error
	out := clientRef.ReplaceAllStringFunc(s, func(ref string) string {
		inner := ref[2 : len(ref)-1]
		if name, ok := strings.CutPrefix(inner, "env:"); ok {
			return "${" + name + "}"
		}
		if id, ok := strings.CutPrefix(inner, "input:"); ok {
			return "${" + inputVariable(id) + "}"
		}
		if v, ok := placeVariables[inner]; ok {
			return "${" + v + "}"
		}
		if bad == nil {
			bad = fmt.Errorf("it uses %s (%s): %s has no such variable, and only ${env:VAR}, ${input:id}, ${workspaceFolder} and ${userHome} move; "+
				"write the value the server should get instead", ref, clientVariable(format, inner), config.DefaultPath)
		}
		return ref
	})
	return out, bad
}

// placeVariables are the variables of VS Code and Cursor that .dsh/mcp.json has with the same
// meaning, given by where the file is read (config.ExpandPlace).
var placeVariables = map[string]string{
	"workspaceFolder": config.ProjectDirVar,
	"userHome":        config.UserHomeVar,
}

// clientVariable says what one of a client's own variables stands for, to say why it does not
// move.
func clientVariable(format clientFormat, name string) string {
	if strings.HasPrefix(name, "workspaceFolder") {
		return "a part of the folder " + format.name + " has open; " + config.DefaultPath + " has ${" + config.ProjectDirVar + "} for the folder itself"
	}
	return "a variable of " + format.name
}

// inputVariable is the variable an ${input:id} becomes: the id in capitals, with every
// character a variable name cannot hold as '_' ("github-token" becomes GITHUB_TOKEN).
func inputVariable(id string) string {
	b := []byte(strings.ToUpper(id))
	for i, c := range b {
		if c != '_' && (c < 'A' || c > 'Z') && (c < '0' || c > '9') {
			b[i] = '_'
		}
	}
	if len(b) == 0 || (b[0] >= '0' && b[0] <= '9') {
		b = append([]byte{'_'}, b...)
	}
	return string(b)
}

// dshValue is a JSON value of the client's file as .dsh/mcp.json holds it: objects keep their
// keys' order, strings have their references translated, the rest is copied as written.
func dshValue(format clientFormat, entry string, src []byte, v jsonValue) (any, error) {
	switch v.kind {
	case '{':
		obj := orderedObject{}
		for _, m := range v.members {
			val, err := dshValue(format, entry, src, m.value)
			if err != nil {
				return nil, err
			}
			obj = append(obj, member{m.key, val})
		}
		return obj, nil
	case '[':
		arr := []any{}
		for _, e := range v.elems {
			val, err := dshValue(format, entry, src, e)
			if err != nil {
				return nil, err
			}
			arr = append(arr, val)
		}
		return arr, nil
	case '"':
		return dshReferences(format, entry, v.str)
	}
	return json.RawMessage(src[v.start:v.end]), nil
}

// directServer reads a client's entry as the server it defines, by .dsh/mcp.json's rules.
func directServer(format clientFormat, name string, src []byte, v jsonValue) (movedServer, error) {
	s, _, err := adoptEntry(adoptPlan{format: format}, name, src, v)
	return s, err
}

// adoptEntry reads a client's entry as the server it defines, by .dsh/mcp.json's rules, with
// the notes of what the entry held that does not move as written (VS Code's dev, its envFile).
func adoptEntry(plan adoptPlan, name string, src []byte, v jsonValue) (s movedServer, notes []string, err error) {
	own, clientOnly := splitClientOnly(v)
	value, err := dshValue(plan.format, name, src, own)
	if err != nil {
		return movedServer{}, nil, err
	}
	if obj, ok := value.(orderedObject); ok && len(clientOnly) > 0 {
		if value, notes, err = clientOnlyKeys(plan, obj, clientOnly); err != nil {
			return movedServer{}, nil, err
		}
	}
	server, err := parseServer(name, value)
	if err != nil {
		return movedServer{}, nil, err
	}
	if obj, ok := value.(orderedObject); ok {
		var note string
		if value, note = chooseShare(obj, &server); note != "" {
			notes = append(notes, note)
		}
	}
	notes = append(notes, referenceNotes(plan.format, movedText(src, own))...)
	notes = append(notes, carriedNotes(server)...)
	return movedServer{name: name, value: value, server: server}, notes, nil
}

// chooseShare writes the sharing scope projectmcp would choose for a server whose entry sets
// none, when that is not the default project (a server the stateful table knows), so that
// .dsh/mcp.json declares it; the note says why. An entry's own share is kept as written.
func chooseShare(obj orderedObject, s *v1alpha1.MCPServer) (orderedObject, string) {
	scope, why := share.Effective(*s)
	if s.Share != "" || scope == v1alpha1.ShareProject {
		return obj, ""
	}
	s.Share = scope
	return append(obj, member{"share", string(scope)}),
		fmt.Sprintf("\"share\": %q written: %s, so each session gets a connection of its own (\"share\": \"project\" shares one)", scope, why)
}

// movedText is the text of what moves of an entry: its members but the client's own ones.
func movedText(src []byte, own jsonValue) string {
	if own.kind != '{' {
		return string(src[own.start:own.end])
	}
	var b strings.Builder
	for _, m := range own.members {
		b.Write(src[m.value.start:m.value.end])
	}
	return b.String()
}

// referenceNotes say which variable each of VS Code's ${input:id} became, whose value the
// user puts in the Secret (VS Code keeps it in its own secret storage, out of reach), and
// which each ${workspaceFolder} and ${userHome} became, and where those have a value.
func referenceNotes(format clientFormat, entry string) []string {
	if format.name == "claude-code" {
		return nil
	}
	var notes []string
	for _, m := range clientRef.FindAllStringSubmatch(entry, -1) {
		note := referenceNote(m[0], m[1])
		if note != "" && !slices.Contains(notes, note) {
			notes = append(notes, note)
		}
	}
	return notes
}

// referenceNote is the note on one client reference ref (inner: what is between its braces),
// or "".
func referenceNote(ref, inner string) string {
	if id, ok := strings.CutPrefix(inner, "input:"); ok {
		return fmt.Sprintf("%s became ${%s}: put its value in the Secret spec.secretRef names", ref, inputVariable(id))
	}
	switch placeVariables[inner] {
	case config.ProjectDirVar:
		return fmt.Sprintf("%s became ${%s}: the project folder (spec.project)", ref, config.ProjectDirVar)
	case config.UserHomeVar:
		return fmt.Sprintf("%s became ${%s}: your home under projectmcp dev; a mirror for a cluster refuses it, as its servers run on another machine",
			ref, config.UserHomeVar)
	}
	return ""
}

// carriedNotes say which of a server's client keys move into the spec without the
// controller acting on them yet (config.Unacted), so the user knows what the agent did that
// the gateway does not.
func carriedNotes(s v1alpha1.MCPServer) []string {
	var notes []string
	for _, n := range config.Unacted(&v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{s}}) {
		notes = append(notes, strings.TrimPrefix(n, fmt.Sprintf("server %q: ", s.Name)))
	}
	return notes
}

// splitClientOnly takes out of an entry the keys that concern the client alone: VS Code's
// "dev" and "envFile", whose values are the client's and not the server's.
func splitClientOnly(v jsonValue) (own jsonValue, clientOnly []jsonMember) {
	if v.kind != '{' {
		return v, nil
	}
	own = v
	own.members = nil
	for _, m := range v.members {
		if m.key == "dev" || m.key == "envFile" {
			clientOnly = append(clientOnly, m)
		} else {
			own.members = append(own.members, m)
		}
	}
	return own, clientOnly
}

// clientOnlyKeys gives the client's own keys their meaning here: "dev" (VS Code's watch and
// debug loop of a server it runs) is dropped, and "envFile" becomes one ${NAME} in "env" per
// variable the file sets, so the values stay in the file and never reach .dsh/mcp.json or
// the cluster.
func clientOnlyKeys(plan adoptPlan, obj orderedObject, clientOnly []jsonMember) (orderedObject, []string, error) {
	var notes []string
	for _, m := range clientOnly {
		if m.key == "dev" {
			notes = append(notes, "its \"dev\" (VS Code's watch and debug of a server it runs) is dropped: projectmcp runs the server")
			continue
		}
		if m.value.kind != '"' {
			return nil, nil, errors.New("its envFile is not a string")
		}
		file, names, err := envFileNames(plan.project, m.value.str)
		if err != nil {
			return nil, nil, err
		}
		obj = withEnvReferences(obj, names)
		notes = append(notes, fmt.Sprintf("its envFile's variables (%s) move as ${NAME} references; their values stay in %s: "+
			"kubectl create secret generic NAME --from-env-file=%s holds them for the controller (spec.secretRef names it)",
			strings.Join(names, ", "), file, file))
	}
	return obj, notes, nil
}

// withEnvReferences adds NAME: "${NAME}" to an entry's env for each name it does not set.
func withEnvReferences(obj orderedObject, names []string) orderedObject {
	i := slices.IndexFunc(obj, func(m member) bool { return m.key == "env" })
	if i < 0 {
		obj = append(obj, member{"env", orderedObject{}})
		i = len(obj) - 1
	}
	env, _ := obj[i].value.(orderedObject)
	for _, n := range names {
		if !slices.ContainsFunc(env, func(m member) bool { return m.key == n }) {
			env = append(env, member{n, "${" + n + "}"})
		}
	}
	obj[i].value = env
	return obj
}

// envFileNames are the variable names an env file sets, in its order, and the file as shown.
// The file is read only inside the project folder; VS Code's ${workspaceFolder} is that folder.
func envFileNames(project, file string) (string, []string, error) {
	rel := strings.TrimPrefix(strings.TrimPrefix(file, "${workspaceFolder}"), "/")
	if rel == "" || filepath.IsAbs(rel) || strings.Contains(rel, "${") || project == "" {
		return "", nil, fmt.Errorf("its envFile %q is not a file of the project folder", file)
	}
	path, err := projectPath(project, rel)
	if err != nil {
		return "", nil, err
	}
	data, err := os.ReadFile(path.real)
	if err != nil {
		return "", nil, fmt.Errorf("its envFile cannot be read: %w", err)
	}
	return path.shown, parseEnvNames(string(data)), nil
}

// parseEnvNames are the names of a dotenv file's NAME=value lines (an "export " before the
// name is allowed); comments, blank lines and lines without a valid name are skipped.
func parseEnvNames(text string) []string {
	var names []string
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		name, _, ok := strings.Cut(strings.TrimPrefix(line, "export "), "=")
		name = strings.TrimSpace(name)
		if !ok || strings.HasPrefix(line, "#") || !envName.MatchString(name) || slices.Contains(names, name) {
			continue
		}
		names = append(names, name)
	}
	return names
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// parseServer checks one definition by .dsh/mcp.json's reader, as the mirror will read it.
func parseServer(name string, value any) (v1alpha1.MCPServer, error) {
	doc, err := json.Marshal(orderedObject{{"mcpServers", orderedObject{{name, value}}}})
	if err != nil {
		return v1alpha1.MCPServer{}, err
	}
	spec, err := config.Parse(config.DefaultPath, doc)
	var list config.ErrorList
	if errors.As(err, &list) {
		var msgs []string
		for _, e := range list {
			msgs = append(msgs, e.Msg)
		}
		return v1alpha1.MCPServer{}, fmt.Errorf("%s would refuse it: %s", config.DefaultPath, strings.Join(msgs, "; "))
	}
	if err != nil {
		return v1alpha1.MCPServer{}, err
	}
	return spec.Servers[0], nil
}

// sameServer is whether two definitions reach the same server the same way (what the
// command, url, env and headers say; not whether it is disabled nor its tool filter).
func sameServer(a, b v1alpha1.MCPServer) bool {
	return reflect.DeepEqual(toGeneric(a.Stdio), toGeneric(b.Stdio)) && reflect.DeepEqual(toGeneric(a.HTTP), toGeneric(b.HTTP))
}

// clientEntries are the server entries of a client's config file.
func clientEntries(path string, format clientFormat, src []byte) ([]jsonMember, error) {
	top, err := parseJSONC(src)
	if err != nil {
		return nil, fmt.Errorf("%s:%v", path, err)
	}
	if top.kind != '{' {
		return nil, fmt.Errorf("%s: the top level must be a JSON object", path)
	}
	container, ok := top.member(format.container)
	if !ok {
		return nil, nil
	}
	if container.value.kind != '{' {
		return nil, fmt.Errorf("%s: %q must be an object", path, format.container)
	}
	return container.value.members, nil
}

// adoptPlan is what deciding an entry's move depends on besides the entry.
type adoptPlan struct {
	format  clientFormat
	project string
	// allowLiterals moves entries whose values look like credentials written literally.
	allowLiterals bool
	// scope is Claude Code's scope the entries are taken from (adoptScopes).
	scope string
}

// scoped is whether the entries come from ~/.claude.json rather than the project's file.
func (p adoptPlan) scoped() bool { return p.scope != "" && p.scope != "project" }

// leftEntry is a client entry adopt leaves in the client's file, and why.
type leftEntry struct{ name, why string }

// entryNote is something one moved entry held that did not move as written.
type entryNote struct{ name, note string }

// planMoves sorts a client's entries into the servers to move and those left in the client's
// file, each with why: one entry that cannot move never stops the others.
func planMoves(plan adoptPlan, src []byte, entries []jsonMember) (moves []movedServer, left []leftEntry, notes []entryNote) {
	for _, m := range entries {
		if pointsAtProjectmcp(m.value) {
			left = append(left, leftEntry{m.key, "it points at projectmcp already"})
			continue
		}
		s, ns, err := adoptEntry(plan, m.key, src, m.value)
		if err == nil && !plan.allowLiterals {
			err = literalsRefusal(s.server)
		}
		if err != nil {
			left = append(left, leftEntry{m.key, err.Error()})
			continue
		}
		moves = append(moves, s)
		for _, n := range ns {
			notes = append(notes, entryNote{m.key, n})
		}
	}
	return moves, left, notes
}

// literalsRefusal is why a server does not move while it holds values that look like
// credentials written literally: .dsh/mcp.json is usually committed, and the mirror copies it
// into a spec everyone with get on ProjectMCPs reads.
func literalsRefusal(s v1alpha1.MCPServer) error {
	found := literalSecrets(s)
	if len(found) == 0 {
		return nil
	}
	return fmt.Errorf("it holds what looks like a credential written literally (%s): write it as a ${VAR} reference, resolved from the Secret spec.secretRef names, "+
		"then adopt again (--allow-literals moves it as it is)", strings.Join(found, ", "))
}

// dshResult is what became of one moved server in .dsh/mcp.json.
type dshResult struct {
	name     string
	outcome  string // "added", or "unchanged" when .dsh/mcp.json has it already
	disabled bool   // .dsh/mcp.json has it, disabled: it has no endpoint
}

// mergeDsh is .dsh/mcp.json (src, when exists) with the moved servers, or nil when nothing
// changes. A server it has with another definition is a conflict: that entry is left in the
// client's file, named with both files, and the others move.
func mergeDsh(path, clientPath string, src []byte, exists bool, moves []movedServer) ([]byte, []dshResult, []leftEntry, error) {
	have := map[string]v1alpha1.MCPServer{}
	if exists {
		spec, err := config.Parse(path, src)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("%s must be valid before servers are added to it:\n%w", path, err)
		}
		for _, s := range spec.Servers {
			have[s.Name] = s
		}
	}
	var results []dshResult
	var added orderedObject
	var conflicts []leftEntry
	for _, m := range moves {
		old, ok := have[m.name]
		switch {
		case !ok:
			added = append(added, member{m.name, m.value})
			results = append(results, dshResult{name: m.name, outcome: "added"})
		case sameServer(old, m.server):
			results = append(results, dshResult{name: m.name, outcome: "unchanged", disabled: old.Disabled})
		default:
			conflicts = append(conflicts, leftEntry{m.name, fmt.Sprintf("server %q is defined differently in %s and in %s: make them the same, or rename one, then adopt again", m.name, clientPath, path)})
		}
	}
	if len(added) == 0 {
		return nil, results, conflicts, nil
	}
	out, err := spliceDsh(src, exists, added)
	if err != nil {
		return nil, nil, nil, err
	}
	if _, err := config.Parse(path, out); err != nil {
		return nil, nil, nil, fmt.Errorf("adding the servers would make %s invalid:\n%w", path, err)
	}
	return out, results, conflicts, nil
}

// spliceDsh adds servers to .dsh/mcp.json's "mcpServers" as text, keeping the rest as it is,
// or makes the file.
func spliceDsh(src []byte, exists bool, added orderedObject) ([]byte, error) {
	if !exists {
		doc, err := marshalIndent(orderedObject{{"mcpServers", added}}, "", "  ")
		return append(doc, '\n'), err
	}
	top, err := parseJSONC(src)
	if err != nil {
		return nil, err
	}
	s := newSplicer(src, top)
	servers, _ := top.member("mcpServers") // config.Parse has seen it is there, an object
	if err := s.insertAll(servers.value, added, true, nil); err != nil {
		return nil, err
	}
	return s.apply(), nil
}

// readOptional reads a file that may not exist.
func readOptional(path string) ([]byte, bool, error) {
	src, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	return src, err == nil, err
}

// adoption is what adopt changes: both files' contents before and after (nil after: no change).
type adoption struct {
	dsh, client               projectFile
	dshBefore, dshAfter       []byte
	clientBefore, clientAfter []byte
	dshResults                []dshResult
	clientResults             []entryResult
	left                      []leftEntry
	notes                     []entryNote
	moves                     []movedServer
	// The local and user scopes' entries come from ~/.claude.json (source), whose moved
	// entries are removed once the project's .mcp.json points at their endpoints.
	plan                      adoptPlan
	source                    projectFile
	sourceBefore, sourceAfter []byte
	clientExists              bool
}

// from names where the entries come from, with their scope when it is not the project's.
func (a *adoption) from() string {
	if !a.plan.scoped() {
		return a.client.shown
	}
	return fmt.Sprintf("%s (%s scope)", a.source.shown, a.plan.scope)
}

// planAdoption reads both files and decides the .dsh/mcp.json side; the client's side needs
// the endpoint (planClient).
func planAdoption(plan adoptPlan) (*adoption, error) {
	project, format := plan.project, plan.format
	a := &adoption{plan: plan}
	var err error
	if a.client, err = projectPath(project, format.file); err != nil {
		return nil, err
	}
	if a.dsh, err = projectPath(project, config.DefaultPath); err != nil {
		return nil, err
	}
	src, entries, err := a.readEntries()
	if err != nil {
		return nil, err
	}
	a.moves, a.left, a.notes = planMoves(plan, src, entries)
	if plan.scoped() {
		clashes, err := scopeClashes(a.client.shown, format, a.clientBefore, a.moves)
		if err != nil {
			return nil, err
		}
		a.dropMoves(clashes)
	}
	dsh, dshExists, err := readOptional(a.dsh.real)
	if err != nil {
		return nil, err
	}
	a.dshBefore = dsh
	var conflicts []leftEntry
	a.dshAfter, a.dshResults, conflicts, err = mergeDsh(a.dsh.shown, a.from(), dsh, dshExists, a.moves)
	a.dropMoves(conflicts)
	return a, err
}

// dropMoves leaves the entries named in the file they come from, each with why.
func (a *adoption) dropMoves(left []leftEntry) {
	for _, l := range left {
		a.moves = slices.DeleteFunc(a.moves, func(m movedServer) bool { return m.name == l.name })
	}
	a.left = append(a.left, left...)
}

// readEntries reads the file the entries come from and returns it with its entries: the
// project's client file, or ~/.claude.json's part of the scope adopted (the project's
// .mcp.json is then read too, as the file the moved entries are pointed from).
func (a *adoption) readEntries() ([]byte, []jsonMember, error) {
	if !a.plan.scoped() {
		src, err := readSource(a.client, "--client picks another client's file, --project another folder")
		if err != nil {
			return nil, nil, err
		}
		a.clientBefore, a.clientExists = src, true
		entries, err := clientEntries(a.client.shown, a.plan.format, src)
		return src, entries, err
	}
	var err error
	if a.clientBefore, a.clientExists, err = readOptional(a.client.real); err != nil {
		return nil, nil, err
	}
	if a.source, err = scopedSource(); err != nil {
		return nil, nil, err
	}
	src, err := readSource(a.source, "Claude Code keeps its local and user scopes there")
	if err != nil {
		return nil, nil, err
	}
	a.sourceBefore = src
	entries, err := scopeEntries(a.source.shown, src, a.plan.scope, a.plan.project)
	return src, entries, err
}

// readSource reads the file entries are adopted from; its absence is an error saying hint.
func readSource(f projectFile, hint string) ([]byte, error) {
	src, ok, err := readOptional(f.real)
	switch {
	case err != nil:
		return nil, err
	case !ok:
		return nil, fmt.Errorf("%s does not exist: nothing to adopt (%s)", f.shown, hint)
	}
	return src, nil
}

// planClient decides the client's side: each moved server's entry points at its endpoint
// under the project's, under the same name (one disabled in .dsh/mcp.json has none: it stays).
func (a *adoption) planClient(format clientFormat, projectEndpoint string, bearer bool) error {
	disabled := map[string]bool{}
	for _, r := range a.dshResults {
		disabled[r.name] = r.disabled
	}
	var want []wantEntry
	var pointed []string
	for _, m := range a.moves {
		if disabled[m.name] {
			continue
		}
		e := clientHints(format, m.server, format.entry(v1alpha1.ServerEndpoint(projectEndpoint, m.name), bearer))
		want = append(want, wantEntry{name: m.name, entry: e, ours: a.givesWay})
		pointed = append(pointed, m.name)
	}
	var err error
	a.clientAfter, a.clientResults, err = mergeClientConfig(a.client.shown, a.clientBefore, a.clientExists, format, want, bearer, false)
	if err != nil || a.plan.scope != "local" {
		return err
	}
	a.sourceAfter, err = removeEntries(a.source.shown, a.sourceBefore, a.plan.scope, a.plan.project, pointed)
	return err
}

// givesWay says why the client file's entry of a moved server's name may be replaced by one
// pointing at its endpoint: in the project scope it is the entry moved; adopting another
// scope, the project's file only has one of that name pointing at projectmcp already
// (scopeClashes left the others).
func (a *adoption) givesWay(src []byte, old jsonValue) string {
	if !a.plan.scoped() {
		return "moved to " + config.DefaultPath
	}
	if pointsAtProjectmcp(old) {
		return "it pointed at projectmcp"
	}
	return ""
}

func adopt(ctx context.Context, g *globalFlags, args []string, format clientFormat, o adoptOptions, stdout, stderr io.Writer) error {
	a, err := planAdoption(adoptPlan{format: format, project: o.project, allowLiterals: o.allowLiterals, scope: o.scope})
	if err != nil {
		return err
	}
	if len(a.moves) == 0 {
		reportLeft(stdout, a)
		fmt.Fprintf(stdout, "%s defines no server that can move: nothing to adopt.\n", a.from())
		return nil
	}
	if o.write && a.dshAfter != nil {
		if err := writeDsh(a.dsh.real, a.dshAfter); err != nil {
			return err
		}
	}
	endpoint, why := adoptEndpoint(ctx, g, args, o, stderr)
	if endpoint != "" {
		if err := checkEndpoint(endpoint, o.insecureHTTP); err != nil {
			return fmt.Errorf("%s left as it is, its entries not pointed at the project: %w", a.client.shown, err)
		}
		if err := holdAdoptEndpoint(g, args, o, a, endpoint, stderr); err != nil {
			return fmt.Errorf("%s left as it is, its entries not pointed at the project: %w", a.client.shown, err)
		}
		if err := a.planClient(format, endpoint, wantsBearer(ctx, o.auth, endpoint, stderr)); err != nil {
			return err
		}
	}
	if !o.write {
		printAdoptionDiff(stdout, a)
	} else if err := a.writeClient(); err != nil {
		return err
	}
	reportAdoption(stdout, a, o.write)
	if endpoint == "" {
		fmt.Fprintf(stdout, "%s left as it is: %s. Once the project is served (projectmcp dev, or mirror and a controller), "+
			"\"projectmcp connect --write\" points its entries at their endpoints.\n", a.from(), why)
	}
	return nil
}

// writeClient writes the client's file, then removes the moved entries from ~/.claude.json:
// cut off in between, the agent has a server twice, never none.
func (a *adoption) writeClient() error {
	if a.clientAfter != nil {
		if !a.clientExists {
			if err := makeDir(filepath.Dir(a.client.real)); err != nil {
				return err
			}
		}
		if err := writeFileAtomic(a.client.real, a.clientAfter, fileMode(a.client.real)); err != nil {
			return err
		}
	}
	if a.sourceAfter == nil {
		return nil
	}
	return writeFileAtomic(a.source.real, a.sourceAfter, fileMode(a.source.real))
}

// adoptEndpoint is the project's endpoint, or "" and why there is none. Without a cluster to
// ask, adopt still moves the servers: the endpoint is then connect's to find later.
func adoptEndpoint(ctx context.Context, g *globalFlags, args []string, o adoptOptions, stderr io.Writer) (string, string) {
	if o.endpoint != "" {
		return o.endpoint, ""
	}
	key, err := connectTarget(g, o.project, args)
	if err != nil {
		return "", fmt.Sprintf("no cluster to read the project's endpoint from (%v)", err)
	}
	c, err := g.client()
	if err != nil {
		return "", fmt.Sprintf("no cluster to read projectmcp %s from (%v)", key, err)
	}
	obj, err := awaitProject(ctx, c, key, o.wait, true, stderr)
	switch {
	case err != nil:
		return "", err.Error()
	case obj == nil:
		return "", fmt.Sprintf("projectmcp %s does not exist yet", key)
	}
	return obj.Status.Endpoint, ""
}

// holdAdoptEndpoint holds the endpoints adopt would write, under one read from status, to the
// cluster's trusted gateway, as connect does; one given with --endpoint is the user's own word.
func holdAdoptEndpoint(g *globalFlags, args []string, o adoptOptions, a *adoption, endpoint string, stderr io.Writer) error {
	if o.endpoint != "" {
		return nil
	}
	key, err := connectTarget(g, o.project, args)
	if err != nil {
		return err
	}
	trust, err := newGatewayTrust(g, o.gatewayURL, o.write)
	if err != nil {
		return err
	}
	var targets []endpointEntry
	for _, m := range a.moves {
		targets = append(targets, endpointEntry{name: m.name, url: v1alpha1.ServerEndpoint(endpoint, m.name), field: projectEndpointField})
	}
	return trust.hold(key, targets, stderr)
}

// writeDsh writes .dsh/mcp.json whole, so the mirror never reads half of it.
func writeDsh(path string, data []byte) error {
	if err := makeDir(filepath.Dir(path)); err != nil {
		return err
	}
	return writeFileAtomic(path, data, fileMode(path))
}

// fileMode is an existing file's mode, else 0644.
func fileMode(path string) fs.FileMode {
	if info, err := os.Stat(path); err == nil {
		return info.Mode().Perm()
	}
	return 0o644
}

func printAdoptionDiff(w io.Writer, a *adoption) {
	if a.dshAfter != nil {
		fmt.Fprint(w, lineDiff(a.dsh.shown, a.dshBefore, a.dshAfter))
	}
	if a.clientAfter != nil {
		fmt.Fprint(w, lineDiff(a.client.shown, a.clientBefore, a.clientAfter))
	}
	if a.sourceAfter != nil {
		fmt.Fprint(w, lineDiff(a.source.shown, a.sourceBefore, a.sourceAfter))
	}
}

// reportAdoption says, one line per entry, what adopt did (or, in a dry run, would do).
func reportAdoption(w io.Writer, a *adoption, written bool) {
	for _, r := range a.dshResults {
		note := ""
		switch {
		case r.disabled:
			note = " (there already, disabled: its client entry stays)"
		case r.outcome == "unchanged":
			note = " (there already, the same)"
		}
		fmt.Fprintf(w, "%s: %s %q%s\n", a.dsh.shown, r.outcome, r.name, note)
	}
	printResults(w, a.client.shown, a.clientResults)
	reportSource(w, a)
	reportLeft(w, a)
	if !written {
		fmt.Fprintln(w, "Dry run: nothing written; --write applies it.")
	}
}

// reportSource says, one line per moved entry of ~/.claude.json, what became of it there. The
// local scope's entry is removed: Claude Code prefers it to the project's .mcp.json. The user
// scope's stays: every other folder still uses it, and here the project's entry comes first.
func reportSource(w io.Writer, a *adoption) {
	for _, r := range a.clientResults {
		switch {
		case a.plan.scope == "local" && a.sourceAfter != nil:
			fmt.Fprintf(w, "%s: removed %q: moved to %s, its entry in %s points at it\n", a.from(), r.name, config.DefaultPath, a.client.shown)
		case a.plan.scope == "user":
			fmt.Fprintf(w, "%s: kept %q: your other folders use it; in this one the entry in %s comes first\n", a.from(), r.name, a.client.shown)
		}
	}
}

// reportLeft says, one line each, what entries stay in the client's file and why, and what
// the moved ones held that did not move as written.
func reportLeft(w io.Writer, a *adoption) {
	for _, l := range a.left {
		fmt.Fprintf(w, "%s: left %q: %s\n", a.from(), l.name, l.why)
	}
	for _, n := range a.notes {
		fmt.Fprintf(w, "%s: note on %q: %s\n", a.from(), n.name, n.note)
	}
}

// clientHints adds to a Claude Code entry the keys of the server's spec that the client acts
// on itself: alwaysLoad (its tool search then loads the server's tools up front) and timeout
// (how long it waits for a call). Other clients have no such keys.
func clientHints(format clientFormat, s v1alpha1.MCPServer, e serverEntry) serverEntry {
	if format.name != "claude-code" {
		return e
	}
	e.AlwaysLoad = s.AlwaysLoad
	if s.Timeout != nil {
		e.Timeout = s.Timeout.Milliseconds()
	}
	return e
}
