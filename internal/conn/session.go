package conn

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/config"
	"github.com/dsh-dev/projectmcp/internal/recovery"
	"github.com/dsh-dev/projectmcp/internal/sessionend"
	"github.com/dsh-dev/projectmcp/internal/tracing"
)

// clientInfo is how the controller introduces itself to MCP servers.
var clientInfo = &mcp.Implementation{Name: "projectmcp", Version: "v1alpha1"}

// teardownGrace is how long a closing session may take before its process group is signalled.
const teardownGrace = 2 * time.Second

// connectAndServe runs one session from connect to death. wasReady reports whether the session
// reached Ready; err says why it ended.
func (c *Conn) connectAndServe() (wasReady bool, err error) {
	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	start, timeout := time.Now(), false
	defer func() { // a failed attempt; a connection destroyed meanwhile has no outcome
		if !wasReady && c.ctx.Err() == nil {
			outcome := "error"
			if timeout {
				outcome = "timeout"
			}
			c.counts.metrics.Connected(outcome, time.Since(start))
		}
	}()

	ep, err := launcher{opts: &c.opts, secrets: c.secrets}.open(ctx)
	if err != nil {
		return false, err
	}
	defer ep.close()

	resp := &responder{ctx: c.ctx, flight: c.flight, progress: c.progress, signals: c.signals, secrets: c.secrets,
		onNotice: c.opts.OnNotice, roots: c.opts.Roots, streams: c.opts.Server.HTTP != nil && c.opts.Server.HTTP.Transport != v1alpha1.TransportSSE}
	client := mcp.NewClient(clientInfo, resp.clientOptions())
	client.AddReceivingMiddleware(recovery.Middleware(c.opts.Log), resp.rootsMiddleware)
	// The deadline cancels the session's own context rather than a derived one: the legacy SSE
	// transport lives only as long as the context given to Connect.
	timedOut := make(chan struct{})
	timer := time.AfterFunc(c.opts.ConnectTimeout, func() { close(timedOut); cancel() })
	end := sessionend.New()
	ep.serverRefused = end.Refuse
	up, transport := newUpstream(ep.transport, ep, resp, &c.opts)
	transport = end.Watch(transport)
	_, span := tracing.Tracer().Start(ctx, "projectmcp.connect", trace.WithAttributes(
		attribute.String("projectmcp.project", c.opts.Project), attribute.String("projectmcp.server", c.opts.Server.Name),
		attribute.String("projectmcp.connection", c.id)))
	defer func() {
		if err != nil {
			span.SetStatus(codes.Error, c.secrets.scrub(err.Error()))
		}
		span.End() // ends when connected and listed, or failed (the session's life is not in it)
	}()
	session, err := client.Connect(ctx, transport, nil)
	if err == nil {
		defer ep.closeSession(session, c.opts.Log)
		if up != nil {
			up.ready(session) // the upstream takes forwarded requests once it knows what was agreed
		}
		l := &lister{opts: &c.opts, counts: c.counts, session: session, up: up}
		var cat *catalog
		var digest [sha256.Size]byte
		if cat, digest, err = l.list(ctx, digest); err == nil && !timer.Stop() {
			err = context.DeadlineExceeded
		}
		if err == nil {
			c.setReady(session, up, cat, ep)
			// Ready first: the subscriptions come back in the background, and end before the
			// session is closed.
			rctx, stop := context.WithCancel(ctx)
			restored := c.subs.restore(rctx, session)
			defer func() { stop(); restored() }()
			c.counts.metrics.Connected("ok", time.Since(start))
			span.End()
			defer func() { // the session has ended: no request is to find it
				c.mu.Lock()
				c.live = live{}
				c.mu.Unlock()
			}()
			return true, c.serve(ctx, l, ep, end, digest)
		}
	}
	timer.Stop()
	select {
	case <-timedOut:
		timeout = true
		err = fmt.Errorf("connect timed out after %s (no answer to initialize or to the lists)", c.opts.ConnectTimeout)
	default:
	}
	if exitErr := ep.exitError(); exitErr != nil {
		err = fmt.Errorf("%w (%v)", exitErr, err)
	}
	if refused := ep.refusal(); refused != nil { // what the SDK reports may be only its aftermath
		err = fmt.Errorf("%w (%v)", refused, err)
	}
	return false, err
}

