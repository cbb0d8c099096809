package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/revision"
	"github.com/dsh-dev/projectmcp/internal/testenv"
	"github.com/dsh-dev/projectmcp/internal/testenv/harness"
	"github.com/dsh-dev/projectmcp/internal/testutil"
)

// researchTool is server-everything's tool that runs only as a task (execution.taskSupport
// "required"): four stages of a second each, and with ambiguous true an elicitation first.
const researchTool = "simulate-research-query"

// researchStages are the status messages of its stages.
var researchStages = []string{"Gathering sources...", "Analyzing content...", "Synthesizing findings...", "Generating report..."}

// A session that declares no Tasks calls a tool that runs only as a task, through the project
// endpoint, with the npm SDK client (test/node/tasks.mjs): the gateway runs the task for it.
// The tool is listed as an ordinary one; the call answers with the task's result (without the
// task's id in its _meta) and relays the task's status messages as progress while it runs; a
// task that asks for input asks the session by its own elicitation; and a call the session
// cancels cancels the task upstream (the server sees tasks/cancel).
func TestTaskBridgedNodeClient(t *testing.T) {
	node, dir := testenv.NodeScripts(t)
	upstream, seen := recordingProxy(t, startEverythingHTTP(t, node, dir))
	endpoints := everythingProject(t, upstream)

	cmd := exec.Command(node, filepath.Join(dir, "tasks.mjs"), endpoints.project, "everything__"+researchTool)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tasks.mjs: %v\n%s\n%s", err, out, stderr.String())
	}
	var got struct {
		Listed    map[string]json.RawMessage `json:"listed"`
		Report    string                     `json:"report"`
		Meta      map[string]json.RawMessage `json:"meta"`
		Progress  []string                   `json:"progress"`
		Ambiguous string                     `json:"ambiguous"`
		Asked     []string                   `json:"asked"`
		Cancelled string                     `json:"cancelled"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("tasks.mjs printed %q: %v", out, err)
	}
	if got.Listed == nil || bytes.Contains(got.Listed["execution"], []byte("taskSupport")) {
		t.Errorf("the tool must be listed as an ordinary one (no taskSupport) to a session without Tasks: %s", got.Listed["execution"])
	}
	if !strings.Contains(got.Report, "# Research Report: tide pools") {
		t.Errorf("the call must answer with the task's result; got %q", got.Report)
	}
	if _, ok := got.Meta["io.modelcontextprotocol/related-task"]; ok {
		t.Errorf("the result names the task, which the session did not start: %s", out)
	}
	if !slices.ContainsFunc(got.Progress, func(m string) bool { return slices.Contains(researchStages, m) }) {
		t.Errorf("the task's status messages must come as progress; got %q", got.Progress)
	}
	if len(got.Asked) != 1 || !strings.Contains(got.Ambiguous, "snake") {
		t.Errorf("an input_required task must ask the session (asked %q) and take its answer: %q", got.Asked, got.Ambiguous)
	}
	if got.Cancelled == "answered" {
		t.Errorf("the cancelled call answered")
	}
	testutil.Eventually(t, 20*time.Second, "the server sees tasks/cancel", func() bool { return seen.has("tasks/cancel") })
	for _, m := range []string{"tasks/get", "tasks/result"} {
		if !seen.has(m) {
			t.Errorf("the server never saw %s: %q", m, seen.all())
		}
	}
}

// The same through a per-server endpoint with Go SDK clients (they know no Tasks), of both
// revisions (a 2026-07-28 session's call is bridged to the server's 2025-11-25 as well, and
// the task's question comes to it as an input round): the report, with the stages as progress,
// and an ambiguous query's question answered by the client's elicitation.
func TestTaskBridgedGoClient(t *testing.T) {
	node, dir := testenv.NodeScripts(t)
	endpoints := everythingProject(t, startEverythingHTTP(t, node, dir))
	for name, version := range map[string]string{"stateful": revision.Stateful.String(), "stateless": ""} {
		t.Run(name, func(t *testing.T) {
			var mu sync.Mutex
			var progress, asked []string
			client := mcp.NewClient(&mcp.Implementation{Name: "go-no-tasks", Version: "1"}, &mcp.ClientOptions{
				ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
					mu.Lock()
					defer mu.Unlock()
					progress = append(progress, req.Params.Message)
				},
				ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
					mu.Lock()
					defer mu.Unlock()
					asked = append(asked, req.Params.Message)
					return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"interpretation": "snake"}}, nil
				},
			})
			s := harness.MustDial(t, client, endpoints.server, version, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			params := &mcp.CallToolParams{Name: researchTool, Arguments: map[string]any{"topic": "tides"}}
			params.SetProgressToken("research")
			res, err := s.CallTool(ctx, params)
			if err != nil {
				t.Fatal(err)
			}
			if res.IsError || !strings.Contains(harness.Text(res), "# Research Report: tides") {
				t.Fatalf("the call must answer with the task's result: %s", harness.Text(res))
			}
			res, err = s.CallTool(ctx, &mcp.CallToolParams{Name: researchTool, Arguments: map[string]any{"topic": "python", "ambiguous": true}})
			if err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if !slices.ContainsFunc(progress, func(m string) bool { return slices.Contains(researchStages, m) }) {
				t.Errorf("the task's status messages must come as progress; got %q", progress)
			}
			if len(asked) != 1 || !strings.Contains(harness.Text(res), "snake") {
				t.Errorf("an input_required task must ask the session (asked %q) and take its answer: %s", asked, harness.Text(res))
			}
		})
	}
}

// everythingEndpoints are the endpoints of a project whose one server is server-everything.
type everythingEndpoints struct{ project, server string }

// everythingProject serves server-everything at url (streamable HTTP) as the project's server
// "everything".
func everythingProject(t *testing.T, url string) everythingEndpoints {
	t.Helper()
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "tasks", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{
		{Name: "everything", HTTP: &v1alpha1.HTTPServer{URL: url}},
	}})
	obj := harness.WaitStatus(t, key, 60*time.Second, "Ready", func(o *v1alpha1.ProjectMCP) bool {
		return harness.IsReady(o) && o.Status.Endpoint != "" && len(o.Status.Servers) == 1 && o.Status.Servers[0].Endpoint != ""
	})
	return everythingEndpoints{project: obj.Status.Endpoint, server: obj.Status.Servers[0].Endpoint}
}

// startEverythingHTTP starts the npm server-everything on streamable HTTP, on loopback, and
// returns its MCP URL.
func startEverythingHTTP(t *testing.T, node, dir string) string {
	t.Helper()
	return startConformanceServer(t, exec.Command(node, "--import", filepath.Join(dir, "loopback.mjs"),
		filepath.Join(dir, "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js"), "streamableHttp")) + "/mcp"
}

// methodsSeen are the JSON-RPC methods of the requests a proxy passed on.
type methodsSeen struct {
	mu      sync.Mutex
	methods []string
}

func (m *methodsSeen) add(method string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.methods = append(m.methods, method)
}

func (m *methodsSeen) has(method string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Contains(m.methods, method)
}

func (m *methodsSeen) all() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.methods)
}

// recordingProxy is a plain reverse proxy to target (testutil.BareProxy) on loopback that notes
// the method of every request POSTed through it; it returns target's URL through the proxy.
func recordingProxy(t *testing.T, target string) (string, *methodsSeen) {
	return refusingProxy(t, target, func(string) bool { return false })
}

// refusingProxy is recordingProxy answering 503 to the requests whose method refuse names,
// which it does not pass on.
func refusingProxy(t *testing.T, target string, refuse func(method string) bool) (string, *methodsSeen) {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	proxy, closeIdle := testutil.BareProxy(u)
	seen := &methodsSeen{}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			body, _ := io.ReadAll(r.Body)
			var msg struct {
				Method string `json:"method"`
			}
			if json.Unmarshal(body, &msg) == nil && msg.Method != "" {
				seen.add(msg.Method)
				if refuse(msg.Method) {
					http.Error(w, "refused by the test", http.StatusServiceUnavailable)
					return
				}
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		proxy.ServeHTTP(w, r)
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() {
		_ = srv.Close()
		closeIdle()
	})
	return "http://" + l.Addr().String() + u.Path, seen
}

// A session that starts a task itself (the npm SDK client, SEP-1686) gets it carried through
// a per-server endpoint: the task under an id of the gateway's, its status and result by that
// id (the result's related-task naming it too), and its cancel, its initialize result telling it
// task-augmented calls are taken (the client holds the server to that). The id is useless to
// another session and refused once altered, with the error a server gives for a task it does
// not know.
func TestTaskCarriedNodeClient(t *testing.T) {
	node, dir := testenv.NodeScripts(t)
	endpoints := everythingProject(t, startEverythingHTTP(t, node, dir))

	cmd := exec.Command(node, filepath.Join(dir, "tasks-carried.mjs"), endpoints.server, researchTool)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tasks-carried.mjs: %v\n%s\n%s", err, out, stderr.String())
	}
	type rpcError struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	var got struct {
		Announced        json.RawMessage `json:"announced"`
		AnnouncedWithout json.RawMessage `json:"announcedWithout"`
		TaskID           string          `json:"taskId"`
		Statuses         []struct {
			TaskID, Status, Message string
		} `json:"statuses"`
		Report  string `json:"report"`
		Related *struct {
			TaskID string `json:"taskId"`
		} `json:"related"`
		Foreign, Altered *rpcError
		Cancelled        struct {
			Same   bool   `json:"same"`
			Status string `json:"status"`
		} `json:"cancelled"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("tasks-carried.mjs printed %q: %v", out, err)
	}
	if !bytes.Contains(got.Announced, []byte(`"tools":{"call":{}}`)) || string(got.AnnouncedWithout) != "null" {
		t.Errorf("a session that declares Tasks must be told task-augmented calls are taken, and only it: %s, %s", got.Announced, got.AnnouncedWithout)
	}
	if !strings.HasPrefix(got.TaskID, "projectmcp-task.") {
		t.Errorf("the session must get the task under an id of the gateway's: %q", got.TaskID)
	}
	if n := len(got.Statuses); n == 0 || got.Statuses[n-1].Status != "completed" {
		t.Errorf("tasks/get must follow the task to its end: %+v", got.Statuses)
	}
	for _, s := range got.Statuses {
		if s.TaskID != got.TaskID {
			t.Errorf("tasks/get names the task %q, not the session's id", s.TaskID)
		}
	}
	if !strings.Contains(got.Report, "# Research Report: kelp") || got.Related == nil || got.Related.TaskID != got.TaskID {
		t.Errorf("tasks/result must answer the task's result, naming the session's id: %s", out)
	}
	for what, e := range map[string]*rpcError{"another session": got.Foreign, "an altered id": got.Altered} {
		if e == nil || e.Code != -32602 || !strings.Contains(e.Message, "Task not found") {
			t.Errorf("%s's tasks/get must be refused as an unknown task: %+v", what, e)
		}
	}
	if !got.Cancelled.Same || got.Cancelled.Status != "cancelled" {
		t.Errorf("tasks/cancel must cancel the session's task: %+v", got.Cancelled)
	}
}

