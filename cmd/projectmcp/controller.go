package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/time/rate"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/controllers"
	"github.com/dsh-dev/projectmcp/internal/audit"
	"github.com/dsh-dev/projectmcp/internal/buckets"
	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/gateway"
	"github.com/dsh-dev/projectmcp/internal/gateway/access"
	"github.com/dsh-dev/projectmcp/internal/httpserve"
	"github.com/dsh-dev/projectmcp/internal/metrics"
	"github.com/dsh-dev/projectmcp/internal/peer"
	"github.com/dsh-dev/projectmcp/internal/policy"
	"github.com/dsh-dev/projectmcp/internal/reaper"
	"github.com/dsh-dev/projectmcp/internal/registry"
	"github.com/dsh-dev/projectmcp/internal/sandbox"
	"github.com/dsh-dev/projectmcp/internal/toolname"
	"github.com/dsh-dev/projectmcp/internal/tracing"
)

// controllerFlags are the flags of `projectmcp controller`; `projectmcp dev` binds the same
// definitions with its own defaults.
type controllerFlags struct {
	kubeconfig       string // the global --kubeconfig
	metricsAddr      string
	metricsSecure    bool
	projectLabels    bool // --metrics-project-labels
	probeAddr        string
	pprofAddr        string
	leaderElect      bool
	leaderElectNS    string
	leaseDuration    time.Duration
	renewDeadline    time.Duration
	retryPeriod      time.Duration
	buckets          int
	handoffTimeout   time.Duration
	advertise        string
	replicaTokenFile string
	gatewayAddr      string
	gatewayURL       string
	gatewayAuth      string
	gatewayTLSCert   string
	gatewayTLSKey    string
	audiences        []string
	issuers          []string
	oauthScopes      []string
	reviewTTL        time.Duration
	newTokenRate     float64
	sourceRate       float64
	localUIDs        []int
	localAnyUID      bool
	sessionTimeout   time.Duration
	statelessIdle    time.Duration
	maxBodyBytes     int64
	callTimeout      time.Duration
	maxSessions      int
	maxConnsServer   int // --max-connections-per-server
	maxConnsUser     int // --max-connections-per-principal
	maxPerUser       int
	maxSubsEach      int
	maxToolName      int
	auditLog         string
	auditArgs        bool
	rootBase         string
	allowCommands    []string
	allowAny         bool
	serverEnv        []string
	serverUID        string
	serverGID        string
	serverHome       string // not a flag: dev gives servers the user's own HOME
	sandbox          bool
	serverUIDRange   string
	serverMemory     string
	serverPids       int64
	serverCPU        string
	hide             []string // not a flag: files of the controller's no sandboxed server sees (the kubeconfig, dev's data)
	allowURLs        []string
	denyURLs         []string
	allowLoopback    bool // not a flag: dev's servers run on the same machine
	zap              zap.Options
	// conn are the connections' settings the flags set; AllowCommands and Isolation are made
	// from the flags above (connDefaults).
	conn conn.Settings
}

// defaultControllerFlags are the defaults of `projectmcp controller`.
func defaultControllerFlags() controllerFlags {
	return controllerFlags{
		metricsAddr:    "127.0.0.1:8080",
		probeAddr:      "127.0.0.1:8081",
		pprofAddr:      "0",
		leaderElect:    true,
		leaseDuration:  15 * time.Second,
		renewDeadline:  10 * time.Second,
		retryPeriod:    2 * time.Second,
		buckets:        buckets.DefaultBuckets,
		handoffTimeout: 30 * time.Second,
		gatewayAddr:    "127.0.0.1:8484",
		gatewayAuth:    "local",
		reviewTTL:      30 * time.Second,
		newTokenRate:   access.DefaultNewTokenRate,
		sourceRate:     access.DefaultSourceRate,
		sessionTimeout: 30 * time.Minute,
		statelessIdle:  10 * time.Minute,
		maxBodyBytes:   4 << 20,
		callTimeout:    30 * time.Minute,
		maxSessions:    1000,
		maxConnsServer: registry.DefaultMaxConnectionsPerServer,
		maxConnsUser:   registry.DefaultMaxConnectionsPerPrincipal,
		maxSubsEach:    gateway.DefaultMaxSubscriptionsPerSession,
		maxToolName:    toolname.DefaultBudget,
		serverMemory:   "1Gi",
		serverPids:     1024,
		conn:           conn.DefaultSettings(),
		// Outside a cluster the controller runs as the user, with the user's commands.
		allowAny: !runningInCluster(),
	}
}

