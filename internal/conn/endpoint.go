package conn

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/net/http/httpproxy"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/bound"
	"github.com/dsh-dev/projectmcp/internal/config"
	"github.com/dsh-dev/projectmcp/internal/httpcarrier"
	"github.com/dsh-dev/projectmcp/internal/policy"
	"github.com/dsh-dev/projectmcp/internal/sandbox"
	"github.com/dsh-dev/projectmcp/internal/spawn"
	"github.com/dsh-dev/projectmcp/internal/tracing"
)

// invalidConfigError is a configuration that is wrong after expansion (e.g. a URL whose
// variables expand to garbage); retrying cannot fix it.
type invalidConfigError struct{ msg string }

func (e *invalidConfigError) Error() string { return e.msg }

// endpoint is what one connect attempt talks to: a child process or an HTTP client. It owns
// them until close.
type endpoint struct {
	transport mcp.Transport
	proc      *process // stdio only
	release   func()   // remote only: gives back the shared HTTP transport (once)
	// refused is the first request policy.SameOrigin did not send (remote only): the cause of
	// a connect that fails after it, whatever the SDK makes of the failed request.
	refused *atomic.Pointer[policy.RefusedRequest]
	// carrier carries forwarded requests, with headers added (remote only; nil: through the
	// transport).
	carrier *httpcarrier.Carrier
	headers http.Header
	bearer  Bearer // the server's OAuth token source (remote only; nil: none)
	// serverRefused hears a server's 401 or 403 to a forwarded request (remote only): the
	// session then ends and the next connect runs the headersHelper again.
	serverRefused func(error)
}

// refusal is the first request refused on the way to the server, or nil.
func (e *endpoint) refusal() error {
	if e.refused == nil {
		return nil
	}
	if r := e.refused.Load(); r != nil {
		return r
	}
	return nil
}

func (e *endpoint) pid() int {
	if e.proc == nil {
		return 0
	}
	return e.proc.Pid()
}

// sandbox names the layers of the stdio process's sandbox ("" for remote servers, or without
// a sandbox).
func (e *endpoint) sandbox() string {
	if e.proc == nil {
		return ""
	}
	return e.proc.sandbox
}

// exited is closed when the stdio process has exited; never for remote servers.
func (e *endpoint) exited() <-chan struct{} {
	if e.proc == nil {
		return nil
	}
	return e.proc.Done()
}

func (e *endpoint) exitError() error {
	if e.proc == nil {
		return nil
	}
	select {
	case <-e.proc.Done():
		if note := e.proc.exitNote(); note != "" {
			return fmt.Errorf("server process exited: %v (%s)", e.proc.Err(), note)
		}
		return fmt.Errorf("server process exited: %v", e.proc.Err())
	default:
		return nil
	}
}

// exitWait is how long a stdio session whose output ended waits for its process's exit: a
// server that dies closes its output as it goes, and its exit status tells why.
const exitWait = 250 * time.Millisecond

// exitErrorWithin is exitError once the process has exited, waiting at most d for it (nil
// for remote servers, or if it is still running then).
func (e *endpoint) exitErrorWithin(d time.Duration) error {
	if e.proc == nil {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-e.proc.Done():
		return e.exitError()
	case <-t.C:
		return nil
	}
}

// stop ends the process group (stdio).
func (e *endpoint) stop(grace time.Duration) {
	if e.proc != nil {
		e.proc.stop(grace)
	}
}

// close ends the process group (stdio) or gives back the shared HTTP transport, whose idle
// connections close with its last user (remote).
func (e *endpoint) close() {
	e.stop(teardownGrace)
	if e.release != nil {
		e.release()
	}
}

// closeSession closes a session on the endpoint politely (a stdio server sees its stdin
// close), then makes sure the process group is gone.
func (e *endpoint) closeSession(session *mcp.ClientSession, log logr.Logger) {
	closed := make(chan struct{})
	go func() {
		_ = session.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(teardownGrace):
	}
	e.stop(teardownGrace)
	select {
	case <-closed:
	case <-time.After(teardownGrace):
		log.Info("MCP session did not close in time; abandoning it")
	}
}

