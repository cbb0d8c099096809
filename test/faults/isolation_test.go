//go:build faults

package faults

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
)

// Hostile sessions: what one session does to its own stream or to another identity's session
// stays with it.

// intruderToken is a token of a second ServiceAccount allowed, like the suite's own, to use
// every ProjectMCP of ns (the Role agentToken made).
func (s *suite) intruderToken(t *testing.T) string {
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "intruder", Namespace: ns}}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "intruder", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "agent"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "intruder", Namespace: ns}}}
	if err := s.env.Client.Create(ctx, sa); err != nil {
		t.Fatal(err)
	}
	if err := s.env.Client.Create(ctx, rb); err != nil {
		t.Fatal(err)
	}
	s.undo = append(s.undo, func() { _ = s.env.Client.Delete(ctx, rb); _ = s.env.Client.Delete(ctx, sa) })
	cs, err := kubernetes.NewForConfig(s.env.Config)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "intruder", &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// handPost sends one JSON-RPC message of a stateful session by hand with token, and returns
// the response's status and session id.
func (s *suite) handPost(t *testing.T, key types.NamespacedName, token, sid, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, s.endpoint(key), strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header.Get("Mcp-Session-Id")
}

func (s *suite) sessionHijack(t *testing.T) {
	s.fault(t, row{fault: "another identity replays a session id",
		sees:       "every request naming the session (an answer to the server's elicitation, the GET stream, a tool call, DELETE) gets 404; the owner's session goes on and the server gets the owner's answer",
		guaranteed: "sessions are bound to the principal that opened them; status, spans and logs carry a hash of the session id, never the id",
	}, func(t *testing.T, r *row) {
		key := s.project(t, "hijack", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{s.stdio("h")}}, true)
		intruder := s.intruderToken(t)
		var sid string
		var mu sync.Mutex // guards refused and tried: the handler runs in the client's goroutine
		refused, tried := 0, 0
		owner := s.mustConnect(t, key, "2025-11-25", &mcp.ClientOptions{
			ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				mu.Lock()
				defer mu.Unlock()
				for id := range 6 {
					tried++
					answer := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"result":{"action":"accept","content":{"answer":"intruder"}}}`, id)
					if code, _ := s.handPost(t, key, intruder, sid, answer); code == http.StatusNotFound {
						refused++
					}
				}
				tried++
				if code, _ := s.handPost(t, key, intruder, sid, `{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"h__echo","arguments":{"text":"as the owner"}}}`); code == http.StatusNotFound {
					refused++
				}
				return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": "owner"}}, nil
			}})
		sid = owner.ID()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		res, err := owner.CallTool(ctx, &mcp.CallToolParams{Name: "h__elicit", Arguments: map[string]any{"text": "approve?"}})
		if err != nil || len(res.Content) == 0 || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, `"owner"`) {
			t.Fatalf("the server must get the owner's answer: %+v %v", res, err)
		}
		mu.Lock()
		defer mu.Unlock()
		del, _ := http.NewRequest(http.MethodDelete, s.endpoint(key), nil)
		del.Header.Set("Authorization", "Bearer "+intruder)
		del.Header.Set("Mcp-Session-Id", sid)
		tried++
		if resp, err := http.DefaultClient.Do(del); err == nil {
			if resp.StatusCode == http.StatusNotFound {
				refused++
			}
			resp.Body.Close()
		}
		if refused != tried {
			t.Errorf("the intruder was refused %d of %d times, want every time", refused, tried)
		}
		if _, err := owner.CallTool(ctx, &mcp.CallToolParams{Name: "h__echo", Arguments: map[string]any{"text": "mine"}}); err != nil {
			t.Errorf("the owner's session must go on: %v", err)
		}
		r.figure("%d of %d requests of another identity under the owner's session id refused (404)", refused, tried)
	})
}

func (s *suite) slowLogReader(t *testing.T) {
	s.fault(t, row{fault: "session whose stream never reads, at log level debug",
		sees:       "that session loses its oldest log lines, then its GET stream once a write to it takes longer than the stream write timeout; a bystander on the same server gets its elicitation and answer at once",
		guaranteed: "log lines reach a session through its own bounded queue and writer; every write to a session is bounded (10 s)",
	}, func(t *testing.T, r *row) {
		key := s.project(t, "loglag", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{s.stdio("g", "--protocol", "2025-11-25")}}, true)
		_, sid := s.handPost(t, key, s.token, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"stalled","version":"1"}}}`)
		s.handPost(t, key, s.token, sid, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		s.handPost(t, key, s.token, sid, `{"jsonrpc":"2.0","id":2,"method":"logging/setLevel","params":{"level":"debug"}}`)
		dialer := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
			var err error
			_ = c.Control(func(fd uintptr) { err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 2048) })
			return err
		}}
		stuck, err := dialer.Dial("tcp", s.addrs.gateway)
		if err != nil {
			t.Fatal(err)
		}
		defer stuck.Close()
		fmt.Fprintf(stuck, "GET /projects/%s/%s/mcp HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\nAuthorization: Bearer %s\r\nMcp-Session-Id: %s\r\nMcp-Protocol-Version: 2025-11-25\r\n\r\n",
			key.Namespace, key.Name, s.addrs.gateway, s.token, sid)
		time.Sleep(200 * time.Millisecond)

		cs := s.mustConnect(t, key, "2025-11-25", &mcp.ClientOptions{
			ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
				return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"answer": "here"}}, nil
			}})
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		line := strings.Repeat("x", 256<<10)
		for range 40 { // 10 MiB of log lines, past every buffer between the gateway and the stalled reader
			if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "g__log", Arguments: map[string]any{"level": "debug", "text": line}}); err != nil {
				t.Fatalf("a log call: %v", err)
			}
		}
		start := time.Now()
		callCtx, callCancel := context.WithTimeout(ctx, 30*time.Second)
		defer callCancel()
		res, err := cs.CallTool(callCtx, &mcp.CallToolParams{Name: "g__elicit", Arguments: map[string]any{"text": "still there?"}})
		if err != nil || len(res.Content) == 0 || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "here") {
			t.Fatalf("the bystander's elicitation beside a stalled stream (after %s): %+v %v", time.Since(start), res, err)
		}
		r.figure("an elicitation beside a stream stalled by 10 MiB of log lines: %s", ms(time.Since(start)))
	})
}