// bind defines the controller's flags on fs, each defaulting to f's current value, except the
// flags named in omit.
func (f *controllerFlags) bind(fs *pflag.FlagSet, omit ...string) {
	all := pflag.NewFlagSet("controller", pflag.ContinueOnError)
	all.StringVar(&f.metricsAddr, "metrics-bind-address", f.metricsAddr, `metrics endpoint address ("0" disables)`)
	all.BoolVar(&f.metricsSecure, "metrics-secure", f.metricsSecure, `serve /metrics over HTTPS (a self-signed certificate) to callers whose bearer token passes a TokenReview and who may "get" the non-resource URL /metrics (a SubjectAccessReview; the ClusterRole projectmcp-metrics-reader grants it)`)
	all.BoolVar(&f.projectLabels, "metrics-project-labels", f.projectLabels, "label metrics with the project's namespace and name (project_namespace, project): series for every project")
	all.StringVar(&f.probeAddr, "health-probe-bind-address", f.probeAddr, `healthz/readyz address ("0" disables)`)
	all.StringVar(&f.pprofAddr, "pprof-bind-address", f.pprofAddr, `address of Go's /debug/pprof endpoints, for profiling a live controller ("0" disables; keep it on loopback: it has no authentication)`)
	all.BoolVar(&f.leaderElect, "leader-elect", f.leaderElect, "share the projects with the other replicas by bucket Leases (projectmcp-bucket-<k>): each serves the projects of the buckets it holds and proxies the others' (off: this process serves every project)")
	all.StringVar(&f.leaderElectNS, "leader-election-namespace", f.leaderElectNS, "namespace of the Leases (default: the pod's in a cluster, else the kubeconfig context's)")
	all.DurationVar(&f.leaseDuration, "leader-elect-lease-duration", f.leaseDuration, "how long the others wait after a replica's last renewal before taking its buckets: the longest a dead replica's projects go unserved")
	all.DurationVar(&f.renewDeadline, "leader-elect-renew-deadline", f.renewDeadline, "how long a replica keeps trying to renew a bucket before it stops serving its projects (less than the lease duration)")
	all.DurationVar(&f.retryPeriod, "leader-elect-retry-period", f.retryPeriod, "how often a replica renews its buckets and tries to take its share")
	all.IntVar(&f.buckets, "buckets", f.buckets, "how many buckets the projects are spread over (every replica the same); a project's bucket is a hash of its namespace and name, or its label mcp.dsh.dev/bucket")
	all.DurationVar(&f.handoffTimeout, "handoff-timeout", f.handoffTimeout, "bound on handing one bucket off (a rebalance, a shutdown): its calls drained, its sessions closed, its servers stopped")
	all.StringVar(&f.replicaTokenFile, "replica-token-file", f.replicaTokenFile, "a token of the controller's service account for the audience "+buckets.ReplicaAudience+" (a projected serviceAccountToken, reread as the kubelet renews it): sent with every request proxied to another replica, which believes what such a request says of its client only from a replica whose token a TokenReview names as its own identity (unset: from any connection at a replica's address)")
	all.StringVar(&f.advertise, "advertise-address", f.advertise, "host:port other replicas reach this one's gateway at (default: the bind address, or POD_IP and its port when it binds every address)")
	all.DurationVar(&f.conn.ConnectTimeout, "connect-timeout", f.conn.ConnectTimeout, "bound on one connect attempt (initialize and first tools/list)")
	all.DurationVar(&f.conn.HealthInterval, "health-interval", f.conn.HealthInterval, "how often an idle connection is probed")
	all.DurationVar(&f.conn.RelistInterval, "relist-interval", f.conn.RelistInterval, "backstop tools/list interval")
	all.StringVar(&f.gatewayAddr, "gateway-bind-address", f.gatewayAddr, `address of the per-project MCP endpoints ("0" disables the gateway)`)
	all.StringVar(&f.gatewayURL, "gateway-url", f.gatewayURL, "URL clients reach the gateway at, written to status.endpoint (default: http://<bind address>, https:// when the gateway serves TLS)")
	all.StringVar(&f.gatewayTLSCert, "gateway-tls-cert", f.gatewayTLSCert, "PEM certificate (chain) file the gateway serves HTTPS with, reread when it changes (with --gateway-tls-key)")
	all.StringVar(&f.gatewayTLSKey, "gateway-tls-key", f.gatewayTLSKey, "PEM private key file of --gateway-tls-cert, reread when it changes")
	all.StringVar(&f.gatewayAuth, "gateway-auth", f.gatewayAuth, `"local": loopback callers only; "kubernetes": bearer token checked by TokenReview, verb "use" on the ProjectMCP checked by SubjectAccessReview`)
	all.StringSliceVar(&f.issuers, "gateway-oauth-issuer", nil, "with --gateway-auth kubernetes, an OIDC issuer URL the endpoints' protected-resource metadata (RFC 9728) names as where OAuth clients sign in (repeatable or comma-separated): one the API server trusts (its structured authentication configuration), so its tokens pass the TokenReview")
	all.StringSliceVar(&f.oauthScopes, "gateway-oauth-scope", nil, "with --gateway-oauth-issuer, a scope a token from the issuers needs (repeatable or comma-separated), named in the metadata and in the 401's challenge")
	all.StringSliceVar(&f.audiences, "gateway-audience", f.audiences, "audience a bearer token must be for, with --gateway-auth kubernetes (repeatable or comma-separated): set one such as projectmcp and mint tokens with \"kubectl create token <sa> --audience projectmcp\", so tokens for the gateway cannot call the API server (default: the API server's own audiences)")
	all.DurationVar(&f.reviewTTL, "gateway-review-ttl", f.reviewTTL, "how long the gateway trusts a token review or an access review before asking again: the longest a revoked token or a removed RoleBinding keeps working")
	all.Float64Var(&f.newTokenRate, "gateway-new-token-reviews", f.newTokenRate, "TokenReviews a second of tokens the gateway has not seen, all callers together (burst twice as many); past it such a request gets 429 at once")
	all.Float64Var(&f.sourceRate, "gateway-new-token-reviews-per-source", f.sourceRate, "TokenReviews a second of tokens the gateway has not seen, per caller address (an IPv6 caller's /64; burst four times as many); behind a proxy every caller has the proxy's address")
	all.IntSliceVar(&f.localUIDs, "local-allow-uid", f.localUIDs, "with --gateway-auth local, the id of a local user besides the controller's own whose processes may use the gateway (repeatable or comma-separated)")
	all.BoolVar(&f.localAnyUID, "local-allow-any-uid", f.localAnyUID, "with --gateway-auth local, admit the processes of every local user, and callers whose user the system cannot name (by default only the controller's own user's are admitted)")
	all.DurationVar(&f.sessionTimeout, "session-timeout", f.sessionTimeout, "release a session that sent no request for this long")
	all.DurationVar(&f.statelessIdle, "stateless-session-idle", f.statelessIdle, "release a stateless (2026-07-28) session that sent no request for this long")
	all.Int64Var(&f.maxBodyBytes, "max-request-bytes", f.maxBodyBytes, "largest request body the gateway accepts")
	all.DurationVar(&f.callTimeout, "call-timeout", f.callTimeout, `bound on one forwarded request (a tool call, a prompt, a read); "0" means none`)
	all.IntVar(&f.maxSessions, "max-sessions-per-project", f.maxSessions, "most sessions one project may have at once; a session past it is refused at initialize (0: no bound)")
	all.IntVar(&f.maxConnsServer, "max-connections-per-server", f.maxConnsServer, "most connections one server of a project may have under share principal or session; a session past it gets no connection to that server and its calls an error naming the server, its scope and this bound (0: no bound)")
	all.IntVar(&f.maxConnsUser, "max-connections-per-principal", f.maxConnsUser, "most connections one identity's sessions may hold on one project under share principal or session, all servers together; a session past it gets no connection to the server and its calls an error naming the server, its scope and this bound (0: no bound)")
	all.IntVar(&f.conn.MaxCallsPerSession, "max-calls-per-session", f.conn.MaxCallsPerSession, "most requests one session may have in flight on one server's connection; past it its requests wait their turn, so one busy session cannot crowd out the others (0: the default)")
	all.IntVar(&f.conn.MaxCalls, "max-calls-per-server", f.conn.MaxCalls, "most sessions' requests in flight on one server's connection; past it requests wait, and freed slots go round the waiting sessions in turn (0: the default)")
	all.StringVar(&f.rootBase, "project-root-base", f.rootBase, "directory a project's spec.project must lie in to be given to its servers as their root (roots/list); a project outside it gives them no roots (empty: any absolute path)")
	all.IntVar(&f.maxSubsEach, "max-subscriptions-per-session", f.maxSubsEach, "most resources one session may subscribe to; a subscribe past it is refused with an error naming the limit (0: the default)")
	all.StringVar(&f.auditLog, "audit-log", "", `write an audit record (a JSON line: time, principal, project, server, method, tool/prompt/URI, outcome, duration, session hash, policy and decision) for every use of a tool, prompt or resource to this file, or "-" for standard output; "" writes none`)
	all.BoolVar(&f.auditArgs, "audit-arguments", false, "with --audit-log, record the arguments of tool calls and prompts too (they may hold what agents were told not to share)")
	all.IntVar(&f.maxToolName, "max-tool-name", f.maxToolName, fmt.Sprintf("longest tool or prompt name the project endpoint lists, %d to %d: a longer <server>__<tool> is cut and marked with a hash (the default leaves room for Claude Code's mcp__projectmcp__ in 64 characters)", toolname.MinBudget, toolname.MaxLength))
	all.IntVar(&f.maxPerUser, "max-sessions-per-principal", f.maxPerUser, "most sessions one identity may have in one project at once, on all its endpoints together (the project's and each server's), so one user cannot fill --max-sessions-per-project; a session past it is refused at its mount (0: a tenth of --max-sessions-per-project, so it takes ten identities to fill a project, or 100 when that has no bound)")
	all.Int64Var(&f.conn.MaxMessageBytes, "max-message-bytes", f.conn.MaxMessageBytes, "largest message a server may send (an answer, a list page, a notification); an answer over it fails that request only and the connection goes on, anything else over it is dropped (0: the default)")
	all.IntVar(&f.conn.MaxListItems, "max-list-items", f.conn.MaxListItems, "most tools, prompts, resources or resource templates one server may list (each list apart); a server listing more is refused (0: the default)")
	all.IntVar(&f.conn.MaxListPages, "max-list-pages", f.conn.MaxListPages, "most pages one walk through a server's list may take; a server whose nextCursor goes on past it is refused (0: the default)")
	all.Int64Var(&f.conn.MaxListBytes, "max-list-bytes", f.conn.MaxListBytes, "largest JSON size of one list a server offers, all its pages together (after the tools filter); a server listing more is refused (0: the default)")
	all.Int64Var(&f.conn.MaxSchemaBytes, "max-schema-bytes", f.conn.MaxSchemaBytes, "largest JSON size of one tool's input and output schemas together; a tool over it is left out (the server's status message names it) and the server's other tools are offered (0: the default)")
	all.StringArrayVar(&f.allowCommands, "allow-command", f.allowCommands, "glob of a stdio command servers may run (repeatable); with none, stdio servers are refused in a cluster")
	all.BoolVar(&f.allowAny, "allow-any-command", f.allowAny, "run any stdio command (the default outside a cluster, where the controller runs as the user)")
	all.StringArrayVar(&f.serverEnv, "server-env", f.serverEnv, "name of a variable of the controller's environment that stdio servers also get (repeatable; they always get PATH, LANG, TMPDIR and a HOME of their own)")
	all.StringVar(&f.serverUID, "server-uid", f.serverUID, "run stdio servers as this user id (the controller needs CAP_SETUID, CAP_SETGID, CAP_KILL and CAP_CHOWN, e.g. uid 0 with all other capabilities dropped)")
	all.StringVar(&f.serverGID, "server-gid", f.serverGID, "run stdio servers with this group id (default: --server-uid's value)")
	all.BoolVar(&f.sandbox, "sandbox", f.sandbox, "run each stdio server in a sandbox of its own: user, PID, mount and network namespaces (its own /proc and /tmp, read-only outside its HOME, the controller's kubeconfig and token hidden, its only way out a proxy applying --allow-url and --deny-url), Landlock and cgroups, each layer the kernel and the controller's privileges allow (the log and every server's status name those in force and those not)")
	all.StringVar(&f.serverUIDRange, "server-uid-range", f.serverUIDRange, "with --sandbox, the uids (FIRST-LAST, e.g. 100000-165535) the servers of each project run as: one of its own per project, a hash of its namespace and name (the controller needs CAP_SETUID and CAP_SETGID)")
	all.StringVar(&f.serverMemory, "server-memory-limit", f.serverMemory, `with --sandbox, the memory each stdio server may use, its processes together (a quantity: 512Mi, 2Gi; "0": no limit of its own); past it the kernel kills it alone, its status says OOMKilled and it is rebuilt within its reconnect budget`)
	all.Int64Var(&f.serverPids, "server-pids-limit", f.serverPids, "with --sandbox, the most processes and threads each stdio server may have at once (0: no limit of its own)")
	all.StringVar(&f.serverCPU, "server-cpu-limit", f.serverCPU, `with --sandbox, the CPUs each stdio server may use (a quantity: 500m, 2; "0": no limit of its own)`)
	all.StringArrayVar(&f.allowURLs, "allow-url", f.allowURLs, "URL pattern (https://*.example.com, http://10.0.0.5:*/mcp) or address range (10.0.0.0/8) HTTP and SSE servers may reach (repeatable); with none, any but loopback, link-local and cloud metadata services (also when carried in NAT64 or 6to4 addresses)")
	all.StringArrayVar(&f.denyURLs, "deny-url", f.denyURLs, "URL pattern or address range HTTP and SSE servers may not reach (repeatable)")
	zapFlags := flag.NewFlagSet("zap", flag.ContinueOnError)
	f.zap.BindFlags(zapFlags)
	all.AddGoFlagSet(zapFlags)
	all.VisitAll(func(fl *pflag.Flag) {
		if !slices.Contains(omit, fl.Name) {
			fs.AddFlag(fl)
		}
	})
}

