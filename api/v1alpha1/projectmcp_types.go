package v1alpha1

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Limits shared by the CRD's validation markers and the .dsh/mcp.json parser. The markers below
// must repeat these numbers literally (controller-gen reads only literals); a test compares the
// generated CRD with these constants so that a file the parser accepts is never refused at
// admission.
const (
	// MaxServers is the most servers one project may list.
	MaxServers = 64
	// MaxServerNameLength is the longest server name. Names are 1..64 of [A-Za-z0-9_-].
	MaxServerNameLength = 64
	// MaxArgs is the most arguments of one stdio command.
	MaxArgs = 256
	// MaxArgLength is the longest command, argument, working directory, or env/header value.
	MaxArgLength = 4096
	// MaxEnvVars is the most environment variables (or headers) of one server.
	MaxEnvVars = 128
	// MaxEnvNameLength is the longest environment variable or header name.
	MaxEnvNameLength = 256
	// MaxURLLength is the longest server URL.
	MaxURLLength = 2048
	// MaxToolPatterns is the most allow (or deny) patterns of one server.
	MaxToolPatterns = 64
	// MaxToolPatternLength is the longest tool pattern.
	MaxToolPatternLength = 128
	// MaxStatusTools is the most projected tool names one server's status lists (toolCount has
	// the total).
	MaxStatusTools = 64
	// MaxStatusSessions is the most session bindings status lists, newest first (sessionCount
	// has the total).
	MaxStatusSessions = 20
	// MaxErrorLength bounds status messages such as lastError.
	MaxErrorLength = 1024
)

// ServerEndpoint is the URL of a project's per-server endpoint, given the project endpoint's
// (…/projects/<namespace>/<name>/mcp): …/projects/<namespace>/<name>/servers/<server>/mcp. The
// URL is a contract: clients store it.
func ServerEndpoint(projectEndpoint, server string) string {
	return strings.TrimSuffix(projectEndpoint, "/mcp") + "/servers/" + server + "/mcp"
}

// ExceptParam is the project endpoint's query parameter naming the servers it leaves out.
const ExceptParam = "except"

// ExceptEndpoint is the URL of the project endpoint that serves every server of the project
// but those named, under projected names: the entry beside the per-server ones, through which
// a server that has no entry of its own yet is offered. The names are sorted, so one set has
// one URL.
func ExceptEndpoint(projectEndpoint string, servers []string) string {
	names := slices.Sorted(slices.Values(servers))
	return projectEndpoint + "?" + ExceptParam + "=" + strings.Join(slices.Compact(names), ",")
}

// ServerNamePattern is what a server name may contain: it becomes the prefix of every projected
// tool name, so it is kept to characters every MCP client accepts in a tool name.
const ServerNamePattern = `^[A-Za-z0-9_-]{1,64}$`

