package gateway

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/dsh-dev/projectmcp/internal/registry"
)

// What an agent may write into status is bounded: a stateless session header that is too
// long or has odd characters is refused with 400 before anything else; a long client name is
// cut.
func TestSessionNamesBounded(t *testing.T) {
	reg := registry.New(clocktesting.NewFakeClock(time.Now()), logr.Discard())
	defer reg.Shutdown()
	g := New(Options{Registry: reg})
	post := func(header string) int {
		r := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/projects/ns/p/mcp", strings.NewReader("{}"))
		r.RemoteAddr = "127.0.0.1:1234"
		r.Header.Set(SessionHeader, header)
		w := httptest.NewRecorder()
		g.ServeHTTP(w, r)
		return w.Code
	}
	for name, h := range map[string]string{"too long": strings.Repeat("a", maxSessionName+1), "a space": "a b", "a newline": "a\nb", "non-ASCII": "é"} {
		if code := post(h); code != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", name, code)
		}
	}
	if code := post("agent-1:x@y.z"); code != http.StatusNotFound { // valid; the project does not exist
		t.Errorf("a valid header: %d, want 404", code)
	}
	long := strings.Repeat("é", maxSessionName)
	req := &mcp.InitializeRequest{Params: &mcp.InitializeParams{ClientInfo: &mcp.Implementation{Name: long, Version: "1"}}}
	if got := clientName(req); len(got) > maxSessionName || !strings.HasPrefix(long, got) {
		t.Errorf("client name %d bytes: %q", len(got), got)
	}
}
