package v1alpha1

import "time"

// Condition types of ProjectMCP.
const (
	// ConditionReady is True when every enabled server's connection is Ready (or reclaimed
	// while idle, which a session's mount brings back) and False when some server is
	// Connecting, Disconnected or Failed.
	ConditionReady = "Ready"
	// ConditionDegraded is True when some server is Disconnected or Failed: sessions work, but
	// without that server's tools.
	ConditionDegraded = "Degraded"
	// ConditionConfigSynced is set by the mirror: True when the spec matches the project's
	// .dsh/mcp.json, False (with the file's line and column) when the file is invalid and the
	// last good spec is kept.
	ConditionConfigSynced = "ConfigSynced"
	// ConditionSharedStatefulServer is True when a server known to keep state per client
	// (docs/sharing.md) is set to share project and more than one session is bound to it: the
	// sessions drive one server-side state. The message names the servers.
	ConditionSharedStatefulServer = "SharedStatefulServer"
)

// Condition types of a server's credential (status.servers[].credential.conditions).
const (
	// ConditionCredentialReady is True when the controller holds a token for the server.
	ConditionCredentialReady = "CredentialReady"
	// ConditionCredentialExpiring is True when the token nears its expiry and the last refresh
	// failed: calls work until it expires.
	ConditionCredentialExpiring = "CredentialExpiring"
	// ConditionCredentialRefreshFailed is True when the last refresh failed; the message says
	// why, and what to run when only a new login helps.
	ConditionCredentialRefreshFailed = "CredentialRefreshFailed"
)

// Event reasons of a server's credential.
const (
	// EventCredentialRefreshed: the controller refreshed a server's token.
	EventCredentialRefreshed = "CredentialRefreshed"
	// EventCredentialRefreshFailed: a refresh failed, or the grant needs a new login.
	EventCredentialRefreshFailed = "CredentialRefreshFailed"
)

// Condition reasons of ProjectMCP. Reasons are CamelCase as metav1.Condition requires.
const (
	// ReasonAllServersReady: Ready=True, every enabled server is connected.
	ReasonAllServersReady = "AllServersReady"
	// ReasonNoServers: Ready=True, the project lists no enabled server.
	ReasonNoServers = "NoServers"
	// ReasonServersWithoutTools: Ready=False and Degraded=True when some server is connected
	// but has listed nothing (no tool, prompt, resource or resource template) for more than
	// 5 s: it counts as dead, and a later session's mount rebuilds it. (A server that offers
	// only prompts or resources is not without tools in this sense.)
	ReasonServersWithoutTools = "ServersWithoutTools"
	// ReasonServersConnecting: Ready=False while some server is still connecting.
	ReasonServersConnecting = "ServersConnecting"
	// ReasonServersUnavailable: Ready=False and Degraded=True when some server is
	// Disconnected or Failed.
	ReasonServersUnavailable = "ServersUnavailable"
	// ReasonAsExpected: Degraded=False.
	ReasonAsExpected = "AsExpected"
	// ReasonConfigApplied: ConfigSynced=True.
	ReasonConfigApplied = "ConfigApplied"
	// ReasonConfigInvalid: ConfigSynced=False, the file did not parse; the message names the
	// file, line and column.
	ReasonConfigInvalid = "ConfigInvalid"
	// ReasonConfigMissing: the project's .dsh/mcp.json does not exist; its servers are retired.
	ReasonConfigMissing = "ConfigMissing"
	// ReasonStatefulServerShared: SharedStatefulServer=True, some server known to keep state
	// per client is set to share project and has more than one session bound.
	ReasonStatefulServerShared = "StatefulServerShared"
	// ReasonNoStatefulServerShared: SharedStatefulServer=False.
	ReasonNoStatefulServerShared = "NoStatefulServerShared"
)

// Event reasons: one per reconcile action and connection outcome.
const (
	EventCreated       = "Created"
	EventRepointed     = "Repointed"
	EventRetired       = "Retired"
	EventRebuilt       = "Rebuilt"
	EventIdleReclaimed = "IdleReclaimed"
	EventConnectFailed = "ConnectFailed"
)

// RebuildReasonDeadAtMount is status.servers[].lastRebuild.reason, and the action of the
// Rebuilt event, when a session's mount found the connection dead and rebuilt it.
const RebuildReasonDeadAtMount = "DeadAtMount"

// Annotations the controller reads.
const (
	// AnnotationReconnectRequestedAt asks the controller to rebuild connections now; the value
	// is an opaque token, conventionally an RFC 3339 time. The controller acts once per
	// distinct value and records it in status.lastHandledReconnectAt. `projectmcp reconnect`
	// sets it.
	AnnotationReconnectRequestedAt = "mcp.dsh.dev/reconnect-requested-at"
	// AnnotationReconnectServers narrows a reconnect request to a comma-separated list of
	// server names; absent or empty means every server.
	AnnotationReconnectServers = "mcp.dsh.dev/reconnect-servers"
	// AnnotationAllowedProjects, on a Secret, lists the ProjectMCPs of its namespace whose
	// spec.secretRef may use it: comma-separated names, or "*" for every one. A Secret without
	// it serves no ProjectMCP.
	AnnotationAllowedProjects = "mcp.dsh.dev/allowed-projects"
	// AnnotationAllowedDestinations, on a Secret, lists where its values may go, separated by
	// commas or newlines: a remote server's origin (https://api.example.com, no path) or a
	// stdio server's command line (its command and args, one space apart). A server whose
	// destination it does not list gets none of the Secret's values, whatever
	// AnnotationAllowedProjects says.
	AnnotationAllowedDestinations = "mcp.dsh.dev/allowed-destinations"
)

// Finalizer makes deleting a ProjectMCP wait until its connections are retired and their
// processes have exited.
const Finalizer = "mcp.dsh.dev/connections"

// Defaults, matching the CRD's defaults for objects created before defaulting or by the fake
// client.
const (
	DefaultIdleTimeout    = 5 * time.Minute
	DefaultReadyTimeout   = 5 * time.Second
	DefaultMaxAttempts    = int32(5)
	DefaultInitialBackoff = 500 * time.Millisecond
	DefaultMaxBackoff     = 30 * time.Second
)
