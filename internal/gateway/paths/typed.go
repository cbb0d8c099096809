package paths

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/internal/conn"
	"github.com/dsh-dev/projectmcp/internal/gateway/access"
)

// callForwarded forwards a call the SDK's server took from the session (a 2026-07-28
// session's call to a server speaking 2025-11-25, mostly) to such a server, and decodes its
// result for the SDK to send on. Over streamable HTTP the server's own requests during the call (sampling,
// elicitation) then arrive on the call's own stream, which tells whose they are; the
// SDK's client hands its handlers no trace of the call, and the connection could only guess
// (the one session with a request in flight, else an error). A server speaking 2026-07-28, or
// a connection that takes typed requests only, is ErrOtherRevision or ErrNotRaw before anything
// is sent, and the caller uses the SDK's client.
// A tool that runs only as a task is run as one (taskbridge.go), each request bounded by limit.
func callForwarded(ctx context.Context, c *conn.Conn, raw string, args json.RawMessage, onProgress func(*mcp.ProgressNotificationParams), limit time.Duration) (*mcp.CallToolResult, error) {
	members := callMembers(raw, args, nil, nil)
	var res conn.RawResult
	var err error
	if c.TaskSupport(raw) == conn.TaskRequired {
		res, err = callAsTask(ctx, c, members, onProgress, conn.AcceptsStatefulOnly, limit)
	} else {
		res, err = c.Forward(ctx, "tools/call", members, onProgress, conn.AcceptsStatefulOnly)
	}
	if err != nil {
		return nil, err
	}
	var out mcp.CallToolResult
	if err := json.Unmarshal(res, &out); err != nil {
		return nil, fmt.Errorf("the server's result is not a tools/call result: %v", err)
	}
	return &out, nil
}

// metaLevel is the log level a 2026-07-28 request asks for in its _meta, or "".
func metaLevel(req mcp.Request) mcp.LoggingLevel {
	if m := MetaOf(req); m != nil {
		if l, ok := m[mcp.MetaKeyLogLevel].(string); ok {
			return mcp.LoggingLevel(l)
		}
	}
	return ""
}

// ToolHandler forwards a call on a projected tool to the session's slot for the server. Failures
// of the server (down, gone, protocol errors) come back as tool errors naming the server, so
// the agent sees them as it sees any failing tool.
func (p *Paths) ToolHandler(server, raw string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		args := req.Params.Arguments
		if len(args) == 0 || string(args) == "null" {
			args = json.RawMessage("{}")
		}
		o := OriginOf(req)
		o.name, o.raw = req.Params.Name, raw
		o.item, o.args = access.Item{Resource: access.ResourceTools, Server: server, Name: raw}, args
		if c := p.ep.Lookup(o.session, server); c != nil {
			o.task = c.TaskSupport(raw) == conn.TaskRequired // run as a task (taskbridge.go): the call timeout bounds each request
		}
		token := req.Params.GetProgressToken()
		level := mcp.LoggingLevel("")
		if o.stateless {
			level = metaLevel(req)
		}
		var write func(relayed) // by the call's own writer, which serves this session alone (relayCall)
		if (token != nil || level != "") && req.Session != nil {
			write = func(e relayed) {
				switch {
				case e.progress != nil && token != nil:
					_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
						ProgressToken: token, Progress: e.progress.Progress, Total: e.progress.Total, Message: e.progress.Message,
					})
				case e.log != nil:
					_ = req.Session.Log(ctx, e.log) // on the request's stream, at the request's level
				}
			}
		}
		send := func(ctx context.Context, c *conn.Conn) (*mcp.CallToolResult, error) {
			return relayCall(ctx, write, func(ctx context.Context, put func(relayed)) (*mcp.CallToolResult, error) {
				if level != "" {
					ctx = logsTo(ctx, put, level)
				}
				onProgress := progressTo(put, token != nil)
				if len(req.Params.InputResponses) == 0 && len(req.Params.RequestState) == 0 {
					if res, err := callForwarded(ctx, c, raw, args, onProgress, p.taskLimit(o)); !retried(err) {
						return res, err
					}
				}
				return c.Call(ctx, &mcp.CallToolParams{Name: raw, Arguments: args,
					InputResponses: req.Params.InputResponses, RequestState: req.Params.RequestState}, onProgress)
			})
		}
		res, round, err := inRounds(ctx, p, o, req.ClientCapabilities(), req.Params.RequestState, req.Params.InputResponses, server, send)
		switch {
		case round != nil:
			return &mcp.CallToolResult{InputRequests: round.requests, RequestState: round.state}, nil
		case err != nil:
			rpcErr, text := failureOf(err, true, ctx.Err() != nil)
			if rpcErr != nil {
				return nil, rpcErr
			}
			return errorResult(text), nil
		}
		return &mcp.CallToolResult{Content: res.Content, StructuredContent: res.StructuredContent, IsError: res.IsError,
			InputRequests: res.InputRequests, RequestState: res.RequestState}, nil
	}
}

