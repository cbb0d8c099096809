//go:build faults

package faults

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
)

// crowdServers is how many servers the crowded project has: with its own, 10 endpoints, as
// many as it takes one identity holding --max-sessions-per-principal (100) on each to fill
// --max-sessions-per-project (1000) when each endpoint counted apart.
const crowdServers = 9

// crowdAll: one identity opens as many sessions as it is given on the project endpoint and on
// every per-server one; another identity still gets in.
func (s *suite) crowdAll(t *testing.T) {
	s.fault(t, row{fault: fmt.Sprintf("one identity opening sessions on every endpoint of a project of %d servers", crowdServers),
		sees:       "its sessions past `--max-sessions-per-principal` (100) are refused at initialize, naming the flag, on whichever endpoint; a second identity still gets in, on the project endpoint and on a server's",
		guaranteed: "an identity's sessions count toward one bound on all of a project's endpoints together, a tenth of `--max-sessions-per-project`, so it takes ten identities to fill a project",
	}, func(t *testing.T, r *row) {
		servers := make([]v1alpha1.MCPServer, crowdServers)
		for i := range servers {
			servers[i] = s.stdio(fmt.Sprintf("s%d", i+1))
		}
		key := s.project(t, "crowd", v1alpha1.ProjectMCPSpec{Servers: servers}, true)
		greedy, _ := s.revocableToken(t, "greedy")
		endpoints := []string{s.endpoint(key)}
		for _, srv := range servers {
			endpoints = append(endpoints, s.serverEndpoint(key, srv.Name))
		}
		opened, refused, other := 0, 0, 0
		for _, url := range endpoints {
			for range 101 { // one more than the bound, on each endpoint
				ok, body := s.initialize(t, url, greedy)
				switch {
				case ok:
					opened++
					continue
				case strings.Contains(body, "--max-sessions-per-principal"):
					refused++
				default:
					other++
					t.Errorf("a session past the bound refused otherwise: %s", body)
				}
				break // the bound is reached: this endpoint gives no more
			}
		}
		if opened != 100 {
			t.Errorf("one identity opened %d sessions on the project's %d endpoints, want 100 (--max-sessions-per-principal)", opened, len(endpoints))
		}
		victims := 0
		for _, url := range []string{endpoints[0], endpoints[len(endpoints)-1]} {
			if ok, body := s.initialize(t, url, s.token); !ok {
				t.Errorf("another identity's session on %s was refused: %s", url, body)
			} else {
				victims++
			}
		}
		r.figure("one identity: %d sessions opened over %d endpoints, %d refused naming the bound, %d refused otherwise; another identity: %d of 2 sessions opened",
			opened, len(endpoints), refused, other, victims)
	})
}

// serverEndpoint is the URL of a project's per-server endpoint.
func (s *suite) serverEndpoint(key types.NamespacedName, server string) string {
	return fmt.Sprintf("http://%s/projects/%s/%s/servers/%s/mcp", s.addrs.gateway, key.Namespace, key.Name, server)
}

// initialize opens a 2025-11-25 session of url with token by hand, and ends it when the fault
// does: whether it was opened (initialize has a result), and the response's body.
func (s *suite) initialize(t *testing.T, url, token string) (bool, string) {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"crowd","version":"1"}}}`
	code, sid, answer := s.send(t, http.MethodPost, url, token, "", body)
	if code != http.StatusOK {
		t.Fatalf("initialize: %d %s", code, answer)
	}
	if sid != "" {
		s.undo = append(s.undo, func() { s.send(t, http.MethodDelete, url, token, sid, "") })
	}
	return strings.Contains(answer, `"result"`), answer
}

// send sends one request by hand, and returns its status, session id and body.
func (s *suite) send(t *testing.T, method, url, token, sid, body string) (int, string, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("%s %s: %v", method, url, err)
		return 0, "", ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Mcp-Session-Id"), string(b)
}
