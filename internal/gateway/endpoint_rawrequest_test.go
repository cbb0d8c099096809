package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/gateway"
	"github.com/dsh-dev/projectmcp/internal/metrics"
	"github.com/dsh-dev/projectmcp/internal/testenv/harness"
	"github.com/dsh-dev/projectmcp/test/fixture"
)

// prompts/get, resources/read and completion/complete reach the session as the server sent
// them, _meta and fields no SDK type models included, when the session and the server speak
// the same revision: compared byte for byte (as JSON values) with what the server sends a
// direct session, on the wire.

// wireLog keeps the JSON-RPC responses a client received, as they came.
type wireLog struct {
	mu        sync.Mutex
	responses []json.RawMessage
}

// note keeps the responses among the messages in data (one JSON message, or an event stream).
func (l *wireLog) note(data []byte) {
	var lines [][]byte
	if bytes.HasPrefix(bytes.TrimSpace(data), []byte("{")) {
		lines = [][]byte{data}
	} else {
		for _, line := range bytes.Split(data, []byte("\n")) {
			if rest, ok := bytes.CutPrefix(line, []byte("data:")); ok {
				lines = append(lines, bytes.TrimSpace(rest))
			}
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range lines {
		var msg struct {
			Result json.RawMessage `json:"result"`
		}
		if json.Unmarshal(line, &msg) == nil && len(msg.Result) > 0 {
			l.responses = append(l.responses, bytes.Clone(msg.Result))
		}
	}
}

// last is the last result received, re-encoded so that two can be compared as JSON values.
func (l *wireLog) last(t *testing.T) string {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.responses) == 0 {
		t.Fatal("no result on the wire")
	}
	var v any
	if err := json.Unmarshal(l.responses[len(l.responses)-1], &v); err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(v)
	return string(data)
}

// logged is an HTTP transport that notes the responses to POSTs (the GET stream never ends).
type logged struct {
	log    *wireLog
	header http.Header
}

func (l logged) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	for k, v := range l.header {
		req.Header[k] = v
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil || req.Method != http.MethodPost {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	l.log.note(body)
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp, nil
}

// loggedReader notes every line a stdio client reads.
type loggedReader struct {
	io.ReadCloser
	log *wireLog
	buf []byte
}

func (r *loggedReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	r.buf = append(r.buf, p[:n]...)
	for {
		i := bytes.IndexByte(r.buf, '\n')
		if i < 0 {
			break
		}
		r.log.note(r.buf[:i])
		r.buf = r.buf[i+1:]
	}
	return n, err
}

// directLogged is a Go SDK session over stdio to a fixture process started with args, speaking
// version, whose responses are noted as they came.
func directLogged(t *testing.T, version string, args ...string) (*mcp.ClientSession, *wireLog) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), fixture.EnvVar+"=1")
	cmd.Stderr = harness.Logs
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stdin.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() })
	log := &wireLog{}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := mcp.NewClient(&mcp.Implementation{Name: "direct", Version: "1"}, nil).Connect(ctx,
		&mcp.IOTransport{Reader: &loggedReader{ReadCloser: io.NopCloser(bufio.NewReader(stdout)), log: log}, Writer: stdin},
		&mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, log
}

// endpointLogged is a Go SDK session through the project's endpoint, speaking revision (a
// 2026-07-28 one is stateless, named by SessionHeader), whose responses are noted as they came.
func endpointLogged(t *testing.T, key types.NamespacedName, revision string) (*mcp.ClientSession, *wireLog) {
	t.Helper()
	version, header := revision, http.Header(nil)
	if revision == "2026-07-28" {
		version, header = "", http.Header{gateway.SessionHeader: {"logged"}}
	}
	log := &wireLog{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := mcp.NewClient(&mcp.Implementation{Name: "logged", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: harness.EndpointOf(key), HTTPClient: &http.Client{Transport: logged{log, header}}},
		&mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, log
}

func TestGatewayRequestsKeepUnmodeledFields(t *testing.T) {
	for _, revision := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(revision, func(t *testing.T) {
			args := []string{"--future-fields"}
			version := revision
			if revision == "2026-07-28" {
				version = ""
			} else {
				args = append(args, "--protocol", revision) // the server speaks the session's revision
			}
			ns := harness.NewNamespace(t)
			key := harness.Create(t, ns, "future", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "a", args...)}})
			harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
			d, direct := directLogged(t, version, append([]string{"--name", "a"}, args...)...)
			s, through := endpointLogged(t, key, revision)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := s.ListPrompts(ctx, nil); err != nil { // mounts a stateless session
				t.Fatal(err)
			}

			for _, c := range []struct {
				method     string
				direct, gw func() error
				wants      []string
			}{
				{"prompts/get",
					func() error { _, err := d.GetPrompt(ctx, &mcp.GetPromptParams{Name: "future"}); return err },
					func() error { _, err := s.GetPrompt(ctx, &mcp.GetPromptParams{Name: "a__future"}); return err },
					[]string{`"futureField":{"kept":true,"n":0}`, `"futureContentField":{"kept":false}`, `"fixture/future":{"kept":true}`}},
				{"resources/read",
					func() error {
						_, err := d.ReadResource(ctx, &mcp.ReadResourceParams{URI: "fixture://a/future"})
						return err
					},
					func() error {
						_, err := s.ReadResource(ctx, &mcp.ReadResourceParams{URI: "fixture://a/future"})
						return err
					},
					[]string{`"futureContentField":{"kept":false}`, `"fixture/future":{"kept":true}`}},
				{"completion/complete",
					func() error {
						_, err := d.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "future"}, Argument: mcp.CompleteParamsArgument{Name: "x", Value: "f"}})
						return err
					},
					func() error {
						_, err := s.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "a__future"}, Argument: mcp.CompleteParamsArgument{Name: "x", Value: "f"}})
						return err
					},
					[]string{`"futureField":{"kept":true,"n":0}`, `"fixture/future":{"kept":true}`}},
			} {
				raw := metrics.RequestPath.WithLabelValues(c.method, "raw")
				before := promtest.ToFloat64(raw)
				if err := c.direct(); err != nil {
					t.Fatalf("%s directly: %v", c.method, err)
				}
				if err := c.gw(); err != nil {
					t.Fatalf("%s through the endpoint: %v", c.method, err)
				}
				want, got := direct.last(t), through.last(t)
				if got != want {
					t.Fatalf("%s: through the endpoint %s, directly %s", c.method, got, want)
				}
				for _, w := range c.wants {
					if !strings.Contains(got, w) {
						t.Fatalf("%s: %s lacks %s", c.method, got, w)
					}
				}
				if n := promtest.ToFloat64(raw) - before; n != 1 {
					t.Fatalf("%s on the raw path: %v", c.method, n)
				}
			}
		})
	}
}

