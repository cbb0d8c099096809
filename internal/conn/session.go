package conn

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/config"
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

	ep, err := c.endpoint(ctx)
	if err != nil {
		return false, err
	}
	defer ep.close()

	client := mcp.NewClient(clientInfo, &mcp.ClientOptions{
		// Handlers run one at a time per session: only signal here, re-list in serve.
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { c.requestRelist() },
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			c.relayProgress(req.Params)
		},
	})
	// The deadline cancels the session's own context rather than a derived one: the legacy SSE
	// transport lives only as long as the context given to Connect.
	timedOut := make(chan struct{})
	timer := time.AfterFunc(c.opts.ConnectTimeout, func() { close(timedOut); cancel() })
	session, err := client.Connect(ctx, ep.transport, nil)
	if err == nil {
		defer c.closeSession(session, ep)
		var tools []*mcp.Tool
		var raw int
		if tools, raw, err = c.listTools(ctx, session); err == nil && !timer.Stop() {
			err = context.DeadlineExceeded
		}
		if err == nil {
			c.setReady(session, tools, raw, ep.pid())
			defer c.clearSession()
			return true, c.serve(ctx, session, ep)
		}
	}
	timer.Stop()
	select {
	case <-timedOut:
		err = fmt.Errorf("connect timed out after %s (no answer to initialize or tools/list)", c.opts.ConnectTimeout)
	default:
	}
	if exitErr := ep.exitError(); exitErr != nil {
		err = fmt.Errorf("%w (%v)", exitErr, err)
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

func (c *Conn) setReady(session *mcp.ClientSession, tools []*mcp.Tool, raw, pid int) {
	select { // a death signal left by a call on the previous session is stale now
	case <-c.dead:
	default:
	}
	c.mu.Lock()
	c.session = session
	c.mu.Unlock()
	c.update(func(s *Snapshot) {
		s.Phase, s.Tools, s.RawToolCount, s.PID = v1alpha1.PhaseReady, tools, raw, pid
		s.ReadySince, s.ReconnectAttempts, s.LastError, s.Permanent, s.EverReady = c.opts.Clock.Now(), 0, "", false, true
	})
	c.opts.Log.V(1).Info("MCP server ready", "tools", len(tools), "protocol", session.InitializeResult().ProtocolVersion)
}

func (c *Conn) clearSession() {
	c.mu.Lock()
	c.session = nil
	c.mu.Unlock()
}

// serve watches a Ready session until it dies or the Conn is destroyed.
func (c *Conn) serve(ctx context.Context, session *mcp.ClientSession, ep *endpoint) error {
	waited := make(chan error, 1)
	go func() { waited <- session.Wait() }() // returns once closeSession has run
	health := time.NewTicker(c.opts.HealthInterval)
	defer health.Stop()
	relist := time.NewTicker(c.opts.RelistInterval)
	defer relist.Stop()
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
		case <-health.C:
			if err := c.probe(ctx, session); err != nil {
				return fmt.Errorf("health check failed: %w", err)
			}
		case <-relist.C:
			if err := c.refreshTools(ctx, session); err != nil {
				return err
			}
		case <-c.relist:
			if err := c.refreshTools(ctx, session); err != nil {
				return err
			}
		}
	}
}

// probe checks that the server answers: ping on sessions that have it, tools/list on the
// stateless 2026-07-28 protocol, which has none.
func (c *Conn) probe(ctx context.Context, session *mcp.ClientSession) error {
	ctx, cancel := context.WithTimeout(ctx, min(c.opts.ConnectTimeout, 10*time.Second))
	defer cancel()
	if session.InitializeResult().ProtocolVersion >= "2026-07-28" {
		_, err := session.ListTools(ctx, nil)
		return err
	}
	return session.Ping(ctx, nil)
}

// refreshTools re-lists and publishes the tools when they changed.
func (c *Conn) refreshTools(ctx context.Context, session *mcp.ClientSession) error {
	tools, raw, err := c.listTools(ctx, session)
	if err != nil {
		return fmt.Errorf("tools/list failed: %w", err)
	}
	c.mu.Lock()
	same := raw == c.state.RawToolCount && sameTools(c.state.Tools, tools)
	c.mu.Unlock()
	if !same {
		c.update(func(s *Snapshot) { s.Tools, s.RawToolCount = tools, raw })
	}
	return nil
}

// listTools lists every page of tools and applies the server's allow/deny filter.
func (c *Conn) listTools(ctx context.Context, session *mcp.ClientSession) ([]*mcp.Tool, int, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.ConnectTimeout)
	defer cancel()
	var tools []*mcp.Tool
	raw := 0
	for tool, err := range session.Tools(ctx, nil) {
		if err != nil {
			return nil, 0, err
		}
		raw++
		if Offered(c.opts.Server.Tools, tool.Name) {
			tools = append(tools, tool)
		}
	}
	slices.SortFunc(tools, func(a, b *mcp.Tool) int { return strings.Compare(a.Name, b.Name) })
	return tools, raw, nil
}

// sameTools compares two sorted tool lists by everything a session sees.
func sameTools(a, b []*mcp.Tool) bool {
	return slices.EqualFunc(a, b, func(x, y *mcp.Tool) bool { return toolKey(x) == toolKey(y) })
}

func toolKey(t *mcp.Tool) string {
	data, _ := jsonMarshal(t)
	return string(data)
}

// isPermanent reports failures that retrying cannot heal.
func isPermanent(err error) bool {
	var missing *config.MissingVariableError
	var invalid *invalidConfigError
	return errors.As(err, &missing) || errors.As(err, &invalid)
}
