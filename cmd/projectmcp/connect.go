package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/config"
)

// tokenEnv is the environment variable an agent's config reads the gateway's bearer token from
// (--gateway-auth=kubernetes); the token itself is never written anywhere.
const tokenEnv = "PROJECTMCP_TOKEN"

// vscodeTokenInput is the id of the VS Code input that prompts for the token (VS Code keeps
// the answer in its secret storage).
const vscodeTokenInput = "projectmcp-token"

// clientFormat is how one agent client's project config file holds an MCP server entry.
type clientFormat struct {
	name      string // the --client value
	file      string // path in the project folder; "" when the entry is only printed
	container string // key of the object mapping server names to entries
	typed     bool   // the entry states "type": "http"
	bearer    string // the Authorization header's value when the gateway checks tokens
	// helper is the headersHelper command the entry runs for its headers when the gateway
	// checks tokens, instead of bearer: Claude Code runs it at connect and again after a 401
	// or 403, so a session outlives its token. "" for clients that have no such key.
	helper string
}

var clientFormats = []clientFormat{
	{name: "claude-code", file: ".mcp.json", container: "mcpServers", typed: true, bearer: "Bearer ${" + tokenEnv + "}", helper: tokenCommand},
	{name: "vscode", file: filepath.Join(".vscode", "mcp.json"), container: "servers", typed: true, bearer: "Bearer ${input:" + vscodeTokenInput + "}"},
	{name: "cursor", file: filepath.Join(".cursor", "mcp.json"), container: "mcpServers", bearer: "Bearer ${env:" + tokenEnv + "}"},
	{name: "json", typed: true, bearer: "Bearer ${" + tokenEnv + "}"},
}

func clientNames() []string {
	var out []string
	for _, c := range clientFormats {
		out = append(out, c.name)
	}
	return out
}

func lookupClient(name string) (clientFormat, error) {
	for _, c := range clientFormats {
		if c.name == name {
			return c, nil
		}
	}
	return clientFormat{}, usageErrorf("--client must be one of %s, not %q", strings.Join(clientNames(), ", "), name)
}

// tokenCommand is the headersHelper connect writes: `projectmcp token`, found on the agent's
// PATH (a path of this machine has no place in a file a team commits).
const tokenCommand = "projectmcp token"

// serverEntry is the MCP server entry pointing an agent at a project's endpoint.
type serverEntry struct {
	Type          string            `json:"type,omitempty"`
	URL           string            `json:"url"`
	Headers       map[string]string `json:"headers,omitempty"`
	HeadersHelper string            `json:"headersHelper,omitempty"`
	// AlwaysLoad and Timeout (milliseconds) are Claude Code's own keys for the server behind
	// the endpoint, as its spec carries them (clientHints).
	AlwaysLoad bool  `json:"alwaysLoad,omitempty"`
	Timeout    int64 `json:"timeout,omitempty"`
}

func (c clientFormat) entry(endpoint string, bearer bool) serverEntry {
	e := serverEntry{URL: endpoint}
	if c.typed {
		e.Type = "http"
	}
	switch {
	case bearer && c.helper != "":
		e.HeadersHelper = c.helper
	case bearer:
		e.Headers = map[string]string{"Authorization": c.bearer}
	}
	return e
}

// withTokenFlags is the format with the token command's own flags, as connect was given them.
func (c clientFormat) withTokenFlags(audience, serviceAccount string) clientFormat {
	if c.helper == "" {
		return c
	}
	c.helper += audienceArg(audience)
	if serviceAccount != "" {
		c.helper += " --service-account " + shellQuote(serviceAccount)
	}
	return c
}

// shellQuote quotes a word for the shell the client runs headersHelper with, unless it needs
// no quoting.
func shellQuote(w string) string {
	if w != "" && strings.Trim(w, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:") == "" {
		return w
	}
	return "'" + strings.ReplaceAll(w, "'", `'"'"'`) + "'"
}

// vscodeInput is an entry of VS Code's "inputs": a value VS Code asks the user for once.
type vscodeInput struct {
	Type        string `json:"type"`
	ID          string `json:"id"`
	Description string `json:"description"`
	Password    bool   `json:"password"`
}