// egress is where HTTP and SSE servers may be reached, from --allow-url and --deny-url.
func (f *controllerFlags) egress() (*policy.Egress, error) {
	e := &policy.Egress{Loopback: f.allowLoopback}
	for _, list := range []struct {
		flag string
		raw  []string
		into *[]policy.URLPattern
	}{{"--allow-url", f.allowURLs, &e.Allow}, {"--deny-url", f.denyURLs, &e.Deny}} {
		for _, raw := range list.raw {
			p, err := policy.ParseURLPattern(raw)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", list.flag, err)
			}
			*list.into = append(*list.into, p)
		}
	}
	return e, nil
}

// isolation is what stdio servers get from the controller, from --server-env, --server-uid and
// --server-gid; an error names the flag that is wrong.
func (f *controllerFlags) isolation() (policy.Isolation, error) {
	iso := policy.Isolation{Home: f.serverHome}
	for _, name := range f.serverEnv {
		if !policy.ValidEnvName(name) {
			return iso, fmt.Errorf("--server-env %q: not a variable name", name)
		}
		if name == "HOME" {
			return iso, errors.New(`--server-env "HOME": a server's HOME is always a directory of its own`)
		}
		iso.PassEnv = append(iso.PassEnv, name)
	}
	if f.serverUID == "" && f.serverGID == "" {
		return iso, nil
	}
	if f.serverUID == "" {
		return iso, errors.New("--server-gid needs --server-uid")
	}
	uid, err := strconv.ParseUint(f.serverUID, 10, 32)
	if err != nil {
		return iso, fmt.Errorf("--server-uid %q: not a numeric user id", f.serverUID)
	}
	gid := uid
	if f.serverGID != "" {
		if gid, err = strconv.ParseUint(f.serverGID, 10, 32); err != nil {
			return iso, fmt.Errorf("--server-gid %q: not a numeric group id", f.serverGID)
		}
	}
	iso.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	if err := iso.CheckCapabilities(); err != nil {
		return iso, fmt.Errorf("--server-uid: %w", err)
	}
	return iso, nil
}