// inRounds runs a session's request on server: a stateful session's through forward, a
// stateless one's through statelessRound, as a 2025-11-25 server may ask the session for input
// while the request runs, and the request then runs on while the session is asked in its
// result (round: input.go). A requestState of the server's own (2026-07-28, opened by
// SealStates) passes through in send; the gateway's own (isOwnState) resumes the call it names,
// and never reaches a server. A resumption the gateway refuses is an *inputError.
func inRounds[T any](ctx context.Context, p *Paths, o Origin, caps *mcp.ClientCapabilities, state string,
	responses mcp.InputResponseMap, server string, send func(context.Context, *conn.Conn) (T, error)) (res T, round *inputRound, err error) {
	own := isOwnState(ctx, state)
	switch {
	case !o.stateless && own:
		return res, nil, invalidInput("the requestState was issued to another session of this project")
	case !o.stateless:
		res, err = dispatch(ctx, p, o, server, send)
		return res, nil, err
	case !own:
		state = "" // none, or the server's own (opened by SealStates), which send carries
	}
	res, round, err = statelessRound(ctx, p, o, caps, state, responses, server, send)
	if round != nil {
		noteIssued(ctx, round.state)
	}
	return res, round, err
}

// PromptHandler forwards prompts/get on a projected prompt under the server's own name.
func (p *Paths) PromptHandler(server, raw string) mcp.PromptHandler {
	return func(ctx context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		o := OriginOf(req)
		o.name, o.raw = req.Params.Name, raw
		o.item = access.Item{Resource: access.ResourcePrompts, Server: server, Name: raw}
		if p.opts.AuditArguments {
			o.args, _ = json.Marshal(req.Params.Arguments)
		}
		res, round, err := inRounds(ctx, p, o, req.ClientCapabilities(), req.Params.RequestState, req.Params.InputResponses, server,
			func(ctx context.Context, c *conn.Conn) (*mcp.GetPromptResult, error) {
				return c.GetPrompt(ctx, &mcp.GetPromptParams{Name: raw, Arguments: req.Params.Arguments,
					InputResponses: req.Params.InputResponses, RequestState: req.Params.RequestState})
			})
		switch {
		case err != nil:
			return nil, RequestError(ctx, err)
		case round != nil:
			return &mcp.GetPromptResult{InputRequests: round.requests, RequestState: round.state}, nil
		}
		return &mcp.GetPromptResult{Description: res.Description, Messages: res.Messages,
			InputRequests: res.InputRequests, RequestState: res.RequestState}, nil
	}
}