var tokenInput = vscodeInput{Type: "promptString", ID: vscodeTokenInput, Password: true,
	Description: "Kubernetes bearer token for the projectmcp gateway (kubectl create token ...)"}

// snippet is the part of the client's config file that points at the endpoints, as it is
// printed and as --write creates the file: {"<container>": {"<name>": entry, ...}} (plus VS
// Code's token input), or for json the entries by name alone.
func (c clientFormat) snippet(want []wantEntry, bearer bool) ([]byte, error) {
	entries := orderedObject{}
	for _, w := range want {
		entries = append(entries, member{w.name, w.entry})
	}
	if c.container == "" {
		return marshalIndent(entries, "", "  ")
	}
	doc := orderedObject{{c.container, entries}}
	if c.name == "vscode" && bearer {
		doc = append(doc, member{"inputs", []vscodeInput{tokenInput}})
	}
	return marshalIndent(doc, "", "  ")
}

// orderedObject is a JSON object whose keys keep their order (the servers first).
type orderedObject []member

type member struct {
	key   string
	value any
}

func (o orderedObject) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, m := range o {
		if i > 0 {
			buf.WriteByte(',')
		}
		k, err := marshalIndent(m.key, "", "")
		if err != nil {
			return nil, err
		}
		v, err := marshalIndent(m.value, "", "")
		if err != nil {
			return nil, err
		}
		buf.Write(k)
		buf.WriteByte(':')
		buf.Write(v)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// defaultGatewayAudience is the token audience the chart and config/default give the gateway
// (--gateway-audience): a token for it cannot call the API server.
const defaultGatewayAudience = "projectmcp"

// audienceArg is kubectl create token's --audience for the gateway's audience, or nothing.
func audienceArg(audience string) string {
	if audience == "" {
		return ""
	}
	return " --audience " + shellQuote(audience)
}

// defaultEntryName is the name of the entry connect writes.
const defaultEntryName = "projectmcp"

// connectOptions are the flags of `projectmcp connect`.
type connectOptions struct {
	client  string
	write   bool
	force   bool
	project string
	entry   string
	auth    string
	wait    time.Duration
	// aggregate writes one entry at the project's endpoint in place of one per server.
	aggregate bool
	// insecureHTTP admits plain http:// endpoints on other machines.
	insecureHTTP bool
	// tokenAudience and tokenServiceAccount are the flags of the headersHelper written for
	// Claude Code (projectmcp token's --audience and --service-account).
	tokenAudience, tokenServiceAccount string
	// gatewayURL is the gateway the user trusts (--gateway-url), or "".
	gatewayURL string
}

const connectLong = `Prints the entries that point an agent at a project's MCP endpoints, as the client's config
file holds them; with --write, merges them into that file in the project folder:

  claude-code  .mcp.json          "mcpServers"
  vscode       .vscode/mcp.json   "servers"
  cursor       .cursor/mcp.json   "mcpServers"
  json         (printed only)     the entries by name, for any other client

There is one entry per enabled server, named as the server is in .dsh/mcp.json and pointing
at that server's own endpoint (status.servers[].endpoint), which serves its tools under
their own names: the agent names them as with a direct config (mcp__memory__read_graph in
Claude Code), so permission rules and hooks keep matching. One more entry (--entry, default
"projectmcp") points at the project's endpoint with ?except= naming those servers: it
serves the servers added to .dsh/mcp.json since, under <server>__<tool>, in the session
already running (mcp__projectmcp__<server>__<tool>); the next connect --write gives each
its own entry and leaves it out of that one. --aggregate writes the one entry at the
project's endpoint instead, whose tools are all named <server>__<tool>.

The endpoints come from the ProjectMCP's status, so this works against any cluster the
kubeconfig reaches. NAME defaults to the project folder's name, as dev and mirror name it.
A ProjectMCP that exists without an endpoint yet (its first reconcile writes it) is waited
for, up to --wait.

--write keeps every other entry and the file's formatting (comments included), and says
for each entry what it did. An entry of the same name is replaced when it points at the
same projectmcp endpoint (an earlier connect, through any address) or is the very server
the project defines, written directly (the config .dsh/mcp.json took over, as "projectmcp
adopt" leaves it); any other entry of that name that differs is refused, naming it and the
file, unless --force replaces it.

When the gateway checks bearer tokens (--gateway-auth=kubernetes; connect finds out by
asking the endpoint, or --auth says), each entry carries an Authorization header that reads
the token from the environment (` + "$" + tokenEnv + `; VS Code prompts for it once), never the
token itself.

--write reads and writes only inside the project folder: a symlink on the way (.vscode, or
the file itself) that leads out of it is refused, naming it and where it points, since a
cloned repository's link can point at any file of yours; one that stays inside is followed,
and stays a link. The file is replaced whole (a temporary file beside it, synced, renamed
over it, the directory synced), keeping its mode.

An endpoint must be https://, or plain http:// on this machine (127.0.0.1, ::1, localhost:
projectmcp dev): over plain http to another machine the agent's bearer token crosses the
network in cleartext, to whatever host the ProjectMCP's status names. connect refuses such
an endpoint, naming it, unless --allow-insecure-http says the network between is trusted;
the gateway serves TLS with the chart's gateway.tls values (the controller's
--gateway-tls-cert and --gateway-tls-key, with an https --gateway-url).

The endpoints must also be on the gateway you trust for the kubeconfig's cluster, since
whoever may write a ProjectMCP's status could otherwise name a host of theirs and collect
the agents' tokens: --gateway-url names it (scheme and host), or the first --write trusts the
host status names and says so. Either is kept per cluster in
${XDG_CONFIG_HOME:-~/.config}/projectmcp/gateways.json; from then on an endpoint on another
host is refused, naming it and its status field, until --gateway-url names that host. An
endpoint on this machine (projectmcp dev) is not held to it.`

func newConnectCmd(g *globalFlags, stdout, stderr io.Writer) *cobra.Command {
	o := connectOptions{client: "claude-code", project: ".", entry: defaultEntryName, auth: "auto", wait: defaultEndpointWait,
		tokenAudience: defaultGatewayAudience}
	cmd := &cobra.Command{
		Use:   "connect [NAME]",
		Short: "Print or write the agent config entries for a project's endpoints",
		Long:  connectLong,
		Example: `  # add the servers of the project in this folder to Claude Code's .mcp.json, one entry each
  projectmcp connect --write

  # one entry, "projectmcp", for the whole project (tools named <server>__<tool>)
  projectmcp connect --aggregate --write

  # VS Code's .vscode/mcp.json, replacing an older entry of the same name
  projectmcp connect --client vscode --write --force

  # the entry alone, for any other client, of a project in another namespace
  projectmcp connect shop -n team-a --client json`,
		Args:              positional(nil, "NAME"),
		ValidArgsFunction: completeProjects(g),
		RunE: func(cmd *cobra.Command, args []string) error {
			format, err := lookupClient(o.client)
			if err != nil {
				return err
			}
			format = format.withTokenFlags(o.tokenAudience, o.tokenServiceAccount)
			switch {
			case o.write && format.file == "":
				return usageErrorf("--client %s has no config file to write: it prints the entry only", o.client)
			case o.force && !o.write:
				return usageErrorf("--force replaces an entry with --write only")
			case !slices.Contains([]string{"auto", "none", "bearer"}, o.auth):
				return usageErrorf("--auth must be auto, none or bearer, not %q", o.auth)
			}
			if err := checkGatewayURL(o.gatewayURL); err != nil {
				return err
			}
			key, err := connectTarget(g, o.project, args)
			if err != nil {
				return err
			}
			return connect(cmd.Context(), g, key, format, o, stdout, stderr)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.client, "client", o.client, "the agent client: "+strings.Join(clientNames(), ", "))
	fs.BoolVar(&o.write, "write", false, "merge the entries into the client's config file in the project folder")
	fs.BoolVar(&o.force, "force", false, "with --write: replace an entry of the same name that differs, whatever it is")
	fs.BoolVar(&o.aggregate, "aggregate", false, "one entry (--entry) at the project's endpoint, tools named <server>__<tool>, in place of one entry per server")
	fs.StringVar(&o.project, "project", o.project, "project folder: where --write writes, and whose name NAME defaults to")
	fs.StringVar(&o.entry, "entry", o.entry, "name of the entry at the project's endpoint: the one entry of --aggregate, or else the one for the servers without an entry of their own")
	fs.DurationVar(&o.wait, "wait", o.wait, "how long to wait for the ProjectMCP's status.endpoint when it exists without one yet (its first reconcile writes it)")
	fs.StringVar(&o.auth, "auth", o.auth, `"auto": ask the endpoint whether it checks bearer tokens; "none"; "bearer": add the Authorization header`)
	fs.BoolVar(&o.insecureHTTP, insecureHTTPFlag, false, insecureHTTPUsage)
	fs.StringVar(&o.gatewayURL, gatewayURLFlag, "", gatewayURLUsage)
	fs.StringVar(&o.tokenAudience, "token-audience", o.tokenAudience, `the gateway's --gateway-audience (the chart's and config/default's is projectmcp), for the headersHelper "projectmcp token --audience" written for Claude Code and the kubectl create token hint; "" for a gateway that accepts the API server's own audiences`)
	fs.StringVar(&o.tokenServiceAccount, "token-service-account", "", `a ServiceAccount (NAME or NAMESPACE/NAME) whose tokens the headersHelper "projectmcp token --service-account" mints`)
	_ = cmd.RegisterFlagCompletionFunc("client", cobra.FixedCompletions(clientNames(), cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("auth", cobra.FixedCompletions([]string{"auto", "none", "bearer"}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.MarkFlagDirname("project")
	return cmd
}

// connectTarget is the ProjectMCP connect reads: NAME, else the project folder's name.
func connectTarget(g *globalFlags, project string, args []string) (types.NamespacedName, error) {
	ns, err := g.ns()
	if err != nil {
		return types.NamespacedName{}, err
	}
	var name string
	if len(args) > 0 {
		name = args[0]
	} else {
		abs, err := filepath.Abs(project)
		if err != nil {
			return types.NamespacedName{}, err
		}
		name = config.NameFor(filepath.Join(abs, config.DefaultPath))
	}
	return types.NamespacedName{Namespace: ns, Name: name}, nil
}

func connect(ctx context.Context, g *globalFlags, key types.NamespacedName, format clientFormat, o connectOptions, stdout, stderr io.Writer) error {
	c, err := g.client()
	if err != nil {
		return err
	}
	obj, err := awaitProject(ctx, c, key, o.wait, false, stderr)
	if err != nil {
		return err
	}
	targets, err := connectEntries(key, obj, o.aggregate, o.entry)
	if err != nil {
		return err
	}
	if err := checkTargets(key, targets, o.insecureHTTP); err != nil {
		return err
	}
	trust, err := newGatewayTrust(g, o.gatewayURL, o.write)
	if err != nil {
		return err
	}
	if err := trust.hold(key, targets, stderr); err != nil {
		return err
	}
	bearer := wantsBearer(ctx, o.auth, obj.Status.Endpoint, stderr)
	want := connectWants(format, obj, targets, bearer)
	if !o.write {
		if err := printEntries(stdout, format, want, bearer, o.aggregate); err != nil {
			return err
		}
	} else {
		f, err := projectPath(o.project, format.file)
		if err != nil {
			return err
		}
		results, err := writeClientConfig(f, format, want, bearer, o.force)
		if err != nil {
			return err
		}
		printResults(stdout, f.shown, results)
	}
	if !o.aggregate {
		fmt.Fprintf(stderr, "%q is the project's endpoint without the servers that have an entry here: a server added to %s later "+
			"is offered through it at once (mcp__%s__<server>__<tool> in Claude Code), until connect --write gives it its own entry.\n",
			o.entry, config.DefaultPath, o.entry)
	}
	switch {
	case bearer && format.helper != "":
		fmt.Fprintf(stderr, "The gateway checks a Kubernetes bearer token: %s at connect and after a 401, "+
			"from your kubeconfig; the token's user needs the verb \"use\" on projectmcp %s.\n", tokenHint(format), key)
		if _, err := exec.LookPath("projectmcp"); err != nil {
			fmt.Fprintf(stderr, "projectmcp is not on this PATH: put it there, or the agent cannot run %q.\n", format.helper)
		}
	case bearer:
		fmt.Fprintf(stderr, "The gateway checks a Kubernetes bearer token: %s, e.g.\n  export %s=$(kubectl create token SERVICEACCOUNT -n %s%s)\n"+
			"and the token's user needs the verb \"use\" on projectmcp %s.\n", tokenHint(format), tokenEnv, key.Namespace, audienceArg(o.tokenAudience), key)
	}
	return nil
}

// wantsBearer is whether the entries carry the Authorization header: --auth says, or "auto"
// asks the endpoint.
func wantsBearer(ctx context.Context, auth, endpoint string, stderr io.Writer) bool {
	if auth == "auto" {
		return needsToken(ctx, endpoint, stderr)
	}
	return auth == "bearer"
}

// endpointEntry is one entry connect writes: its name, the URL it points at, the server it
// serves ("" for the project's endpoint), and the status field the URL comes from.
type endpointEntry struct {
	name, url, server, field string
}

// projectEndpointField is the status field of a project's endpoint.
const projectEndpointField = "status.endpoint"

// connectEntries is what connect points an agent at: one entry per enabled server, named as
// the server and pointing at its own endpoint, so that the agent names the tools as it would
// with a direct config (mcp__<server>__<tool> in Claude Code), and one more, named entry, at
// the project's endpoint leaving those servers out; or with aggregate the one entry, named
// entry, at the project's endpoint. A server's endpoint is its status's, or else the
// contract's URL under the project's (a server added a moment ago has no status yet).
//
// The entry for the rest is how a server added to the config after connect wrote the file
// is offered at once, in the session already running (its tools come by list_changed, named
// <server>__<tool>): the agent reads its entries when it starts, so a per-server entry alone
// would reach it only after another connect --write and a restart. It leaves out the servers
// that have their own entry now, so no tool is offered twice; the next connect --write gives
// a new server its own entry and moves it into that list.
func connectEntries(key types.NamespacedName, obj *v1alpha1.ProjectMCP, aggregate bool, entry string) ([]endpointEntry, error) {
	if aggregate {
		return []endpointEntry{{name: entry, url: obj.Status.Endpoint, field: projectEndpointField}}, nil
	}
	out, err := serverEntries(key, obj)
	if err != nil {
		return nil, err
	}
	own := make([]string, 0, len(out))
	for _, e := range out {
		if e.name == entry {
			return nil, fmt.Errorf("projectmcp %s has a server named %q, the name of the entry for the servers without one of their own: give that entry another name with --entry", key, entry)
		}
		own = append(own, e.name)
	}
	return append(out, endpointEntry{name: entry, url: v1alpha1.ExceptEndpoint(obj.Status.Endpoint, own)}), nil
}

// serverEntries are the entries of the enabled servers, one each, in the spec's order.
func serverEntries(key types.NamespacedName, obj *v1alpha1.ProjectMCP) ([]endpointEntry, error) {
	own := map[string]string{}
	for _, s := range obj.Status.Servers {
		own[s.Name] = s.Endpoint
	}
	var out []endpointEntry
	for _, s := range obj.Spec.Servers {
		if s.Disabled {
			continue
		}
		url, field := own[s.Name], fmt.Sprintf("status.servers[%s].endpoint", s.Name)
		if url == "" {
			url, field = v1alpha1.ServerEndpoint(obj.Status.Endpoint, s.Name), projectEndpointField
		}
		out = append(out, endpointEntry{name: s.Name, url: url, server: s.Name, field: field})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("projectmcp %s has no enabled server to connect (--aggregate points one entry at the project's endpoint)", key)
	}
	return out, nil
}

// insecureHTTPFlag admits, in connect and adopt, an endpoint that is plain http on another
// machine.
const (
	insecureHTTPFlag  = "allow-insecure-http"
	insecureHTTPUsage = "write entries at a plain http:// endpoint on another machine (the agent's bearer token then crosses the network in cleartext); without it only https:// and http:// on this machine are accepted"
)

// checkEndpoint is why an agent's entry may not point at endpoint, or nil when it may:
// https, or http to this machine (dev's gateway), or http anywhere when insecureHTTP says the
// network is trusted. The endpoint comes from status, which anyone who may write status can
// point at a host of theirs: over plain http the agent's bearer token goes there readable by
// every machine on the way.
func checkEndpoint(endpoint string, insecureHTTP bool) error {
	u, err := url.Parse(endpoint)
	switch {
	case err != nil || u.Host == "":
		return fmt.Errorf("the endpoint %q is not an http(s) URL with a host", endpoint)
	case u.Scheme == "https":
		return nil
	case u.Scheme != "http":
		return fmt.Errorf("the endpoint %s is not http:// or https://", endpoint)
	case insecureHTTP || loopbackURL(endpoint):
		return nil
	}
	return fmt.Errorf("the endpoint %s is plain http to another machine: the agent's bearer token would cross the network in cleartext. "+
		"Serve the gateway over TLS (the chart's gateway.tls values; the controller's --gateway-tls-cert and --gateway-tls-key with an https --gateway-url), "+
		"or pass --%s if the network between is trusted", endpoint, insecureHTTPFlag)
}

// checkGatewayURL refuses a --gateway-url that names no gateway, before any cluster is asked.
func checkGatewayURL(raw string) error {
	if raw == "" {
		return nil
	}
	if _, err := originOf(raw); err != nil {
		return usageErrorf("--%s: %v", gatewayURLFlag, err)
	}
	return nil
}

// checkTargets checks every endpoint connect would write, naming the project and the entry.
func checkTargets(key types.NamespacedName, targets []endpointEntry, insecureHTTP bool) error {
	var errs []error
	for _, t := range targets {
		if err := checkEndpoint(t.url, insecureHTTP); err != nil {
			errs = append(errs, fmt.Errorf("projectmcp %s, entry %q: %w", key, t.name, err))
		}
	}
	return errors.Join(errs...)
}

// connectWants are the entries as the client's file holds them, each with the rule that lets
// it replace an entry of its name.
func connectWants(format clientFormat, obj *v1alpha1.ProjectMCP, targets []endpointEntry, bearer bool) []wantEntry {
	servers := map[string]v1alpha1.MCPServer{}
	for _, s := range obj.Spec.Servers {
		servers[s.Name] = s
	}
	var out []wantEntry
	for _, t := range targets {
		var direct *v1alpha1.MCPServer
		if s, ok := servers[t.server]; ok {
			direct = &s
		}
		e := format.entry(t.url, bearer)
		if direct != nil {
			e = clientHints(format, *direct, e)
		}
		out = append(out, wantEntry{name: t.name, entry: e, ours: replaceableFor(format, t, direct)})
	}
	return out
}

// replaceableFor says why an entry of the client's file may give way, without --force, to the
// one connect writes for target: it points at the same projectmcp endpoint (an earlier
// connect, perhaps through another address or with another header), or it is target's server
// as the project defines it, written directly (the config the project took over: replacing
// it keeps the server and its tool names, now through the gateway).
func replaceableFor(format clientFormat, target endpointEntry, direct *v1alpha1.MCPServer) func(src []byte, old jsonValue) string {
	return func(src []byte, old jsonValue) string {
		if u, ok := old.member("url"); ok && u.value.kind == '"' && samePath(u.value.str, target.url) {
			return "it pointed at the same projectmcp endpoint"
		}
		if direct == nil {
			return ""
		}
		if def, err := directServer(format, target.name, src, old); err == nil && sameServer(def.server, *direct) {
			return "it was the same server, defined directly"
		}
		return ""
	}
}

// samePath is whether two URLs have the same path: a gateway's path names the project and the
// server, so an entry with it is the same endpoint, through whatever address.
func samePath(a, b string) bool {
	ua, errA := url.Parse(a)
	ub, errB := url.Parse(b)
	return errA == nil && errB == nil && ua.Path != "" && ua.Path == ub.Path
}

// printEntries prints what --write would merge; for json the entries by name, or with
// aggregate the one entry alone.
func printEntries(w io.Writer, format clientFormat, want []wantEntry, bearer, aggregate bool) error {
	var out []byte
	var err error
	if format.container == "" && aggregate {
		out, err = marshalIndent(want[0].entry, "", "  ")
	} else {
		out, err = format.snippet(want, bearer)
	}
	if err == nil {
		fmt.Fprintf(w, "%s\n", out)
	}
	return err
}

// printResults says, one line per entry, what became of it in the file at path.
func printResults(w io.Writer, path string, results []entryResult) {
	for _, r := range results {
		why := ""
		if r.why != "" {
			why = ": " + r.why
		}
		fmt.Fprintf(w, "%s: %s %q (%s)%s\n", path, r.outcome, r.name, r.url, why)
	}
}

// defaultEndpointWait is how long connect waits for status.endpoint: the first reconcile
// writes it a moment after the ProjectMCP is created, so a script that runs connect right
// after creating one (or right after dev prints) needs no retry of its own.
const defaultEndpointWait = 10 * time.Second

// awaitProject reads a ProjectMCP once its status.endpoint is written, waiting up to wait
// (saying so once) while it exists without one. A missing ProjectMCP fails at once, or with
// missingOK is (nil, nil).
func awaitProject(ctx context.Context, c client.Client, key types.NamespacedName, wait time.Duration, missingOK bool, stderr io.Writer) (*v1alpha1.ProjectMCP, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for said := false; ; said = true {
		obj := &v1alpha1.ProjectMCP{}
		if err := c.Get(ctx, key, obj); err != nil && ctx.Err() == nil {
			if missingOK && apierrors.IsNotFound(err) {
				return nil, nil
			}
			return nil, fmt.Errorf("projectmcp %s: %w", key, err)
		}
		if obj.Status.Endpoint != "" {
			return obj, nil
		}
		if !said && wait > 0 {
			fmt.Fprintf(stderr, "Waiting up to %s for projectmcp %s's endpoint (its first reconcile writes it)...\n", wait, key)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("projectmcp %s has no endpoint in its status after %s: is the controller running, with its gateway on?", key, wait)
		case <-tick.C:
		}
	}
}

func tokenHint(format clientFormat) string {
	if format.helper != "" {
		return "the agent runs \"" + format.helper + "\" for it"
	}
	if format.name == "vscode" {
		return "VS Code asks for it once (input " + vscodeTokenInput + ")"
	}
	return "the agent reads it from $" + tokenEnv
}

// probeTimeout bounds connect's question to the endpoint.
const probeTimeout = 5 * time.Second

// needsToken finds out whether the gateway behind endpoint checks bearer tokens: a request
// without one gets 401 from a gateway with --gateway-auth=kubernetes, and anything else from a
// local one. HEAD starts no session. When the endpoint cannot be reached from here (it may be
// a cluster-internal URL), a loopback endpoint is taken for a local gateway and any other for
// a token-checking one, and connect says so.
func needsToken(ctx context.Context, endpoint string, stderr io.Writer) bool {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, endpoint, nil)
	if err == nil {
		var resp *http.Response
		if resp, err = http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			return resp.StatusCode == http.StatusUnauthorized
		}
	}
	guess := !loopbackURL(endpoint)
	form := "no Authorization header"
	if guess {
		form = "an Authorization header"
	}
	fmt.Fprintf(stderr, "Could not ask %s whether it checks tokens (%v); writing %s (--auth none or bearer to choose).\n", endpoint, err, form)
	return guess
}

func loopbackURL(endpoint string) bool {
	u, err := url.Parse(endpoint)
	if err != nil {
		return false
	}
	host := u.Hostname()
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