// sandboxOf is the stdio servers' sandbox from --sandbox and --server-uid-range (nil when off),
// the servers mapped to fallback without a uid of their project's own. It probes the kernel,
// and logs the layers in force and why each other one is not.
func (f *controllerFlags) sandboxOf(fallback *syscall.Credential) (*sandbox.Sandbox, error) {
	if !f.sandbox {
		if f.serverUIDRange != "" {
			return nil, errors.New("--server-uid-range needs --sandbox")
		}
		return nil, nil
	}
	var r *sandbox.Range
	if f.serverUIDRange != "" {
		parsed, err := sandbox.ParseRange(f.serverUIDRange)
		if err != nil {
			return nil, fmt.Errorf("--server-uid-range %w", err) // the error quotes the value
		}
		r = &parsed
	}
	limits, err := f.serverLimits()
	if err != nil {
		return nil, err
	}
	facts := sandbox.Probe(true, r != nil)
	sb := sandbox.New(facts, r, fallback, f.hidden(), limits)
	ctrl.Log.WithName("sandbox").Info("Stdio servers run in a sandbox", "layers", sandbox.Summary(sb.Layers))
	return sb, nil
}

// serverLimits are each sandboxed server's limits, from --server-memory-limit,
// --server-pids-limit and --server-cpu-limit.
func (f *controllerFlags) serverLimits() (sandbox.Limits, error) {
	var l sandbox.Limits
	for _, q := range []struct {
		flag, value string
		set         func(resource.Quantity)
	}{
		{"--server-memory-limit", f.serverMemory, func(q resource.Quantity) { l.Memory = q.Value() }},
		{"--server-cpu-limit", f.serverCPU, func(q resource.Quantity) { l.CPU = float64(q.MilliValue()) / 1000 }},
	} {
		if q.value == "" {
			continue
		}
		parsed, err := resource.ParseQuantity(q.value)
		if err != nil || parsed.Sign() < 0 {
			return l, fmt.Errorf("%s %q: not a quantity such as 512Mi or 500m", q.flag, q.value)
		}
		q.set(parsed)
	}
	if f.serverPids < 0 {
		return l, errors.New("--server-pids-limit must not be negative (0: no limit)")
	}
	l.Pids = f.serverPids
	return l, nil
}