// ResourceHandler forwards resources/read, URI unchanged, to the server that lists the URI or
// whose template matched it (the SDK server routes by exact URI, then by template).
func (p *Paths) ResourceHandler(server string) mcp.ResourceHandler {
	return func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		o := OriginOf(req)
		o.name = req.Params.URI
		o.item = p.ep.Routes().ResourceItem(server, req.Params.URI)
		res, round, err := inRounds(ctx, p, o, req.ClientCapabilities(), req.Params.RequestState, req.Params.InputResponses, server,
			func(ctx context.Context, c *conn.Conn) (*mcp.ReadResourceResult, error) {
				return c.ReadResource(ctx, &mcp.ReadResourceParams{URI: req.Params.URI,
					InputResponses: req.Params.InputResponses, RequestState: req.Params.RequestState})
			})
		switch {
		case err != nil:
			return nil, RequestError(ctx, err)
		case round != nil:
			return &mcp.ReadResourceResult{InputRequests: round.requests, RequestState: round.state}, nil
		}
		return &mcp.ReadResourceResult{Contents: res.Contents, InputRequests: res.InputRequests, RequestState: res.RequestState}, nil
	}
}

// sessionCaller sends a server's requests to a stateful agent session, when the session
// declared the capability (else the server gets a clear error, as the session would give).
type sessionCaller struct{ ss *mcp.ServerSession }

func (s sessionCaller) capabilities() *mcp.ClientCapabilities {
	if ip := s.ss.InitializeParams(); ip != nil && ip.Capabilities != nil {
		return ip.Capabilities
	}
	return &mcp.ClientCapabilities{}
}

func lacks(capability string) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidRequest, Message: "projectmcp: the agent session did not declare the " + capability + " capability"}
}

func (s sessionCaller) CreateMessage(ctx context.Context, p *mcp.CreateMessageParams) (*mcp.CreateMessageResult, error) {
	if s.capabilities().Sampling == nil {
		return nil, lacks("sampling")
	}
	return s.ss.CreateMessage(ctx, p)
}

func (s sessionCaller) Elicit(ctx context.Context, p *mcp.ElicitParams) (*mcp.ElicitResult, error) {
	if s.capabilities().Elicitation == nil {
		return nil, lacks("elicitation")
	}
	return s.ss.Elicit(ctx, p)
}

// Complete routes completion/complete by its reference: a prompt by projected name (sent
// upstream under the server's own name), a resource template by its URI template.
func (p *Paths) Complete(ctx context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
	ref := req.Params.Ref
	if ref == nil {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "completion/complete needs a ref"}
	}
	up := *ref
	server, raw := p.ep.Routes().CompletionTarget(ref)
	if ref.Type == "ref/prompt" {
		up.Name = raw
	}
	if server == "" {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("no server of this project offers %s %q", ref.Type, ref.Name+ref.URI)}
	}
	params := *req.Params
	params.Ref = &up
	o := OriginOf(req)
	o.item = p.ep.Routes().CompletionItem(server, raw, ref)
	res, err := dispatch(ctx, p, o, server, func(ctx context.Context, c *conn.Conn) (*mcp.CompleteResult, error) { return c.Complete(ctx, &params) })
	if err != nil {
		return nil, RequestError(ctx, err)
	}
	return &mcp.CompleteResult{Completion: res.Completion}, nil
}

// Subscribe subscribes the session o names to uri on server, as dispatch sends any of its
// requests (admitted, traced, counted), and gives the connection that took it.
func (p *Paths) Subscribe(ctx context.Context, o Origin, server, uri string) (*conn.Conn, error) {
	o.method, o.item = "resources/subscribe", p.ep.Routes().ResourceItem(server, uri) // for a listen's subscription too
	var subscribed *conn.Conn
	_, err := dispatch(ctx, p, o, server, func(ctx context.Context, c *conn.Conn) (struct{}, error) {
		err := c.Subscribe(ctx, uri)
		if err == nil {
			subscribed = c
		}
		return struct{}{}, err
	})
	return subscribed, err
}

// IsReplay says whether a Last-Event-ID names an event of one of the gateway's own resumable
// streams (Resume serves it).
func IsReplay(lastEventID string) bool { return strings.HasPrefix(lastEventID, replayPrefix) }