// launcher makes the endpoints of a connection's connect attempts, from its options; the
// secret values it expands go to the connection's scrubber.
type launcher struct {
	opts    *Options
	secrets *scrubber
}

// open expands the server's configuration and prepares its transport; for stdio it starts the
// process.
func (l launcher) open(ctx context.Context) (*endpoint, error) {
	vctx, cancel := context.WithTimeout(ctx, l.opts.ConnectTimeout)
	vars, err := l.opts.Variables(vctx)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("reading variables: %w", err)
	}
	x := &expander{lookup: func(name string) (string, bool) { v, ok := vars[name]; return v, ok }}
	srv := l.opts.Server
	switch {
	case srv.Stdio != nil:
		return l.startProcess(x, srv.Stdio)
	case srv.HTTP != nil:
		return l.remote(ctx, x, srv.HTTP)
	}
	return nil, &invalidConfigError{msg: "server has neither stdio nor http"}
}

func (l launcher) remote(ctx context.Context, x *expander, h *v1alpha1.HTTPServer) (*endpoint, error) {
	raw := x.expand(h.URL)
	headers := http.Header{}
	for _, kv := range h.Headers {
		headers.Set(kv.Name, x.expand(kv.Value))
	}
	if x.err != nil {
		return nil, x.err
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		// The expanded URL may hold secrets: name the template, not the value.
		return nil, &invalidConfigError{msg: fmt.Sprintf("url %q does not expand to an absolute http(s) URL", h.URL)}
	}
	l.secrets.add(x.values)
	egress := l.opts.Isolation.Egress
	var r *policy.Route
	if egress != nil {
		if r, err = egress.Check(u, fmt.Sprintf("url %q", h.URL)); err != nil {
			return nil, &invalidConfigError{msg: err.Error()}
		}
	}
	if h.HeadersHelper != "" { // run at every connect: a reconnect after a 401 or 403 gets fresh headers
		helped, err := l.helperHeaders(ctx, h.HeadersHelper, h.URL)
		if err != nil {
			return nil, err
		}
		mergeHeaders(headers, helped)
	}
	if b := l.opts.Bearer; b != nil { // a server that needs a sign-in fails here, naming the command
		if _, err := b.Token(ctx); err != nil {
			return nil, err
		}
	}
	l.noteProxy(u)
	base, pool, release := sharedTransport(r)
	carrier := httpcarrier.New(u, base, pool)
	var under http.RoundTripper = base
	if carrier != nil {
		under = httpcarrier.Transport{Carrier: carrier, Base: base}
	}
	bounded := &bound.Bodies{Base: under, Limit: l.opts.MaxMessageBytes, Items: l.opts.MaxListItems, Log: l.opts.Log}
	// No http.Client.Timeout: it would cut the long-lived event stream. Calls carry deadlines.
	// The configured headers are added below SameOrigin, so that they reach only the server.
	refused := &atomic.Pointer[policy.RefusedRequest]{}
	var checked http.RoundTripper = policy.MCPResponses{Base: bounded}
	if l.opts.Bearer != nil {
		checked = bearerTransport{base: checked, bearer: l.opts.Bearer}
	}
	client := &http.Client{Transport: policy.SameOrigin{
		Base:    &headerTransport{base: checked, headers: headers},
		Origin:  policy.OriginOf(u),
		Egress:  egress,
		Refused: refused,
	}}
	ep := &endpoint{release: release, refused: refused, carrier: carrier, headers: headers, bearer: l.opts.Bearer}
	// No event longer than the bound reaches the SDK (bound.Bodies); its own (smaller) default
	// bound would fail the whole connection on an event the bound allows.
	maxEvent := bound.ForSDK(l.opts.MaxMessageBytes)
	if h.Transport == v1alpha1.TransportSSE {
		ep.transport = sseTransport{&mcp.SSEClientTransport{Endpoint: raw, HTTPClient: client, MaxEventSize: maxEvent}}
	} else {
		ep.transport = &mcp.StreamableClientTransport{Endpoint: raw, HTTPClient: client, MaxEventSize: maxEvent}
	}
	return ep, nil
}