// hidden are the controller's files no sandboxed server sees: its ServiceAccount's token, its
// kubeconfig wherever it comes from, the keys of its flags, and what dev keeps.
func (f *controllerFlags) hidden() []string {
	paths := []string{"/var/run/secrets", "/run/secrets"}
	paths = append(paths, filepath.SplitList(os.Getenv("KUBECONFIG"))...)
	if home, err := os.UserHomeDir(); err == nil {
		paths = append(paths, filepath.Join(home, ".kube"))
	}
	paths = append(paths, f.replicaTokenFile, f.gatewayTLSKey)
	paths = append(paths, f.hide...)
	var out []string
	for _, p := range paths {
		if p != "" && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// electionNamespace makes sharing by buckets work with no extra flags: in a cluster the Leases
// live in the pod's namespace; outside one, in the namespace of the kubeconfig's current
// context ("default" when it names none). It says which, first thing.
func (f *controllerFlags) electionNamespace() error {
	log := ctrl.Log.WithName("setup")
	if !f.leaderElect {
		log.Info("Sharing by buckets off: this process serves every ProjectMCP it sees")
		return nil
	}
	source := "flag"
	if f.leaderElectNS == "" {
		if runningInCluster() {
			log.Info("Sharing projects by bucket Leases", "buckets", f.buckets, "namespace", "the pod's", "source", "in-cluster")
			return nil
		}
		ns, err := kubeconfigNamespace(f.kubeconfig)
		if err != nil {
			return fmt.Errorf("bucket Leases: %w (or set --leader-election-namespace, or --leader-elect=false)", err)
		}
		f.leaderElectNS, source = ns, "kubeconfig context (not running in a cluster)"
	}
	log.Info("Sharing projects by bucket Leases", "buckets", f.buckets, "namespace", f.leaderElectNS, "source", source)
	return nil
}

// newScheme holds the types the controller reads and writes.
func newScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, v1alpha1.AddToScheme(s)
}

// checkLeaseTimings refuses lease timings the election cannot work with, naming the flags
// (client-go would refuse them too, without saying which flag is wrong).
func (f *controllerFlags) checkLeaseTimings() error {
	if !f.leaderElect {
		return nil
	}
	switch {
	case f.leaseDuration <= 0 || f.renewDeadline <= 0 || f.retryPeriod <= 0:
		return fmt.Errorf("--leader-elect-lease-duration (%s), --leader-elect-renew-deadline (%s) and --leader-elect-retry-period (%s) must be positive",
			f.leaseDuration, f.renewDeadline, f.retryPeriod)
	case f.renewDeadline >= f.leaseDuration:
		return fmt.Errorf("--leader-elect-renew-deadline (%s) must be less than --leader-elect-lease-duration (%s)", f.renewDeadline, f.leaseDuration)
	case float64(f.retryPeriod)*1.2 >= float64(f.renewDeadline): // client-go's jitter factor
		return fmt.Errorf("--leader-elect-retry-period (%s) must be less than --leader-elect-renew-deadline (%s) / 1.2", f.retryPeriod, f.renewDeadline)
	case f.renewDeadline+f.retryPeriod >= f.leaseDuration:
		// A replica notices it could not renew up to a retry period after the deadline: it
		// must have stopped serving before the others may take its buckets.
		return fmt.Errorf("--leader-elect-renew-deadline (%s) plus --leader-elect-retry-period (%s) must be less than --leader-elect-lease-duration (%s)",
			f.renewDeadline, f.retryPeriod, f.leaseDuration)
	}
	return nil
}

// metricsOptions serves /metrics on --metrics-bind-address; with --metrics-secure over TLS and
// to authenticated, authorized callers only (metricsauth.go).
func (f *controllerFlags) metricsOptions() (metricsserver.Options, error) {
	o := metricsserver.Options{BindAddress: f.metricsAddr}
	if !f.metricsSecure || f.metricsAddr == "0" {
		return o, nil
	}
	return metricsSecureOptions(o)
}

// newManager wires the registry, the reconciler and the gateway into a manager. The gateway is
// nil when it is off.
func newManager(cfg *rest.Config, f *controllerFlags) (mgr manager.Manager, gw *gateway.Gateway, err error) {
	scheme, err := newScheme()
	if err != nil {
		return nil, nil, err
	}
	connDefaults, err := f.connDefaults()
	if err != nil {
		return nil, nil, err
	}
	metricsOpts, err := f.metricsOptions()
	if err != nil {
		return nil, nil, err
	}
	mgr, err = ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsOpts,
		HealthProbeBindAddress: f.probeAddr,
		PprofBindAddress:       f.pprofAddr,
		// The buckets' Leases, not one leader's, say which replica serves what (buckets.go).
		LeaderElection: false,
		// Room for handing every bucket off, then the requests that still reach this replica.
		GracefulShutdownTimeout: ptr.To(f.handoffTimeout + f.renewDeadline + 4*f.retryPeriod + 5*time.Second),
	})
	if err != nil {
		return nil, nil, err
	}
	metrics.Configure(f.projectLabels)
	reg := registry.New(clock.RealClock{}, ctrl.Log.WithName("registry"))
	reg.LimitSessions(f.maxSessions)
	reg.LimitConnections(f.maxConnsServer, f.maxConnsUser)
	reg.ServeLocal(f.gatewayAuth == "local")
	metrics.SetSource(reg.Counts)
	r := &controllers.Reconciler{
		Client:      mgr.GetClient(),
		APIReader:   mgr.GetAPIReader(),
		Registry:    reg,
		Recorder:    mgr.GetEventRecorder("projectmcp"),
		Clock:       clock.RealClock{},
		Conn:        connDefaults,
		MaxToolName: f.maxToolName,
	}
	var ln net.Listener
	address := ""
	if f.gatewayAddr != "0" {
		// Bound now, so that a port of 0 is resolved before any endpoint is written to status.
		if ln, err = net.Listen("tcp", f.gatewayAddr); err != nil {
			return nil, nil, fmt.Errorf("gateway: %w", err)
		}
		if address, err = f.advertisedAddress(ln.Addr().String()); err != nil {
			ln.Close()
			return nil, nil, err
		}
	}
	var holder *buckets.Holder
	if f.leaderElect {
		if holder, err = f.newHolder(mgr, r, address); err != nil {
			if ln != nil {
				ln.Close()
			}
			return nil, nil, err
		}
		r.Owners = holder
		r.Lifetime = func(ctx context.Context) context.Context { return serveUntil(ctx, holder) }
	}
	if ln != nil {
		if gw, err = f.gateway(cfg, mgr, reg, ln.Addr().String(), holder); err != nil {
			ln.Close()
			return nil, nil, err
		}
		r.Endpoint = gw.Endpoint
		metrics.SetSessions(gw.SessionCounts)
		if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
			ctrl.Log.WithName("gateway").Info("Serving MCP endpoints", "address", ln.Addr().String())
			return gw.Serve(serveUntil(ctx, holder), ln)
		})); err != nil {
			return nil, nil, err
		}
	}
	if err := r.SetupWithManager(mgr); err != nil {
		return nil, nil, err
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return nil, nil, err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return nil, nil, err
	}
	if holder != nil {
		// Every replica serves the gateway (proxying what another serves) once it holds its
		// share; a Service may send sessions to any ready replica.
		if err := mgr.AddReadyzCheck("buckets", bucketsSettled(holder)); err != nil {
			return nil, nil, err
		}
	}
	return mgr, gw, nil
}

