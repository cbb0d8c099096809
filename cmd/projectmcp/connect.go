package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
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
}

var clientFormats = []clientFormat{
	{name: "claude-code", file: ".mcp.json", container: "mcpServers", typed: true, bearer: "Bearer ${" + tokenEnv + "}"},
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

// serverEntry is the MCP server entry pointing an agent at a project's endpoint.
type serverEntry struct {
	Type    string            `json:"type,omitempty"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers,omitempty"`
}

func (c clientFormat) entry(endpoint string, bearer bool) serverEntry {
	e := serverEntry{URL: endpoint}
	if c.typed {
		e.Type = "http"
	}
	if bearer {
		e.Headers = map[string]string{"Authorization": c.bearer}
	}
	return e
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

// snippet is the part of the client's config file that points at the endpoint, as it is
// printed and as --write merges it: {"<container>": {"<name>": entry}} (plus VS Code's token
// input), or the entry alone for json.
func (c clientFormat) snippet(name, endpoint string, bearer bool) ([]byte, error) {
	e := c.entry(endpoint, bearer)
	if c.container == "" {
		return marshalIndent(e, "", "  ")
	}
	doc := orderedObject{{c.container, map[string]serverEntry{name: e}}}
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
}

const connectLong = `Prints the entry that points an agent at a project's MCP endpoint, as the client's config
file holds it; with --write, merges it into that file in the project folder:

  claude-code  .mcp.json          "mcpServers"
  vscode       .vscode/mcp.json   "servers"
  cursor       .cursor/mcp.json   "mcpServers"
  json         (printed only)     the entry alone, for any other client

The endpoint is the ProjectMCP's status.endpoint, so it works against any cluster the
kubeconfig reaches. NAME defaults to the project folder's name, as dev and mirror name it.
A ProjectMCP that exists without an endpoint yet (its first reconcile writes it) is waited
for, up to --wait.

--write keeps every other entry and the file's formatting (comments included); an entry of
the same name that differs is refused unless --force replaces it.

When the gateway checks bearer tokens (--gateway-auth=kubernetes; connect finds out by
asking the endpoint, or --auth says), the entry carries an Authorization header that reads
the token from the environment (` + "$" + tokenEnv + `; VS Code prompts for it once), never the
token itself.`

func newConnectCmd(g *globalFlags, stdout, stderr io.Writer) *cobra.Command {
	o := connectOptions{client: "claude-code", project: ".", entry: defaultEntryName, auth: "auto", wait: defaultEndpointWait}
	cmd := &cobra.Command{
		Use:   "connect [NAME]",
		Short: "Print or write the agent config entry for a project's endpoint",
		Long:  connectLong,
		Example: `  # add the project in this folder to Claude Code's .mcp.json
  projectmcp connect --write

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
			switch {
			case o.write && format.file == "":
				return usageErrorf("--client %s has no config file to write: it prints the entry only", o.client)
			case o.force && !o.write:
				return usageErrorf("--force replaces an entry with --write only")
			case !slices.Contains([]string{"auto", "none", "bearer"}, o.auth):
				return usageErrorf("--auth must be auto, none or bearer, not %q", o.auth)
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
	fs.BoolVar(&o.write, "write", false, "merge the entry into the client's config file in the project folder")
	fs.BoolVar(&o.force, "force", false, "with --write: replace an entry of the same name that differs")
	fs.StringVar(&o.project, "project", o.project, "project folder: where --write writes, and whose name NAME defaults to")
	fs.StringVar(&o.entry, "entry", o.entry, "name of the entry in the client's config")
	fs.DurationVar(&o.wait, "wait", o.wait, "how long to wait for the ProjectMCP's status.endpoint when it exists without one yet (its first reconcile writes it)")
	fs.StringVar(&o.auth, "auth", o.auth, `"auto": ask the endpoint whether it checks bearer tokens; "none"; "bearer": add the Authorization header`)
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
	name := ""
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
	endpoint, err := awaitEndpoint(ctx, c, key, o.wait, stderr)
	if err != nil {
		return err
	}
	bearer := o.auth == "bearer"
	if o.auth == "auto" {
		bearer = needsToken(ctx, endpoint, stderr)
	}
	snippet, err := format.snippet(o.entry, endpoint, bearer)
	if err != nil {
		return err
	}
	if !o.write {
		fmt.Fprintf(stdout, "%s\n", snippet)
	} else {
		path := filepath.Join(o.project, format.file)
		outcome, err := writeClientConfig(path, format, o.entry, format.entry(endpoint, bearer), bearer, o.force)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s: %s %q (%s)\n", path, outcome, o.entry, endpoint)
	}
	if bearer {
		fmt.Fprintf(stderr, "The gateway checks a Kubernetes bearer token: %s, e.g.\n  export %s=$(kubectl create token SERVICEACCOUNT -n %s)\n"+
			"and the token's user needs the verb \"use\" on projectmcp %s.\n", tokenHint(format), tokenEnv, key.Namespace, key)
	}
	return nil
}

// defaultEndpointWait is how long connect waits for status.endpoint: the first reconcile
// writes it a moment after the ProjectMCP is created, so a script that runs connect right
// after creating one (or right after dev prints) needs no retry of its own.
const defaultEndpointWait = 10 * time.Second

// awaitEndpoint reads a ProjectMCP's status.endpoint, waiting up to wait (saying so once) while
// the ProjectMCP exists without one. A missing ProjectMCP fails at once.
func awaitEndpoint(ctx context.Context, c client.Client, key types.NamespacedName, wait time.Duration, stderr io.Writer) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	tick := time.NewTicker(pollEvery)
	defer tick.Stop()
	for said := false; ; said = true {
		obj := &v1alpha1.ProjectMCP{}
		if err := c.Get(ctx, key, obj); err != nil && ctx.Err() == nil {
			return "", fmt.Errorf("projectmcp %s: %w", key, err)
		}
		if obj.Status.Endpoint != "" {
			return obj.Status.Endpoint, nil
		}
		if !said && wait > 0 {
			fmt.Fprintf(stderr, "Waiting up to %s for projectmcp %s's endpoint (its first reconcile writes it)...\n", wait, key)
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("projectmcp %s has no endpoint in its status after %s: is the controller running, with its gateway on?", key, wait)
		case <-tick.C:
		}
	}
}

func tokenHint(format clientFormat) string {
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