// proxyNoted makes the proxy's notice once per process.
var proxyNoted sync.Once

// noteProxy logs, once, that remote servers are reached through an HTTP proxy of the
// controller's environment (HTTP_PROXY, HTTPS_PROXY, NO_PROXY), and which: the egress policy
// then checks the addresses the controller resolves a URL's host to, not those the proxy
// connects to.
func (l launcher) noteProxy(u *url.URL) {
	p, err := httpproxy.FromEnvironment().ProxyFunc()(u)
	if err != nil || p == nil {
		return
	}
	proxyNoted.Do(func() {
		l.opts.Log.Info("warning: remote MCP servers are reached through an HTTP proxy of the environment; the egress policy checks the addresses their hosts resolve to here, before each request, and the proxy resolves them again",
			"proxy", policy.ProxyName(p))
	})
}

// sseTransport is the SDK's legacy SSE client transport, with the URL of a failed POST cut to
// its origin: that URL is the endpoint event's, which carries the server's session id, and the
// error reaches status, events and logs.
type sseTransport struct{ *mcp.SSEClientTransport }

func (t sseTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	conn, err := t.SSEClientTransport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return sseConnection{conn}, nil
}

type sseConnection struct{ mcp.Connection }

func (c sseConnection) Write(ctx context.Context, msg jsonrpc.Message) error {
	err := c.Connection.Write(ctx, msg)
	var refused *policy.RefusedRequest
	if errors.As(err, &refused) {
		return refused // it says all there is to say
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		if u, perr := url.Parse(ue.URL); perr == nil {
			return fmt.Errorf("%s to the SSE endpoint at %s: %w", ue.Op, policy.OriginOf(u), ue.Err)
		}
		return fmt.Errorf("%s to the SSE endpoint: %w", ue.Op, ue.Err)
	}
	return err
}

// sharedTransport returns the HTTP transport of the remote connections dialed under r (nil:
// no egress policy), the pool of its carriers' connections, and the function that gives them
// back (httpcarrier.Share). Every connection whose transport would be the same shares it: the
// transport holds no state of a server's own (its headers, bounds and redirect rule are in the
// layers above it, per connection), and what it does depends only on the egress route its
// dialer checks addresses against, its key. So every session of a project, and every project
// using a host, send through one.
func sharedTransport(r *policy.Route) (*http.Transport, *httpcarrier.Pool, func()) {
	var key policy.Route // the zero route: no egress policy
	if r != nil {
		key = *r
	}
	return httpcarrier.Share(key, func(t *http.Transport) {
		// The proxy settings are read when the transport is made (net/http reads them once
		// per process), and every request through a proxy is checked under r.
		t.Proxy = r.Proxied(httpproxy.FromEnvironment().ProxyFunc())
		if r != nil {
			t.DialContext = r.Dialer().DialContext
		}
	})
}

// headerTransport adds the server's configured headers to every request.
type headerTransport struct {
	base    http.RoundTripper
	headers http.Header
}

func (t *headerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	traced := trace.SpanContextFromContext(req.Context()).IsValid()
	if len(t.headers) == 0 && !traced {
		return t.base.RoundTrip(req)
	}
	req = req.Clone(req.Context())
	addHeaders(req, traced, t.headers)
	return t.base.RoundTrip(req)
}

// addHeaders adds to req the call's trace context when traced, which goes on to the server
// (W3C traceparent), and the server's configured headers.
func addHeaders(req *http.Request, traced bool, headers http.Header) {
	if traced {
		tracing.ToHeaders(req.Context(), req.Header)
	}
	for k, v := range headers {
		req.Header[k] = v
	}
}