// connDefaults is how the controller's connections are made, from the flags.
func (f *controllerFlags) connDefaults() (controllers.ConnDefaults, error) {
	isolation, err := f.isolation()
	if err == nil {
		isolation.Egress, err = f.egress()
	}
	if err == nil {
		isolation.Sandbox, err = f.sandboxOf(isolation.Credential)
	}
	if err == nil {
		err = f.checkBounds()
	}
	settings := f.conn
	settings.AllowCommands, settings.Isolation = f.commandAllowlist(), isolation
	return controllers.ConnDefaults{Settings: settings, ProjectRootBase: f.rootBase, RemoteSessions: f.gatewayAuth != "local"}, err
}

// checkBounds refuses negative bounds (0 means the default).
func (f *controllerFlags) checkBounds() error {
	for _, b := range []struct {
		flag string
		v    int64
	}{{"--max-message-bytes", f.conn.MaxMessageBytes}, {"--max-list-items", int64(f.conn.MaxListItems)}, {"--max-list-pages", int64(f.conn.MaxListPages)},
		{"--max-list-bytes", f.conn.MaxListBytes}, {"--max-schema-bytes", f.conn.MaxSchemaBytes},
		{"--max-calls-per-session", int64(f.conn.MaxCallsPerSession)}, {"--max-calls-per-server", int64(f.conn.MaxCalls)},
		{"--max-subscriptions-per-session", int64(f.maxSubsEach)}} {
		if b.v < 0 {
			return fmt.Errorf("%s must not be negative (0: the default)", b.flag)
		}
	}
	return nil
}

// checkToolNameBudget refuses a --max-tool-name no name can be shortened to, or one over the
// specification's limit (toolname.Project would take the nearer end instead, silently).
func (f *controllerFlags) checkToolNameBudget() error {
	if f.maxToolName < toolname.MinBudget || f.maxToolName > toolname.MaxLength {
		return usageErrorf("--max-tool-name must be within %d..%d, not %d", toolname.MinBudget, toolname.MaxLength, f.maxToolName)
	}
	return nil
}

// commandAllowlist is nil (everything allowed) or the --allow-command patterns (possibly none).
func (f *controllerFlags) commandAllowlist() []string {
	if f.allowAny && len(f.allowCommands) == 0 {
		return nil
	}
	return append([]string{}, f.allowCommands...)
}

// principalBound is the sessions one identity may hold in a project: perUser when set, else a
// tenth of the project's bound (at least 1), so that one identity alone never fills a project
// whatever the operator sets that bound to; the gateway's default when the project has none.
func principalBound(perUser, perProject int) int {
	switch {
	case perUser > 0:
		return perUser
	case perProject > 0:
		return max(1, perProject/10)
	}
	return gateway.DefaultMaxSessionsPerPrincipal
}