func (s *suite) batchSession(t *testing.T) {
	s.fault(t, row{fault: "a batch session keeps 1000 calls in flight",
		sees:       "the batch session's calls beyond its share wait in its own line; an interactive session on the same server (24 workers) gets its calls answered as fast as alone",
		guaranteed: "a session has at most --max-calls-per-session (16) requests in flight on a connection, the connection --max-calls-per-server (256); freed slots go round the waiting principals, then their sessions",
	}, func(t *testing.T, r *row) {
		key := s.project(t, "batch", v1alpha1.ProjectMCPSpec{Servers: []v1alpha1.MCPServer{s.stdio("w", "--workers", "24")}}, true)
		interactive, batch := s.mustConnect(t, key, "2025-11-25", nil), s.mustConnect(t, key, "2025-11-25", nil)
		p50 := func() time.Duration {
			var took []time.Duration
			for range 200 {
				start := time.Now()
				if _, err := call(interactive, 10*time.Second, "w__echo", map[string]any{"text": "hi"}); err != nil {
					t.Fatalf("an interactive call: %v", err)
				}
				took = append(took, time.Since(start))
			}
			slices.Sort(took)
			return took[len(took)/2]
		}
		alone := p50()
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		defer func() { cancel(); wg.Wait() }()
		for range 1000 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					_, _ = batch.CallTool(ctx, &mcp.CallToolParams{Name: "w__sleep", Arguments: map[string]any{"ms": 200}})
				}
			}()
		}
		time.Sleep(2 * time.Second) // the line forms
		beside := p50()
		waiting := s.get(t, key).Status.Servers[0].Waiting
		if beside > 2*alone+2*time.Millisecond {
			t.Errorf("the interactive p50 went from %s alone to %s beside the batch", alone, beside)
		}
		r.figure("interactive p50 %s alone, %s beside the batch (%.2fx); %d of the batch's calls waiting in status", ms(alone), ms(beside),
			float64(beside)/float64(alone), waiting)
	})
}