// A session that goes away while the gateway runs a task for its call (a Go SDK client closes
// its session at the task's first progress) has the task cancelled upstream.
func TestTaskBridgedSessionGoesAway(t *testing.T) {
	node, dir := testenv.NodeScripts(t)
	upstream, seen := recordingProxy(t, startEverythingHTTP(t, node, dir))
	endpoints := everythingProject(t, upstream)

	progressed := make(chan struct{})
	var once sync.Once
	client := mcp.NewClient(&mcp.Implementation{Name: "go-leaves", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) { once.Do(func() { close(progressed) }) },
	})
	s := harness.MustDial(t, client, endpoints.server, revision.Stateful.String(), nil)
	called := make(chan error, 1)
	go func() {
		params := &mcp.CallToolParams{Name: researchTool, Arguments: map[string]any{"topic": "left behind"}}
		params.SetProgressToken("leaving")
		_, err := s.CallTool(context.Background(), params)
		called <- err
	}()
	select {
	case <-progressed:
	case err := <-called:
		t.Fatalf("the call ended before its first progress: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("no progress within 30s")
	}
	// The session ends as a client's DELETE ends it (the SDK's Close waits for the call first).
	req, err := http.NewRequest(http.MethodDelete, endpoints.server, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Mcp-Session-Id", s.ID())
	req.Header.Set("Mcp-Protocol-Version", revision.Stateful.String())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE: %s", resp.Status)
	}
	testutil.Eventually(t, 20*time.Second, "the server sees tasks/cancel", func() bool { return seen.has("tasks/cancel") })
	t.Logf("the call of the session that ended: %v", <-called)
}

// A server that stops answering for the task the gateway runs (its tasks/get fails) ends the
// call with an error naming the server, and the task is cancelled, though the task's result
// would have come: the call waits for a task only while the server answers for it.
func TestTaskBridgedPollFails(t *testing.T) {
	node, dir := testenv.NodeScripts(t)
	upstream, seen := refusingProxy(t, startEverythingHTTP(t, node, dir), func(m string) bool { return m == "tasks/get" })
	endpoints := everythingProject(t, upstream)

	s := harness.MustDial(t, mcp.NewClient(&mcp.Implementation{Name: "go-polls", Version: "1"}, nil), endpoints.server, revision.Stateful.String(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: researchTool, Arguments: map[string]any{"topic": "silence"}})
	switch {
	case err != nil:
		t.Fatal(err)
	case !res.IsError || !strings.Contains(harness.Text(res), `"everything"`) || strings.Contains(harness.Text(res), "Research Report"):
		t.Fatalf("the call must fail naming the server: %s", harness.Text(res))
	}
	t.Logf("the call's error: %s", harness.Text(res))
	testutil.Eventually(t, 20*time.Second, "the server sees tasks/cancel", func() bool { return seen.has("tasks/cancel") })
}