// process is a stdio server running in its own process group (spawn.Start). The pipes are
// plain os.Pipes (not exec's StdoutPipe) so that Wait reports the leader's exit at once, even
// while a grandchild (npx, uvx, sh -c) still holds stdout open.
type process struct {
	*spawn.Process
	stderrDone chan struct{}
	removeHome func()        // removes the server's own HOME once the group is gone, gives back its user
	sandbox    string        // the layers of its sandbox, for status ("" without one)
	exitNote   func() string // what its sandbox says of its exit (OOMKilled)
	pipes      []*os.File    // our ends of stdin, stdout and stderr
	cleanup    sync.Once     // stop may be called twice (closeSession, then close)
}

func (l launcher) startProcess(x *expander, s *v1alpha1.StdioServer) (*endpoint, error) {
	command := x.expand(s.Command)
	args := make([]string, len(s.Args))
	for i, a := range s.Args {
		args[i] = x.expand(a)
	}
	var configured []string
	for _, kv := range s.Env {
		configured = append(configured, kv.Name+"="+x.expand(kv.Value))
	}
	dir := x.expand(s.WorkingDir)
	if x.err != nil {
		return nil, x.err
	}
	if allow := l.opts.AllowCommands; allow != nil {
		// Checked as it will run: after expansion (a ${VAR} cannot smuggle another command in).
		if !policy.CommandAllowed(allow, command) {
			return nil, &invalidConfigError{msg: fmt.Sprintf("command %q is not allowed here: it matches no --allow-command pattern of the controller", s.Command)}
		}
		for _, kv := range s.Env {
			if why := policy.RefusedVariable(kv.Name); why != "" {
				return nil, &invalidConfigError{msg: fmt.Sprintf("environment variable %q is not allowed with --allow-command: %s", kv.Name, why)}
			}
		}
	}
	l.secrets.add(x.values)

	iso := &l.opts.Isolation
	own, workspace := sandboxWants(l.opts.Server.Sandbox), l.workspace()
	if err := own.Check(workspace); err != nil {
		return nil, &invalidConfigError{msg: err.Error()}
	}
	run, err := iso.Begin(l.opts.Project, l.opts.Server.Name, own, workspace)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(command, args...)
	// Never os.Environ(): the controller's environment is not the server's business.
	cmd.Env, cmd.Dir = iso.Env(run.Home, configured), dir
	inR, inW, err := os.Pipe()
	if err != nil {
		run.Release()
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW)
		run.Release()
		return nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		closeAll(inR, inW, outR, outW)
		run.Release()
		return nil, err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errW
	child, err := startAs(cmd, run)
	if err != nil {
		closeAll(inR, inW, outR, outW, errR, errW)
		run.Release()
		return nil, fmt.Errorf("starting %q: %w", s.Command, err)
	}
	p := &process{Process: child, stderrDone: make(chan struct{}), removeHome: run.Release, pipes: []*os.File{inW, outR, errR},
		sandbox: run.Sandbox(), exitNote: run.ExitNote}
	closeAll(inR, outW, errW) // the child holds its ends now
	go l.logStderr(errR, p.stderrDone)
	return &endpoint{transport: &mcp.IOTransport{Reader: outR, Writer: inW}, proc: p}, nil
}

// sandboxWants are a server's own sandbox settings, from its spec.
func sandboxWants(sb *v1alpha1.Sandbox) sandbox.Wants {
	var w sandbox.Wants
	if sb == nil {
		return w
	}
	w.Off = sb.Disabled
	if fs := sb.Filesystem; fs != nil {
		w.AllowWrite, w.DenyRead, w.DenyWrite = fs.AllowWrite, fs.DenyRead, fs.DenyWrite
	}
	if n := sb.Network; n != nil {
		w.AllowedDomains, w.DeniedDomains = n.AllowedDomains, n.DeniedDomains
	}
	return w
}

// workspace is the project's folder, the first of its roots as a path ("" without one).
func (l launcher) workspace() string {
	for _, r := range l.opts.Roots {
		if u, err := url.Parse(r.URI); err == nil && u.Scheme == "file" {
			return u.Path
		}
	}
	return ""
}