// gateway builds the per-project MCP endpoint server from the flags.
func (f *controllerFlags) gateway(cfg *rest.Config, mgr manager.Manager, reg *registry.Registry, bound string, holder *buckets.Holder) (*gateway.Gateway, error) {
	auth, err := f.replicaAuthOf(cfg)
	if err != nil {
		return nil, err
	}
	opts := gateway.Options{
		Front: f.front(holder, auth), Serving: serving(holder),
		Registry: reg, BaseURL: f.gatewayURL, SessionTimeout: f.sessionTimeout,
		StatelessIdle: f.statelessIdle, MaxBodyBytes: f.maxBodyBytes, CallTimeout: f.callTimeout, Log: ctrl.Log.WithName("gateway"),
		MaxSessionsPerPrincipal: principalBound(f.maxPerUser, f.maxSessions), MaxSubscriptionsPerSession: f.maxSubsEach, MaxToolName: f.maxToolName,
		Objects: mgr.GetClient(), Live: mgr.GetAPIReader(),
	}
	tlsConfig, err := f.gatewayTLS()
	if err != nil {
		return nil, err
	}
	opts.TLS = tlsConfig
	if opts.BaseURL, err = gatewayBaseURL(f.gatewayURL, bound, tlsConfig != nil); err != nil {
		return nil, err
	}
	if opts.Local, err = f.localRule(); err != nil {
		return nil, err
	}
	switch f.gatewayAuth {
	case "local":
		host, _, _ := net.SplitHostPort(bound)
		if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
			return nil, fmt.Errorf("--gateway-auth=local needs a loopback --gateway-bind-address, not %q", f.gatewayAddr)
		}
	case "kubernetes":
		auth, err := f.kubernetesAuth(cfg)
		if err != nil {
			return nil, err
		}
		opts.Auth = auth
		if opts.OAuthIssuers, opts.OAuthScopes, err = f.oauthDiscovery(); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("--gateway-auth must be local or kubernetes, not %q", f.gatewayAuth)
	}
	if f.auditLog != "" {
		log, err := audit.Open(f.auditLog, metrics.AuditDropped)
		if err != nil {
			return nil, err
		}
		opts.Audit, opts.AuditArguments = log, f.auditArgs // closed by the gateway when it stops serving
	} else if f.auditArgs {
		return nil, errors.New("--audit-arguments needs --audit-log")
	}
	return gateway.New(opts), nil
}

// oauthDiscovery is what the endpoints' protected-resource metadata names, from
// --gateway-oauth-issuer and --gateway-oauth-scope; an issuer must be an https URL (RFC 8414),
// or http on loopback for a test.
func (f *controllerFlags) oauthDiscovery() (issuers, scopes []string, err error) {
	for _, iss := range f.issuers {
		u, err := url.Parse(iss)
		switch {
		case err != nil || u.Host == "" || u.RawQuery != "" || u.Fragment != "":
			return nil, nil, usageErrorf("--gateway-oauth-issuer: %q is not an issuer URL (https://host[/path], no query or fragment)", iss)
		case u.Scheme != "https" && (u.Scheme != "http" || !loopbackURL(iss)):
			return nil, nil, usageErrorf("--gateway-oauth-issuer: %q must be https (http only on this machine)", iss)
		}
	}
	for _, sc := range f.oauthScopes {
		if sc == "" || strings.ContainsAny(sc, " \t\"\\") {
			return nil, nil, usageErrorf("--gateway-oauth-scope: %q is not a scope (empty, or with spaces or quotes)", sc)
		}
	}
	if len(f.oauthScopes) > 0 && len(f.issuers) == 0 {
		return nil, nil, usageErrorf("--gateway-oauth-scope needs --gateway-oauth-issuer")
	}
	return f.issuers, f.oauthScopes, nil
}

// localRule is local mode's rule from --local-allow-uid and --local-allow-any-uid: the
// controller's own user, and those the flags name. Unless every user is admitted, the system
// must say which user is at the other end of a loopback connection, or the gateway would admit
// nobody: then the start fails, naming the flag.
func (f *controllerFlags) localRule() (access.LocalRule, error) {
	if f.gatewayAuth != "local" {
		if len(f.localUIDs) > 0 || f.localAnyUID {
			return access.LocalRule{}, usageErrorf("--local-allow-uid and --local-allow-any-uid apply to --gateway-auth=local alone")
		}
		return access.LocalRule{}, nil
	}
	for _, uid := range f.localUIDs {
		if uid < 0 {
			return access.LocalRule{}, usageErrorf("--local-allow-uid %d: not a user id", uid)
		}
	}
	if !f.localAnyUID && !peer.CanName() {
		return access.LocalRule{}, errors.New("--gateway-auth=local admits the controller's own user alone, and this system does not say which user is at the other end of a loopback connection, so it would admit nobody; --local-allow-any-uid admits every local user")
	}
	return access.LocalRule{UIDs: slices.Clone(f.localUIDs), AnyUID: f.localAnyUID}, nil
}

// gatewayTLS is the gateway's TLS configuration from --gateway-tls-cert and --gateway-tls-key,
// nil when neither is set; the files are loaded once here, so that a bad one stops the start.
func (f *controllerFlags) gatewayTLS() (*tls.Config, error) {
	switch {
	case f.gatewayTLSCert == "" && f.gatewayTLSKey == "":
		return nil, nil
	case f.gatewayTLSCert == "" || f.gatewayTLSKey == "":
		return nil, errors.New("--gateway-tls-cert and --gateway-tls-key go together")
	}
	files, err := httpserve.LoadCertFiles(f.gatewayTLSCert, f.gatewayTLSKey, ctrl.Log.WithName("gateway"))
	if err != nil {
		return nil, fmt.Errorf("--gateway-tls-cert, --gateway-tls-key: %w", err)
	}
	return files.TLSConfig(), nil
}