// setReady publishes a Ready session, its upstream and its catalog.
func (c *Conn) setReady(session *mcp.ClientSession, up upstream, cat *catalog, ep *endpoint) {
	c.signals.clearDead() // a death signal left by a call on the previous session is stale now
	init := session.InitializeResult()
	c.mu.Lock()
	c.live = live{session: session, up: up}
	c.mu.Unlock()
	c.update(func(s *Snapshot) {
		cat.apply(s)
		s.Phase, s.PID, s.Sandbox, s.Capabilities, s.Instructions = v1alpha1.PhaseReady, ep.pid(), ep.sandbox(), init.Capabilities, init.Instructions
		s.ReadySince, s.ReconnectAttempts, s.LastError, s.Permanent, s.EverReady = c.opts.Clock.Now(), 0, "", false, true
	})
	c.opts.Log.V(1).Info("MCP server ready", "tools", len(cat.tools), "prompts", len(cat.prompts), "resources", len(cat.resources),
		"protocol", init.ProtocolVersion)
}

// minRelistInterval spaces the re-lists a server's list_changed asks for: a server whose lists
// never settle costs at most one re-list per interval, and so at most one status update and
// one list_changed to the project's sessions, whatever it sends.
const minRelistInterval = 250 * time.Millisecond

// serve watches a Ready session (its lister's) until it dies or the Conn is destroyed. end
// tells when the SDK has closed the session's connection, or the server refused a request.
// digest is of the lists' pages as the connect listed them (zero when listed on the typed
// path).
func (c *Conn) serve(ctx context.Context, l *lister, ep *endpoint, end *sessionend.End, digest [sha256.Size]byte) error {
	var probe <-chan time.Time // nil: the re-lists are the probes (probedByRelist)
	if !l.probedByRelist() {
		health := time.NewTicker(c.opts.HealthInterval)
		defer health.Stop()
		probe = health.C
	}
	relist := time.NewTicker(c.opts.RelistInterval)
	defer relist.Stop()
	// A list_changed that comes sooner than minRelistInterval after the last re-list waits
	// for the rest of the interval, and every other one meanwhile joins it.
	var lastRelist time.Time
	soon := time.NewTimer(time.Hour)
	soon.Stop()
	defer soon.Stop()
	armed := false
	refresh := func() error {
		lastRelist = time.Now()
		return c.refresh(ctx, l, &digest)
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ep.exited():
			return ep.exitError()
		case <-end.Done():
			if err := ep.exitErrorWithin(exitWait); err != nil {
				return err // its exit says more (a signal, OOMKilled) than its output's end
			}
			return fmt.Errorf("session closed by the server: %v", end.Why(ctx, l.session, teardownGrace))
		case <-end.Refused():
			return end.Refusal()
		case <-c.signals.dead:
			return errors.New("session lost (the server no longer knows it)")
		case <-probe:
			if err := l.probe(ctx); err != nil {
				return fmt.Errorf("health check failed: %w", err)
			}
		case <-relist.C:
			if err := refresh(); err != nil {
				return err
			}
		case <-c.signals.relist:
			if wait := minRelistInterval - time.Since(lastRelist); wait > 0 {
				if !armed {
					soon.Reset(wait)
					armed = true
				}
				continue
			}
			if err := refresh(); err != nil {
				return err
			}
		case <-soon.C:
			armed = false
			if err := refresh(); err != nil {
				return err
			}
		}
	}
}

// refresh re-lists and publishes the catalog when it changed. On a session whose upstream
// takes forwarded requests, when the pages' bytes are those the last listing saw (digest),
// nothing changed and nothing is decoded (listitems.go).
func (c *Conn) refresh(ctx context.Context, l *lister, digest *[sha256.Size]byte) error {
	c.counts.relists.Add(1)
	announced := c.signals.takeAnnounced()
	cat, d, err := l.list(ctx, *digest)
	if err != nil {
		return err
	}
	same := cat == nil // the pages the digest was taken of
	if !same {
		*digest = d
		c.mu.Lock()
		same = cat.same(c.state)
		c.mu.Unlock()
	}
	switch {
	case !same:
		c.update(cat.apply)
	case announced != 0:
		c.opts.OnNotice(Notice{Unchanged: announced})
	}
	return nil
}

// PermanentError is a failure that retrying cannot heal, such as a refusal Options.Variables
// returns: the connection fails at once instead of reconnecting.
type PermanentError interface {
	error
	Permanent() bool
}

// isPermanent reports failures that retrying cannot heal.
func isPermanent(err error) bool {
	var missing *config.MissingVariableError
	var invalid *invalidConfigError
	var permanent PermanentError
	return errors.As(err, &missing) || errors.As(err, &invalid) || (errors.As(err, &permanent) && permanent.Permanent())
}