// startAs starts cmd as run's process: as its user, in its sandbox when it has one.
func startAs(cmd *exec.Cmd, run *policy.Process) (*spawn.Process, error) {
	cred, started, err := run.Prepare(cmd)
	if err != nil {
		return nil, err
	}
	defer started()
	return spawn.Start(cmd, cred)
}

func closeAll(files ...*os.File) {
	for _, f := range files {
		_ = f.Close()
	}
}

// stop terminates the process group (spawn.Process.Stop), then stops reading its stderr and
// removes its HOME.
func (p *process) stop(grace time.Duration) {
	p.Stop(grace)
	select {
	case <-p.stderrDone:
	case <-time.After(grace):
		// A grandchild that left the group (setsid) still holds stderr open: stop reading it,
		// or its copy would live (a goroutine and a descriptor) as long as that grandchild.
	}
	p.cleanup.Do(func() {
		closeAll(p.pipes...) // ends the stderr copy at once (the pipes are non-blocking), and any read the session left
		select {
		case <-p.stderrDone:
		case <-time.After(grace):
		}
		p.removeHome()
	})
}

// stderrLinesPerSecond bounds how much of a chatty server's stderr reaches the log.
const stderrLinesPerSecond = 20

// logStderr copies a server's stderr into the controller's log, line by line, tagged with
// project and server (the logger carries them), scrubbed of secret values and rate-limited.
// It reads to the end whatever comes: a line longer than stderrLineBytes is logged by its
// beginning (scrub cuts it further). Reading must never stop early: the server's next write to
// stderr would then fail, and a Go server dies of SIGPIPE on it.
func (l launcher) logStderr(r *os.File, done chan<- struct{}) {
	defer close(done)
	defer r.Close()
	br := bufio.NewReaderSize(r, 4096)
	window, count, suppressed := time.Now(), 0, 0
	for {
		line, err := readLine(br, stderrLineBytes)
		if len(line) > 0 || err == nil {
			if now := time.Now(); now.Sub(window) >= time.Second {
				if suppressed > 0 {
					l.opts.Log.Info("MCP server stderr: lines suppressed by rate limit", "suppressed", suppressed)
				}
				window, count, suppressed = now, 0, 0
			}
			if count < stderrLinesPerSecond {
				count++
				l.opts.Log.Info("MCP server stderr", "line", l.secrets.scrub(string(line)))
			} else {
				suppressed++
			}
		}
		if err != nil {
			break // the server closed stderr, or the pipe was closed (stop)
		}
	}
	if suppressed > 0 {
		l.opts.Log.Info("MCP server stderr: lines suppressed by rate limit", "suppressed", suppressed)
	}
}

// stderrLineBytes is how much of one stderr line is kept for the log.
const stderrLineBytes = 64 << 10

// readLine reads one line through its newline and returns at most max bytes of it, without
// the line ending; err is set only when nothing more can be read.
func readLine(r *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		part, err := r.ReadSlice('\n')
		if room := max - len(line); room > 0 {
			line = append(line, part[:min(len(part), room)]...)
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return bytes.TrimRight(line, "\r\n"), err
	}
}

// expander expands ${VAR} references and remembers the values it substituted from the lookup,
// so that they can be scrubbed from errors and logs. The first error sticks.
type expander struct {
	lookup func(string) (string, bool)
	values []string
	err    error
}

func (x *expander) expand(s string) string {
	if x.err != nil {
		return ""
	}
	out, err := config.Expand(s, func(name string) (string, bool) {
		v, ok := x.lookup(name)
		if ok && v != "" {
			x.values = append(x.values, v)
		}
		return v, ok
	})
	if err != nil {
		x.err = err
	}
	return out
}

// Offered reports whether a tool passes a server's allow/deny filter: it matches some allow
// pattern (or allow is empty) and no deny pattern.
func Offered(f *v1alpha1.ToolFilter, name string) bool {
	if f == nil {
		return true
	}
	for _, p := range f.Deny {
		if policy.Glob(p, name) {
			return false
		}
	}
	if len(f.Allow) == 0 {
		return true
	}
	for _, p := range f.Allow {
		if policy.Glob(p, name) {
			return true
		}
	}
	return false
}
