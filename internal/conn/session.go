package conn

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/config"
	"github.com/dsh-dev/projectmcp/internal/recovery"
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
			c.metrics.Connected(outcome, time.Since(start))
		}
	}()

	ep, err := c.endpoint(ctx)
	if err != nil {
		return false, err
	}
	defer ep.close()

	copts := &mcp.ClientOptions{
		// Handlers run one at a time per session: only signal here, re-list in serve.
		ToolListChangedHandler:     func(context.Context, *mcp.ToolListChangedRequest) { c.announce(ToolList) },
		PromptListChangedHandler:   func(context.Context, *mcp.PromptListChangedRequest) { c.announce(PromptList) },
		ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) { c.announce(ResourceList) },
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
			c.opts.OnNotice(Notice{ResourceUpdated: req.Params})
		},
		LoggingMessageHandler: func(_ context.Context, req *mcp.LoggingMessageRequest) {
			c.opts.OnNotice(Notice{Log: req.Params})
		},
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			c.relayProgress(req.Params)
		},
	}
	c.serverRequests(copts) // declares sampling and elicitation, so servers offer those features
	client := mcp.NewClient(clientInfo, copts)
	client.AddReceivingMiddleware(recovery.Middleware(c.opts.Log), c.rootsMiddleware)
	// The deadline cancels the session's own context rather than a derived one: the legacy SSE
	// transport lives only as long as the context given to Connect.
	timedOut := make(chan struct{})
	timer := time.AfterFunc(c.opts.ConnectTimeout, func() { close(timedOut); cancel() })
	up, transport := newUpstream(c, ep.transport)
	_, span := tracing.Tracer().Start(ctx, "projectmcp.connect", trace.WithAttributes(
		attribute.String("projectmcp.project", c.opts.Project), attribute.String("projectmcp.server", c.opts.Server.Name),
		attribute.String("projectmcp.connection", c.id)))
	defer func() {
		if err != nil {
			span.SetStatus(codes.Error, c.scrub(err.Error()))
		}
		span.End() // ends when connected and listed, or failed (the session's life is not in it)
	}()
	session, err := client.Connect(ctx, transport, nil)
	if err == nil {
		defer c.closeSession(session, ep)
		if up != nil {
			up.ready(session) // the upstream takes forwarded requests once it knows what was agreed
		}
		var cat *catalog
		var digest [sha256.Size]byte
		if cat, digest, err = c.list(ctx, session, up, digest); err == nil && !timer.Stop() {
			err = context.DeadlineExceeded
		}
		if err == nil {
			c.restore(ctx, session)
			c.setReady(session, up, cat, ep.pid())
			c.metrics.Connected("ok", time.Since(start))
			span.End()
			defer c.clearSession()
			return true, c.serve(ctx, session, ep, digest)
		}
	}
	timer.Stop()
	select {
	case <-timedOut:
		timeout = true
		err = fmt.Errorf("connect timed out after %s (no answer to initialize or tools/list)", c.opts.ConnectTimeout)
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

// closeSession closes a session politely (a stdio server sees its stdin close), then makes sure
// the process group is gone.
func (c *Conn) closeSession(session *mcp.ClientSession, ep *endpoint) {
	closed := make(chan struct{})
	go func() {
		_ = session.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(teardownGrace):
	}
	ep.stop(teardownGrace)
	select {
	case <-closed:
	case <-time.After(teardownGrace):
		c.opts.Log.Info("MCP session did not close in time; abandoning it")
	}
}

func (c *Conn) setReady(session *mcp.ClientSession, up upstream, cat *catalog, pid int) {
	select { // a death signal left by a call on the previous session is stale now
	case <-c.dead:
	default:
	}
	init := session.InitializeResult()
	c.mu.Lock()
	c.session, c.up = session, up
	c.mu.Unlock()
	c.update(func(s *Snapshot) {
		cat.apply(s)
		s.Phase, s.PID, s.Capabilities, s.Instructions = v1alpha1.PhaseReady, pid, init.Capabilities, init.Instructions
		s.ReadySince, s.ReconnectAttempts, s.LastError, s.Permanent, s.EverReady = c.opts.Clock.Now(), 0, "", false, true
	})
	c.opts.Log.V(1).Info("MCP server ready", "tools", len(cat.tools), "prompts", len(cat.prompts), "resources", len(cat.resources),
		"protocol", init.ProtocolVersion)
}

func (c *Conn) clearSession() {
	c.mu.Lock()
	c.session, c.up = nil, nil
	c.mu.Unlock()
}

// minRelistInterval spaces the re-lists a server's list_changed asks for: a server whose lists
// never settle costs at most one re-list per interval, and so at most one status update and
// one list_changed to the project's sessions, whatever it sends.
const minRelistInterval = 250 * time.Millisecond

// serve watches a Ready session until it dies or the Conn is destroyed.
// digest is of the lists' raw pages as the connect listed them (zero when listed through the
// SDK).
func (c *Conn) serve(ctx context.Context, session *mcp.ClientSession, ep *endpoint, digest [sha256.Size]byte) error {
	waited := make(chan error, 1)
	go func() { waited <- session.Wait() }() // returns once closeSession has run
	var probe <-chan time.Time               // nil: the re-lists are the probes (probedByRelist)
	if !c.probedByRelist(session) {
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
		return c.refresh(ctx, session, &digest)
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ep.exited():
			return ep.exitError()
		case err := <-waited:
			return fmt.Errorf("session closed by the server: %v", err)
		case <-c.dead:
			return errors.New("session lost (the server no longer knows it)")
		case <-probe:
			if err := c.probe(ctx, session); err != nil {
				return fmt.Errorf("health check failed: %w", err)
			}
		case <-relist.C:
			if err := refresh(); err != nil {
				return err
			}
		case <-c.relist:
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

// probe checks that the server answers: ping on sessions that have it, tools/list on the
// 2026-07-28 protocol, which has none; raw where the session allows it (background.go).
func (c *Conn) probe(ctx context.Context, session *mcp.ClientSession) error {
	c.probes.Add(1)
	ctx, cancel := context.WithTimeout(ctx, min(c.opts.ConnectTimeout, 10*time.Second))
	defer cancel()
	newest := session.InitializeResult().ProtocolVersion >= "2026-07-28"
	method := "ping"
	if newest {
		method = "tools/list"
	}
	if _, raw, err := c.rawCall(ctx, session, method, nil); raw {
		return err
	}
	if newest {
		_, err := session.ListTools(ctx, nil)
		return err
	}
	return session.Ping(ctx, nil)
}

func (cat *catalog) apply(s *Snapshot) {
	s.Tools, s.RawToolCount, s.OmittedTools, s.Notes = cat.tools, cat.rawTools, cat.omitted, cat.notes
	s.Prompts, s.Resources, s.Templates = cat.prompts, cat.resources, cat.templates
	s.catalog = cat
}

// same reports whether a snapshot already shows the catalog (compared as sessions see it:
// catalogs are interned, so equal ones are one).
func (cat *catalog) same(s Snapshot) bool {
	return s.catalog == cat
}

// refresh re-lists and publishes the catalog when it changed. On a session that takes raw
// requests the lists are read raw: when their bytes are those the last listing saw (digest),
// nothing changed and nothing is decoded (rawlist.go).
func (c *Conn) refresh(ctx context.Context, session *mcp.ClientSession, digest *[sha256.Size]byte) error {
	c.relists.Add(1)
	announced := Lists(c.announced.Swap(0))
	up, _ := c.upstreamOf(session)
	cat, d, err := c.list(ctx, session, up, *digest)
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

// list lists every page of what the server offers: tools (filtered by the server's
// allow/deny rules), and prompts, resources and resource templates when the server declares
// them. Each list is walked within the bounds (walk). The lists are asked for at once, not one
// after another: a connection is Ready, and a repoint's new tools reach the sessions, one
// round trip after initialize instead of four (at 1,000 projects on a loaded machine a round
// trip took 0.3 s). The first list to fail ends the others, and its error is the one reported.
// On a wire w that takes raw requests the lists are read raw (rawlist.go), and digest is of
// their pages; cat is nil when those are the pages the digest unless was taken of (nothing
// changed). Otherwise (no wire: legacy SSE, or a session no longer the connection's) they are
// listed through the SDK (listTyped), and the digest is unless.
func (c *Conn) list(ctx context.Context, session *mcp.ClientSession, up upstream, unless [sha256.Size]byte) (cat *catalog, digest [sha256.Size]byte, err error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.ConnectTimeout)
	defer cancel()
	if up != nil && up.takes() {
		return c.listedRaw(ctx, session, up, unless)
	}
	c.lists.Add(1)
	cat, err = c.listTyped(ctx, session)
	return cat, unless, err
}

// listTyped is list through the SDK, for a session that takes no raw requests (legacy SSE).
func (c *Conn) listTyped(ctx context.Context, session *mcp.ClientSession) (*catalog, error) {
	var cat catalog
	g, ctx := atOnce(ctx)
	g.run("tools/list", func() error { return c.listTools(ctx, session, &cat) })
	caps := session.InitializeResult().Capabilities
	if caps != nil && caps.Prompts != nil {
		g.run("prompts/list", func() (err error) {
			cat.prompts, err = collect(ctx, &c.opts, "prompts/list", "prompts", func(ctx context.Context, cursor string) ([]*mcp.Prompt, string, error) {
				res, err := session.ListPrompts(ctx, &mcp.ListPromptsParams{Cursor: cursor})
				if err != nil {
					return nil, "", err
				}
				return res.Prompts, res.NextCursor, nil
			})
			slices.SortFunc(cat.prompts, func(a, b *mcp.Prompt) int { return strings.Compare(a.Name, b.Name) })
			return err
		})
	}
	if caps != nil && caps.Resources != nil {
		g.run("resources/list", func() (err error) {
			cat.resources, err = collect(ctx, &c.opts, "resources/list", "resources", func(ctx context.Context, cursor string) ([]*mcp.Resource, string, error) {
				res, err := session.ListResources(ctx, &mcp.ListResourcesParams{Cursor: cursor})
				if err != nil {
					return nil, "", err
				}
				return res.Resources, res.NextCursor, nil
			})
			return err
		})
		g.run("resources/templates/list", func() (err error) {
			cat.templates, err = collect(ctx, &c.opts, "resources/templates/list", "resource templates", func(ctx context.Context, cursor string) ([]*mcp.ResourceTemplate, string, error) {
				res, err := session.ListResourceTemplates(ctx, &mcp.ListResourceTemplatesParams{Cursor: cursor})
				if err != nil {
					return nil, "", err
				}
				return res.ResourceTemplates, res.NextCursor, nil
			})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return intern(cat), nil
}

// listGroup runs a server's lists at once: the first to fail ends the others (the catalog is
// lost anyway), and its error, naming its method, is the one reported.
type listGroup struct{ *errgroup.Group }

// atOnce starts a group; its lists run in the context returned.
func atOnce(ctx context.Context) (listGroup, context.Context) {
	g, ctx := errgroup.WithContext(ctx)
	return listGroup{g}, ctx
}

func (g listGroup) run(method string, fn func() error) {
	g.Go(func() error {
		if err := fn(); err != nil {
			return fmt.Errorf("%s failed: %w", method, err)
		}
		return nil
	})
}

// listTools lists every page of tools and applies the server's allow/deny filter and the
// schema bound: a tool whose schemas are over --max-schema-bytes is left out, with a note.
func (c *Conn) listTools(ctx context.Context, session *mcp.ClientSession, cat *catalog) error {
	sieve := c.toolSieve()
	err := walk(ctx, &c.opts, "tools/list", "tools", func(ctx context.Context, cursor string) ([]*mcp.Tool, string, error) {
		res, err := session.ListTools(ctx, &mcp.ListToolsParams{Cursor: cursor})
		if err != nil {
			return nil, "", err
		}
		return res.Tools, res.NextCursor, nil
	}, func(tool *mcp.Tool) int64 {
		if !sieve.offered(tool.Name) {
			return 0
		}
		size := jsonSize(tool)
		if sieve.tooLarge(tool.Name, size, func() int64 { return jsonSize(tool.InputSchema) + jsonSize(tool.OutputSchema) }) {
			return 0
		}
		cat.tools = append(cat.tools, tool)
		return size
	})
	if err != nil {
		return err
	}
	slices.SortFunc(cat.tools, func(a, b *mcp.Tool) int { return strings.Compare(a.Name, b.Name) })
	sieve.note(cat)
	return nil
}

// toolSieve applies a server's allow/deny filter and the schema bound to its tools as they are
// listed (raw or through the SDK), and says what it left out.
type toolSieve struct {
	filter    *v1alpha1.ToolFilter
	maxSchema int64
	listed    int      // every tool listed, before the filter and the bound
	omitted   []string // tools over the schema bound
	sizes     []int64  // their schemas' sizes
}

func (c *Conn) toolSieve() *toolSieve {
	return &toolSieve{filter: c.opts.Server.Tools, maxSchema: c.opts.MaxSchemaBytes}
}

// offered counts a listed tool and reports whether the filter offers it.
func (s *toolSieve) offered(name string) bool {
	s.listed++
	return Offered(s.filter, name)
}

// tooLarge reports whether a tool of size bytes is left out for its schemas' size (schemas
// gives it, asked only when the whole tool is over the bound, the schemas being part of it).
func (s *toolSieve) tooLarge(name string, size int64, schemas func() int64) bool {
	if size <= s.maxSchema {
		return false
	}
	n := schemas()
	if n <= s.maxSchema {
		return false
	}
	s.omitted, s.sizes = append(s.omitted, name), append(s.sizes, n)
	return true
}

// note records in cat the tools listed and those left out for the bound, with a note.
func (s *toolSieve) note(cat *catalog) {
	cat.rawTools, cat.omitted = s.listed, len(s.omitted)
	if len(s.omitted) > 0 {
		cat.notes = append(cat.notes, schemaNote(s.omitted, s.sizes, s.maxSchema))
	}
}

// page lists one page of a list from cursor: its items and the next cursor ("" at the end).
type page[T any] func(ctx context.Context, cursor string) ([]*T, string, error)

// walk goes through every page of one list within the bounds: at most MaxListPages pages and
// MaxListItems items, and the sizes keep returns (what each item kept costs; 0 for an item
// dropped) at most MaxListBytes together. method names the list in errors, what its items.
func walk[T any](ctx context.Context, o *Options, method, what string, list page[T], keep func(*T) int64) error {
	cursor, items, kept := "", 0, int64(0)
	for pages := 1; ; pages++ {
		got, next, err := list(ctx, cursor)
		if err != nil {
			return err
		}
		for _, v := range got {
			if v == nil {
				continue
			}
			if items == o.MaxListItems {
				return tooMany(what, o.MaxListItems)
			}
			items++
			if kept += keep(v); kept > o.MaxListBytes {
				return tooManyBytes(what, o.MaxListBytes)
			}
		}
		if next == "" {
			return nil
		}
		if pages == o.MaxListPages {
			return tooManyPages(method, o.MaxListPages)
		}
		cursor = next
	}
}

// collect walks a list and keeps every item.
func collect[T any](ctx context.Context, o *Options, method, what string, list page[T]) ([]*T, error) {
	var out []*T
	err := walk(ctx, o, method, what, list, func(v *T) int64 {
		out = append(out, v)
		return jsonSize(v)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// jsonSize is the size of v as JSON (0 when it has none).
func jsonSize(v any) int64 {
	if v == nil {
		return 0
	}
	data, err := json.Marshal(v)
	if err != nil {
		return 0
	}
	return int64(len(data))
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