// gatewayBaseURL is the URL written to status.endpoint: --gateway-url, or the bound address
// with the scheme the gateway serves. A URL whose scheme is not the one served is refused,
// since clients would send their tokens in the clear or fail every request.
func gatewayBaseURL(flag, bound string, tls bool) (string, error) {
	scheme := "http"
	if tls {
		scheme = "https"
	}
	if flag == "" {
		return scheme + "://" + bound, nil
	}
	u, err := url.Parse(flag)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", fmt.Errorf("--gateway-url %q: want an http:// or https:// URL with a host", flag)
	}
	if tls && u.Scheme != "https" {
		return "", fmt.Errorf("--gateway-url %q: the gateway serves HTTPS (--gateway-tls-cert), so the URL must be https://", flag)
	}
	return flag, nil
}

// reviewQPS and reviewBurst are the client-side rate limit of each of the gateway's review
// clients.
const reviewQPS, reviewBurst = 100, 200

// kubernetesAuth is the gateway's TokenReview and SubjectAccessReview checker, from the
// --gateway-* review flags; an error names the flag that is wrong. Its reviews get clients of
// their own, each with its own rate limit, so that they and the reconciler's writes never wait
// behind one another: one for the tokens and the use of projects, one for the RBAC items of
// the lists, whose hundreds of reviews must never queue an authentication.
func (f *controllerFlags) kubernetesAuth(cfg *rest.Config) (*access.KubernetesAuth, error) {
	for _, aud := range f.audiences {
		if strings.TrimSpace(aud) == "" || strings.TrimSpace(aud) != aud {
			return nil, usageErrorf("--gateway-audience: %q is not an audience (empty, or with spaces around it)", aud)
		}
	}
	switch {
	case f.reviewTTL < 0:
		return nil, usageErrorf("--gateway-review-ttl must not be negative (0: the default), not %s", f.reviewTTL)
	case f.newTokenRate < 0:
		return nil, usageErrorf("--gateway-new-token-reviews must not be negative (0: the default), not %g", f.newTokenRate)
	case f.sourceRate < 0:
		return nil, usageErrorf("--gateway-new-token-reviews-per-source must not be negative (0: the default), not %g", f.sourceRate)
	}
	var clients [2]kubernetes.Interface
	for i := range clients {
		rc := rest.CopyConfig(cfg)
		rc.QPS, rc.Burst = reviewQPS, reviewBurst
		cs, err := kubernetes.NewForConfig(rc)
		if err != nil {
			return nil, err
		}
		clients[i] = cs
	}
	return &access.KubernetesAuth{Client: clients[0], ItemClient: clients[1], TTL: f.reviewTTL, Audiences: f.audiences,
		NewTokenRate: rate.Limit(f.newTokenRate), SourceRate: rate.Limit(f.sourceRate), Log: ctrl.Log.WithName("gateway")}, nil
}

const controllerLong = `Runs the reconciler, the connection registry and the gateway against the kubeconfig's
cluster until SIGINT or SIGTERM (then every connection is destroyed, every server process
ends, and it exits 0). For every ProjectMCP it holds one MCP connection per enabled server,
shared by all of the project's sessions, and serves the project's endpoint at
<gateway URL>/projects/<namespace>/<name>/mcp (written to status.endpoint).

It watches every namespace; --namespace does not apply (the Lease's namespace is
--leader-election-namespace).`

func newControllerCmd(g *globalFlags, stderr io.Writer) *cobra.Command {
	f := defaultControllerFlags()
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Run the controller and the gateway against the kubeconfig's cluster",
		Long:  controllerLong,
		Example: `  # against the current kubeconfig context; one replica holds the Lease
  projectmcp controller

  # in a cluster, with bearer-token access to the endpoints and an allowlist of commands
  projectmcp controller --gateway-bind-address :8484 --gateway-auth kubernetes \
      --gateway-url https://mcp.example.com --allow-command /usr/local/bin/mcp-*`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := refuse(cmd, "namespace", "the controller watches every namespace"); err != nil {
				return err
			}
			f.kubeconfig = g.kubeconfig
			g.setupLogging(&f.zap, cmd.Flags(), stderr, false)
			return runController(&f, g)
		},
	}
	f.bind(cmd.Flags())
	return cmd
}

// runController runs the manager until SIGINT or SIGTERM; on the way out every connection is
// destroyed and every server process ends.
func runController(f *controllerFlags, g *globalFlags) error {
	if err := f.checkLeaseTimings(); err != nil {
		return usageErrorf("%v", err)
	}
	if err := f.checkBuckets(); err != nil {
		return usageErrorf("%v", err)
	}
	if err := f.checkToolNameBudget(); err != nil {
		return err
	}
	setControllerMemoryLimit(ctrl.Log.WithName("memory"))
	cfg, err := g.restConfig()
	if err != nil {
		return err
	}
	if err := f.electionNamespace(); err != nil {
		return err
	}
	f.hide = append(f.hide, g.kubeconfig)
	mgr, _, err := newManager(cfg, f)
	if err != nil {
		return err
	}
	ctx, stop := untilSignal()
	defer stop()
	flush, err := tracing.Setup(ctx)
	if err != nil {
		return err
	}
	defer func() { // flush the spans still batched, bounded
		fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = flush(fctx)
	}()
	// Orphans of server processes (npx → sh → node after the wrapper died) come to the
	// controller, PID 1 in a container or a child subreaper elsewhere: reap them.
	reaped := make(chan struct{})
	go func() {
		defer close(reaped)
		if err := reaper.Run(ctx, ctrl.Log.WithName("reaper")); err != nil {
			ctrl.Log.Error(err, "Orphaned server processes will not be reaped")
		}
	}()
	defer func() { stop(); <-reaped }()
	return mgr.Start(ctx)
}