// ProjectMCPSpec is the desired MCP servers of one project: normally a mirror of the project's
// .dsh/mcp.json (see `projectmcp mirror` and `projectmcp render`).
type ProjectMCPSpec struct {
	// project says where the configuration came from: a directory or a repository URL.
	// Informational only.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	Project string `json:"project,omitempty"`

	// servers are the MCP servers of the project, keyed by name. The controller holds at most
	// one live connection per server, shared by every session of the project.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Servers []MCPServer `json:"servers,omitempty"`

	// secretRef names a Secret in the same namespace whose keys feed ${VAR} and
	// ${VAR:-default} expansion in commands, arguments, env values, URLs and header values.
	// Expansion happens at connect time, in memory: resolved values never reach spec, status,
	// events or logs. The Secret serves this ProjectMCP only when its annotation
	// mcp.dsh.dev/allowed-projects names it (or is "*"), a server only when its annotation
	// mcp.dsh.dev/allowed-destinations lists the server's destination (a remote server's
	// origin, a stdio server's command line), and its keys never expand into a stdio server's
	// command or args.
	// +optional
	SecretRef *corev1.LocalObjectReference `json:"secretRef,omitempty"`

	// idleTimeout is how long a connection no session uses stays up before it is reclaimed.
	// "0s" means never reclaim.
	// +optional
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^-?([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$|^0$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="idleTimeout must not be negative"
	IdleTimeout *metav1.Duration `json:"idleTimeout,omitempty"`

	// readyTimeout is how long a new session waits for servers that are still connecting
	// before its first tools/list is answered. "0s" means do not wait. A server that is not
	// ready in time never fails the session: its tools arrive later with list_changed.
	// +optional
	// +kubebuilder:default="5s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^-?([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$|^0$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s')",message="readyTimeout must not be negative"
	ReadyTimeout *metav1.Duration `json:"readyTimeout,omitempty"`

	// reconnect is the budget for reconnecting a connection that dropped.
	// +optional
	Reconnect *ReconnectPolicy `json:"reconnect,omitempty"`

	// toolAuthorization decides who may list and use each tool, prompt and resource.
	// Project (the default): whoever may `use` the ProjectMCP may use all of them. RBAC: each
	// identity sees and uses only those cluster RBAC grants it the verb `call` on, as
	// tools.mcp.dsh.dev, prompts.mcp.dsh.dev or resources.mcp.dsh.dev named
	// "<project>/<server>__<tool>" (or "<project>/<server>__<prompt>", "<project>/<uri>"), or
	// the wildcards "<project>/<server>__*" and "<project>/*" (docs/security.md).
	// +optional
	// +kubebuilder:validation:Enum=Project;RBAC
	ToolAuthorization ToolAuthorization `json:"toolAuthorization,omitempty"`
}

// ToolAuthorization is how a project's items are authorized per identity.
type ToolAuthorization string

const (
	// ToolAuthorizationProject: the verb `use` on the ProjectMCP grants every item.
	ToolAuthorizationProject ToolAuthorization = "Project"
	// ToolAuthorizationRBAC: each item is granted by RBAC on its own (SubjectAccessReviews).
	ToolAuthorizationRBAC ToolAuthorization = "RBAC"
)

// MCPServer is one entry of the project's mcpServers: exactly one of a stdio command or a
// remote URL.
// +kubebuilder:validation:XValidation:rule="has(self.stdio) != has(self.http)",message="exactly one of stdio or http must be set"
type MCPServer struct {
	// name identifies the server within the project and prefixes its tools' projected names
	// (<name>__<tool>). 1 to 64 characters of [A-Za-z0-9_-], not containing "__" and not
	// starting or ending with "_", so a projected name's server part ends exactly at its first
	// "__" and the names of two servers never run into each other.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_-]{1,64}$`
	// +kubebuilder:validation:XValidation:rule="!self.contains('__') && !self.startsWith('_') && !self.endsWith('_')",message="name must not contain '__' nor start or end with '_'"
	Name string `json:"name"`

	// stdio runs the server as a local process speaking MCP on stdin/stdout.
	// +optional
	Stdio *StdioServer `json:"stdio,omitempty"`

	// http reaches a remote server over streamable HTTP or legacy SSE.
	// +optional
	HTTP *HTTPServer `json:"http,omitempty"`

	// disabled keeps the entry but retires its connection and withdraws its tools.
	// +optional
	Disabled bool `json:"disabled,omitempty"`

	// tools filters which of the server's tools sessions see.
	// +optional
	Tools *ToolFilter `json:"tools,omitempty"`

	// timeout is the deadline of one call to the server, as Claude Code's per-server
	// "timeout" and "request_timeout_ms" set it. Unset means no deadline of the project's own.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^-?([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$|^0$`
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="timeout must be positive"
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// alwaysLoad asks clients that defer tools (Claude Code's tool search) to load this
	// server's tools up front, as Claude Code's per-server "alwaysLoad" does.
	// +optional
	AlwaysLoad bool `json:"alwaysLoad,omitempty"`

	// toolHints are what clients are told of some of the server's tools beyond what the server
	// says: _meta entries, a description, annotations. Each entry applies to the tools its glob
	// matches; later entries override earlier ones per key.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	ToolHints []ToolHint `json:"toolHints,omitempty"`

	// share is how many connections the server gets and who shares each: project (one for
	// every session of the project), principal (one per authenticated principal; per uid in
	// local mode), session (one per session, made at its mount and ended with it) or worktree
	// (local mode only: one per working tree, keyed by the session's first root). Unset means
	// session for the servers known to keep state per client (docs/sharing.md) and project for
	// every other.
	// +optional
	// +kubebuilder:validation:Enum=project;principal;session;worktree
	Share Share `json:"share,omitempty"`

	// sandbox is VS Code's sandbox of a stdio server ("sandboxEnabled" and "sandbox"): with the
	// controller's --sandbox, filesystem and network hold inside the server's sandbox; disabled
	// ("sandbox": false) runs the server outside it.
	// +optional
	Sandbox *Sandbox `json:"sandbox,omitempty"`
}

// Share is a server's sharing scope: whose sessions share one of its connections.
type Share string

// The sharing scopes, from the widest to the narrowest.
const (
	// ShareProject: one connection for every session of the project.
	ShareProject Share = "project"
	// SharePrincipal: one connection per authenticated principal.
	SharePrincipal Share = "principal"
	// ShareSession: one connection per session.
	ShareSession Share = "session"
	// ShareWorktree: one connection per working tree (the session's first root); local mode only.
	ShareWorktree Share = "worktree"
)

// Limits of toolHints, as the CRD's markers below repeat them.
const (
	// MaxToolHints is the most toolHints entries of one server.
	MaxToolHints = 64
	// MaxToolHintGlob is the longest glob of one entry.
	MaxToolHintGlob = 128
	// MaxToolHintMeta is the most _meta entries one entry adds.
	MaxToolHintMeta = 32
	// MaxToolHintDescription is the longest description one entry sets.
	MaxToolHintDescription = 16384
	// MaxToolHintTitle is the longest annotations title one entry sets.
	MaxToolHintTitle = 256
)

// ToolHint is what clients are told of the tools whose names (the server's own) match Tools.
type ToolHint struct {
	// tools is a glob over the server's own tool names, as Go's path.Match reads it
	// ("*" matches every tool).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	Tools string `json:"tools"`

	// meta entries are added to each matched tool's _meta (e.g. "anthropic/alwaysLoad",
	// "anthropic/maxResultSizeChars"), replacing the server's value of the same key.
	// +optional
	// +kubebuilder:validation:MaxProperties=32
	Meta map[string]apiextensionsv1.JSON `json:"meta,omitempty"`

	// description replaces each matched tool's description.
	// +optional
	// +kubebuilder:validation:MaxLength=16384
	Description *string `json:"description,omitempty"`

	// annotations override each matched tool's annotations, key by key.
	// +optional
	Annotations *ToolAnnotations `json:"annotations,omitempty"`
}

// ToolAnnotations are the MCP tool annotations a hint may override; an unset one keeps the
// server's.
type ToolAnnotations struct {
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Title *string `json:"title,omitempty"`
	// +optional
	ReadOnlyHint *bool `json:"readOnlyHint,omitempty"`
	// +optional
	DestructiveHint *bool `json:"destructiveHint,omitempty"`
	// +optional
	IdempotentHint *bool `json:"idempotentHint,omitempty"`
	// +optional
	OpenWorldHint *bool `json:"openWorldHint,omitempty"`
}

// Sandbox is what a sandboxed stdio server may reach, in VS Code's terms.
type Sandbox struct {
	// enabled is VS Code's "sandboxEnabled".
	// +optional
	Enabled bool `json:"enabled,omitempty"`

	// disabled is "sandbox": false: the server runs outside the controller's sandbox
	// (--sandbox), and the config's ConfigSynced condition and the server's status say so.
	// +optional
	Disabled bool `json:"disabled,omitempty"`

	// filesystem lists the paths the server may write besides its HOME and /tmp, and those it
	// may not read or write: absolute, or under "~/" (the server's HOME) or
	// "${workspaceFolder}" (the project's folder).
	// +optional
	Filesystem *SandboxFilesystem `json:"filesystem,omitempty"`

	// network lists the domains the server may, and may not, reach.
	// +optional
	Network *SandboxNetwork `json:"network,omitempty"`
}

// SandboxFilesystem is the filesystem part of a Sandbox.
type SandboxFilesystem struct {
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=4096
	AllowWrite []string `json:"allowWrite,omitempty"`
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=4096
	DenyRead []string `json:"denyRead,omitempty"`
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=4096
	DenyWrite []string `json:"denyWrite,omitempty"`
}

// SandboxNetwork is the network part of a Sandbox.
type SandboxNetwork struct {
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=4096
	AllowedDomains []string `json:"allowedDomains,omitempty"`
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=4096
	DeniedDomains []string `json:"deniedDomains,omitempty"`
}

// StdioServer is a server run as a child process of the controller, in its own process group.
type StdioServer struct {
	// command is the executable, looked up on the controller's PATH.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	Command string `json:"command"`

	// args are passed to the command unchanged (after ${VAR} expansion).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=4096
	Args []string `json:"args,omitempty"`

	// env adds variables to the process environment.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=128
	Env []NameValue `json:"env,omitempty"`

	// workingDir is the process's working directory; empty means the controller's.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	WorkingDir string `json:"workingDir,omitempty"`
}

// HTTPTransport is the wire protocol of a remote server.
// +kubebuilder:validation:Enum=StreamableHTTP;SSE
type HTTPTransport string

const (
	// TransportStreamableHTTP is MCP's streamable HTTP transport (both the 2025-11-25 session
	// protocol and the stateless 2026-07-28 protocol).
	TransportStreamableHTTP HTTPTransport = "StreamableHTTP"
	// TransportSSE is the legacy HTTP+SSE transport of the 2024-11-05 revision.
	TransportSSE HTTPTransport = "SSE"
)

// HTTPServer is a remote server reached by URL.
type HTTPServer struct {
	// url is the server's MCP endpoint: an absolute http or https URL.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.startsWith('http://') || self.startsWith('https://')",message="url must be an absolute http:// or https:// URL"
	// +kubebuilder:validation:XValidation:rule="self.contains('${') || isURL(self)",message="url is not a valid URL"
	URL string `json:"url"`

	// transport is StreamableHTTP (the default) or SSE (legacy).
	// +optional
	// +kubebuilder:default=StreamableHTTP
	Transport HTTPTransport `json:"transport,omitempty"`

	// headers are sent with every request to the server, e.g. Authorization.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=128
	Headers []NameValue `json:"headers,omitempty"`

	// headersHelper is Claude Code's "headersHelper": a command whose output is a JSON object
	// of headers for the server, run by the controller at every connect (so again after the
	// server answers 401 or 403) under the rules of a stdio server's command: --allow-command,
	// the servers' environment and user. Its line is split into words as a shell would, without
	// a shell (write sh -c '...' for one), and takes no ${VAR} reference. Its headers win over
	// those of headers; a helper that fails fails the connect with its stderr's last line.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	HeadersHelper string `json:"headersHelper,omitempty"`

	// oauth is Claude Code's "oauth", with what identity providers need beyond it: how the
	// server's credential is obtained. With it the controller sends the bearer token of the
	// server's grant Secret (made by `projectmcp login`), refreshes it before it expires and
	// shows its state in status.servers[].credential.
	// +optional
	OAuth *OAuthClient `json:"oauth,omitempty"`
}

// OAuthClient is a client's OAuth settings toward one remote server.
type OAuthClient struct {
	// clientId is a client registered with the server's authorization server.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	ClientID string `json:"clientId,omitempty"`
	// callbackPort is the local port of the redirect the client listens on.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	CallbackPort int32 `json:"callbackPort,omitempty"`
	// authServerMetadataUrl is the authorization server's metadata document.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	AuthServerMetadataURL string `json:"authServerMetadataUrl,omitempty"`
	// scopes are the scopes asked for.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=256
	Scopes []string `json:"scopes,omitempty"`
	// resource is the RFC 8707 resource every token request names, in place of the server's
	// canonical URL (an identity provider that names the API otherwise).
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	Resource string `json:"resource,omitempty"`
	// audience is sent as the audience parameter of every authorization and token request.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	Audience string `json:"audience,omitempty"`
	// authorizeParams are extra parameters of the authorization request, e.g.
	// access_type=offline for a provider that gives a refresh token only then.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	AuthorizeParams []NameValue `json:"authorizeParams,omitempty"`
	// tokenEndpointAuthMethod is how the client authenticates at the token endpoint
	// (private_key_jwt: with a JWT signed by the key `projectmcp login` stores); empty chooses
	// from the authorization server's metadata.
	// +optional
	// +kubebuilder:validation:Enum=client_secret_basic;client_secret_post;private_key_jwt;none
	TokenEndpointAuthMethod string `json:"tokenEndpointAuthMethod,omitempty"`
	// grant is how the credential is obtained: authorizationCode (the default; a person signs
	// in with `projectmcp login`) or clientCredentials (the client's own token, from its id and
	// the secret `projectmcp login` stores).
	// +optional
	// +kubebuilder:validation:Enum=authorizationCode;clientCredentials
	Grant OAuthGrant `json:"grant,omitempty"`
}

// OAuthGrant is how a server's credential is obtained.
type OAuthGrant string

// The grants of OAuthClient.grant.
const (
	OAuthGrantAuthorizationCode OAuthGrant = "authorizationCode"
	OAuthGrantClientCredentials OAuthGrant = "clientCredentials"
)

// NameValue is one environment variable or HTTP header. The value may hold ${VAR} references
// resolved from spec.secretRef at connect time.
type NameValue struct {
	// name of the variable or header.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="!self.contains('=')",message="name must not contain '='"
	Name string `json:"name"`

	// value of the variable or header; may be empty.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Value string `json:"value,omitempty"`
}

// ToolFilter selects which upstream tools are offered to sessions. A tool is offered when it
// matches some allow pattern (or allow is empty) and no deny pattern. Patterns match the raw
// upstream tool name; '*' matches any run of characters and '?' any one character.
type ToolFilter struct {
	// allow lists the patterns of tools to offer; empty offers all.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=128
	Allow []string `json:"allow,omitempty"`

	// deny lists the patterns of tools never to offer; deny wins over allow.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=128
	Deny []string `json:"deny,omitempty"`
}

// ReconnectPolicy bounds how a dropped connection is retried: exponential backoff with jitter
// from initialBackoff up to maxBackoff, at most maxAttempts times. When the budget is spent
// the server is Failed and its tools are withdrawn until a rebuild.
// +kubebuilder:validation:XValidation:rule="!has(self.initialBackoff) || !has(self.maxBackoff) || duration(self.initialBackoff) <= duration(self.maxBackoff)",message="initialBackoff must not exceed maxBackoff"
type ReconnectPolicy struct {
	// maxAttempts is the number of reconnect attempts after a drop; 0 gives up at once.
	// +optional
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000
	MaxAttempts *int32 `json:"maxAttempts,omitempty"`

	// initialBackoff is the delay before the first reconnect attempt.
	// +optional
	// +kubebuilder:default="500ms"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^-?([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$|^0$`
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="initialBackoff must be positive"
	InitialBackoff *metav1.Duration `json:"initialBackoff,omitempty"`

	// maxBackoff caps the delay between attempts.
	// +optional
	// +kubebuilder:default="30s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^-?([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$|^0$`
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="maxBackoff must be positive"
	MaxBackoff *metav1.Duration `json:"maxBackoff,omitempty"`
}

// ServerPhase is where one server's connection is in its life.
//
//	            create                 connected
//	(none) ───────────▶ Connecting ──────────────▶ Ready
//	                        ▲   │ failed             │ dropped
//	             reconnect  │   ▼                    ▼
//	                    Disconnected ◀───────────────┘
//	                        │ budget spent
//	                        ▼
//	                      Failed ──── rebuild ───▶ Connecting
//
// Idle: reclaimed after idleTimeout with no session. Disabled: disabled in spec.
// +kubebuilder:validation:Enum=Connecting;Ready;Disconnected;Failed;Idle;Disabled
type ServerPhase string

const (
	// PhaseConnecting means the connection is being established (or re-established).
	PhaseConnecting ServerPhase = "Connecting"
	// PhaseReady means the connection is up and its tools are offered.
	PhaseReady ServerPhase = "Ready"
	// PhaseDisconnected means the connection dropped and is being retried; its tools stay
	// listed and calls to them fail at once.
	PhaseDisconnected ServerPhase = "Disconnected"
	// PhaseFailed means the reconnect budget is spent (or the server never came up); its tools
	// are withdrawn until a rebuild.
	PhaseFailed ServerPhase = "Failed"
	// PhaseIdle means no connection is held because no session used it for idleTimeout.
	PhaseIdle ServerPhase = "Idle"
	// PhaseDisabled means the server is disabled in spec.
	PhaseDisabled ServerPhase = "Disabled"
)

// ProjectMCPStatus is what the controller holds for the project: one entry per server and the
// sessions bound to its connections.
type ProjectMCPStatus struct {
	// observedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: Ready and Degraded, the controller's, and (when mirrored) ConfigSynced, the
	// mirror's. Each writer server-side-applies its own conditions under its own field manager
	// (projectmcp-controller, projectmcp-mirror), and conditions merge by type.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// endpoint is the gateway URL agent sessions use to reach this project's tools.
	// +optional
	Endpoint string `json:"endpoint,omitempty"`

	// readyServers summarizes servers as "ready/enabled" for kubectl.
	// +optional
	ReadyServers string `json:"readyServers,omitempty"`

	// toolCount is the number of tools offered across all servers (always written, so that
	// kubectl shows 0 rather than nothing).
	// +optional
	ToolCount int32 `json:"toolCount"`

	// servers is the state of each server's connection.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Servers []ServerStatus `json:"servers,omitempty"`

	// sessionCount is the number of sessions bound to the project (always written).
	// +optional
	SessionCount int32 `json:"sessionCount"`

	// connectionCount is the number of live connections of all the project's servers.
	// +optional
	ConnectionCount int32 `json:"connectionCount,omitempty"`

	// sessions lists the newest session bindings (at most 20; sessionCount has the total).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=20
	Sessions []SessionBinding `json:"sessions,omitempty"`

	// lastHandledReconnectAt is the value of the reconnect-requested-at annotation the
	// controller last acted on. Each value is acted on once, even when writing this field fails
	// at first.
	// +optional
	LastHandledReconnectAt string `json:"lastHandledReconnectAt,omitempty"`

	// owner is the replica serving the project: the holder of its bucket's Lease, and the
	// epoch it holds it in. Only the holder writes status, and the API server refuses a write
	// from an earlier epoch of the same Lease, so a replica that lost the bucket cannot
	// overwrite what the next holder wrote.
	// +optional
	Owner *ProjectOwner `json:"owner,omitempty"`
}

// ProjectOwner names the replica that serves a project and fences its status writes.
// +kubebuilder:validation:XValidation:rule="self.bucket != oldSelf.bucket || self.epoch >= oldSelf.epoch",message="status.owner.epoch must not go back within a bucket: the write comes from a replica that no longer holds the project's bucket"
type ProjectOwner struct {
	// replica is the identity of the replica holding the bucket's Lease.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Replica string `json:"replica"`
	// bucket is the project's bucket: its Lease is projectmcp-bucket-<bucket>.
	// +required
	// +kubebuilder:validation:Minimum=0
	Bucket int32 `json:"bucket"`
	// epoch grows with every new holder of the bucket's Lease: the Lease's creation time in
	// seconds times 10⁶ plus its transitions, so that a Lease made again counts on from the
	// one before.
	// +required
	// +kubebuilder:validation:Minimum=0
	Epoch int64 `json:"epoch"`
}

// ServerStatus is the observed state of one server's connection. Whether a connection exists
// (phase) and how many sessions use it (sessions) are two separate facts.
type ServerStatus struct {
	// name of the server in spec.
	// +required
	Name string `json:"name"`

	// phase of the server's connection.
	// +optional
	Phase ServerPhase `json:"phase,omitempty"`

	// connection identifies the live connection; it changes on every create, repoint and
	// rebuild, and is empty while none is held.
	// +optional
	Connection string `json:"connection,omitempty"`

	// configHash is a hash of the server's unexpanded configuration; a change means repoint.
	// +optional
	ConfigHash string `json:"configHash,omitempty"`

	// toolCount is the number of the server's tools offered to sessions.
	// +optional
	ToolCount int32 `json:"toolCount,omitempty"`

	// tools are the projected names of the offered tools (at most 64; toolCount has the total).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Tools []string `json:"tools,omitempty"`

	// share is the server's sharing scope in force: spec's share, or the default chosen for it.
	// +optional
	Share Share `json:"share,omitempty"`

	// connections is the number of live connections the server has (one at most under share
	// project; one per principal, session or working tree otherwise).
	// +optional
	Connections int32 `json:"connections,omitempty"`

	// sessions is the number of session slots bound to the connection.
	// +optional
	Sessions int32 `json:"sessions,omitempty"`

	// sandbox names the layers of a stdio server's sandbox in force (its uid among them) and,
	// after "missing:", those this controller cannot give it; the controller's log says why
	// (--sandbox). Empty without a sandbox.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Sandbox string `json:"sandbox,omitempty"`

	// endpoint is the URL of the server's own endpoint: its tools, prompts and resources under
	// the names the server gives them, as a client connected to it directly sees them.
	// +optional
	Endpoint string `json:"endpoint,omitempty"`

	// waiting is how many sessions' requests wait for their turn on the connection
	// (--max-calls-per-session, --max-calls-per-server), as of this status; it is written when
	// a queue forms, doubles or is gone, not at every change.
	// +optional
	Waiting int32 `json:"waiting,omitempty"`

	// waited counts the sessions' requests that have had to wait for their turn on the
	// connection (since it was made).
	// +optional
	Waited int64 `json:"waited,omitempty"`

	// reconnectAttempts counts reconnect attempts since the connection was last ready.
	// +optional
	ReconnectAttempts int32 `json:"reconnectAttempts,omitempty"`

	// lastError is the most recent connection error, with secret values never included.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	LastError string `json:"lastError,omitempty"`

	// message explains the phase to a person (e.g. skipped tools or name collisions).
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`

	// lastTransitionTime is when the phase last changed.
	// +optional
	LastTransitionTime *metav1.Time `json:"lastTransitionTime,omitempty"`

	// credential is the state of the server's OAuth grant (a server with oauth): never a token.
	// +optional
	Credential *CredentialStatus `json:"credential,omitempty"`

	// lastRebuild records the last rebuild a session's mount started because it found the
	// connection dead (the rebuild at mount of docs/lifecycle-contracts.md; rebuilds the
	// controller decides are recorded as events).
	// +optional
	LastRebuild *RebuildStatus `json:"lastRebuild,omitempty"`
}

// CredentialStatus is the state of a server's OAuth grant, which the controller keeps: the
// token's expiry and scopes, never a token.
type CredentialStatus struct {
	// secret is the name of the grant's Secret (projectmcp login writes it).
	// +required
	Secret string `json:"secret"`

	// state is Ready, Expiring (the token nears its expiry and the last refresh failed),
	// RefreshFailed (it has expired and refreshes are retried), Missing (no grant) or Invalid
	// (the authorization server refused it): the last two need projectmcp login.
	// +optional
	State string `json:"state,omitempty"`

	// expiresAt is when the access token expires.
	// +optional
	ExpiresAt *metav1.Time `json:"expiresAt,omitempty"`

	// refreshedAt is when the controller last refreshed the token.
	// +optional
	RefreshedAt *metav1.Time `json:"refreshedAt,omitempty"`

	// scopes the token was granted.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	Scopes []string `json:"scopes,omitempty"`

	// conditions: CredentialReady, CredentialExpiring, CredentialRefreshFailed.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// RebuildStatus says when and why a connection was rebuilt.
type RebuildStatus struct {
	// reason is DeadAtMount: a session's mount found the connection Failed, or Ready offering
	// nothing (no tool, prompt or resource) for more than 5 s, and rebuilt it before answering
	// the session.
	// +required
	Reason string `json:"reason"`

	// time the rebuild started.
	// +required
	Time metav1.Time `json:"time"`

	// connection is the id of the connection the rebuild built.
	// +optional
	Connection string `json:"connection,omitempty"`

	// message says why the old connection counted as dead.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// SessionBinding is one agent session and the connection each of its slots is bound to.
type SessionBinding struct {
	// id names the session by a hash of its wire identity (s- and 16 hex digits), never by
	// its Mcp-Session-Id or session header: what status publishes cannot be sent back to act
	// as the session.
	// +required
	ID string `json:"id"`

	// client is the session's MCP client name and version, as it announced them.
	// +optional
	Client string `json:"client,omitempty"`

	// boundAt is when the session mounted.
	// +optional
	BoundAt metav1.Time `json:"boundAt,omitempty"`

	// slots map each server to the connection the session's calls go to.
	// +optional
	// +listType=atomic
	Slots []SlotBinding `json:"slots,omitempty"`
}

// SlotBinding is one session's binding to one server's connection.
type SlotBinding struct {
	// server name.
	// +required
	Server string `json:"server"`

	// connection id the slot points at.
	// +optional
	Connection string `json:"connection,omitempty"`
}

// ProjectMCP mirrors one project's .dsh/mcp.json: the controller keeps one live MCP connection
// per server and serves them to the project's agent sessions through one gateway endpoint.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=pmcp,categories=mcp
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Servers",type=string,JSONPath=`.status.readyServers`
// +kubebuilder:printcolumn:name="Tools",type=integer,JSONPath=`.status.toolCount`
// +kubebuilder:printcolumn:name="Sessions",type=integer,JSONPath=`.status.sessionCount`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.status.endpoint`,priority=1
// +kubebuilder:printcolumn:name="Connections",type=integer,JSONPath=`.status.connectionCount`,priority=1
// +kubebuilder:printcolumn:name="Owner",type=string,JSONPath=`.status.owner.replica`,priority=1
type ProjectMCP struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired servers.
	// +optional
	Spec ProjectMCPSpec `json:"spec,omitempty"`

	// status is what the controller holds.
	// +optional
	Status ProjectMCPStatus `json:"status,omitempty"`
}

// ProjectMCPList is a list of ProjectMCP.
//
// +kubebuilder:object:root=true
type ProjectMCPList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ProjectMCP `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ProjectMCP{}, &ProjectMCPList{})
}