// A stateless session's requests to a server speaking 2025-11-25 are bridged: what the server
// gives a 2025-11-25 session directly, every member it sent included (the SDK's path lost the
// ones its types do not model), with what a 2026-07-28 result carries besides: resultType,
// the endpoint's serverInfo in _meta, and a read's caching hints.
func TestGatewayBridgedRequestsKeepUnmodeledFields(t *testing.T) {
	args := []string{"--future-fields", "--protocol", "2025-11-25"}
	ns := harness.NewNamespace(t)
	key := harness.Create(t, ns, "bridged", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{harness.FixtureServer(t, "a", args...)}})
	harness.WaitStatus(t, key, 30*time.Second, "Ready", harness.IsReady)
	d, direct := directLogged(t, "2025-11-25", append([]string{"--name", "a"}, args...)...)
	s, through := endpointLogged(t, key, "2026-07-28")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.ListPrompts(ctx, nil); err != nil { // mounts the stateless session
		t.Fatal(err)
	}
	serverInfo := map[string]any{"name": "projectmcp", "title": "projectmcp " + key.String(), "version": "v1alpha1"}
	complete := func(c *mcp.CompleteParams) func(*mcp.ClientSession) error {
		return func(s *mcp.ClientSession) error { _, err := s.Complete(ctx, c); return err }
	}
	for _, c := range []struct {
		method, path string
		direct, gw   func(*mcp.ClientSession) error
	}{
		{"tools/call", "",
			func(s *mcp.ClientSession) error {
				_, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "future"})
				return err
			},
			func(s *mcp.ClientSession) error {
				_, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "a__future"})
				return err
			}},
		{"prompts/get", "raw",
			func(s *mcp.ClientSession) error {
				_, err := s.GetPrompt(ctx, &mcp.GetPromptParams{Name: "future"})
				return err
			},
			func(s *mcp.ClientSession) error {
				_, err := s.GetPrompt(ctx, &mcp.GetPromptParams{Name: "a__future"})
				return err
			}},
		{"resources/read", "raw",
			func(s *mcp.ClientSession) error {
				_, err := s.ReadResource(ctx, &mcp.ReadResourceParams{URI: "fixture://a/future"})
				return err
			},
			func(s *mcp.ClientSession) error {
				_, err := s.ReadResource(ctx, &mcp.ReadResourceParams{URI: "fixture://a/future"})
				return err
			}},
		// Through the SDK this one failed: the server was asked at the session's revision.
		{"completion/complete", "raw",
			complete(&mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "future"}, Argument: mcp.CompleteParamsArgument{Name: "x", Value: "f"}}),
			complete(&mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "a__future"}, Argument: mcp.CompleteParamsArgument{Name: "x", Value: "f"}})},
	} {
		counter := metrics.RequestPath.WithLabelValues(c.method, "raw")
		if c.method == "tools/call" {
			counter = metrics.FastPath.WithLabelValues("raw")
		}
		before := promtest.ToFloat64(counter)
		if err := c.direct(d); err != nil {
			t.Fatalf("%s directly: %v", c.method, err)
		}
		if err := c.gw(s); err != nil {
			t.Fatalf("%s through the endpoint: %v", c.method, err)
		}
		var want, got map[string]any
		if err := json.Unmarshal([]byte(direct.last(t)), &want); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(through.last(t)), &got); err != nil {
			t.Fatal(err)
		}
		meta, _ := want["_meta"].(map[string]any)
		if meta == nil {
			meta = map[string]any{}
		}
		meta[mcp.MetaKeyServerInfo] = serverInfo
		want["_meta"], want["resultType"] = meta, "complete"
		if c.method == "resources/read" {
			want["ttlMs"], want["cacheScope"] = 0.0, "public"
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: through the endpoint %v, want %v", c.method, got, want)
		}
		if n := promtest.ToFloat64(counter) - before; n != 1 {
			t.Fatalf("%s on the raw path: %v", c.method, n)
		}
	}
}
