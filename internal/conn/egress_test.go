package conn

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/policy"
	"github.com/dsh-dev/projectmcp/test/fixture"
)

// patterns parses --allow-url or --deny-url values.
func patterns(t *testing.T, raw ...string) []policy.URLPattern {
	t.Helper()
	var out []policy.URLPattern
	for _, r := range raw {
		p, err := policy.ParseURLPattern(r)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

// Against real servers on loopback: the address is checked when dialing, after DNS (a name
// that resolves to loopback is refused although the URL names no address), and an allow
// pattern naming the host admits it.
func TestEgressAtDialTime(t *testing.T) {
	base := fixture.StartHTTP(t)
	port := strings.TrimPrefix(base, "http://127.0.0.1:")
	remote := func(u string) v1alpha1.MCPServer {
		return v1alpha1.MCPServer{Name: "r", HTTP: &v1alpha1.HTTPServer{URL: u}}
	}

	refused := start(t, Options{Server: remote(base + "/mcp"), Settings: Settings{Isolation: policy.Isolation{Egress: &policy.Egress{}}}})
	s := waitPhase(t, refused, v1alpha1.PhaseFailed)
	if !strings.Contains(s.LastError, "127.0.0.1 is a loopback address") {
		t.Errorf("lastError = %q, want the loopback refusal", s.LastError)
	}
	byName := start(t, Options{Server: remote("http://localhost:" + port + "/mcp"), Settings: Settings{Isolation: policy.Isolation{Egress: &policy.Egress{Allow: patterns(t, "http://*:*")}}}})
	if s := waitPhase(t, byName, v1alpha1.PhaseFailed); !strings.Contains(s.LastError, "loopback") {
		t.Errorf("a name resolving to loopback: lastError = %q, want the loopback refusal", s.LastError)
	}
	metadata := start(t, Options{Server: remote("http://169.254.169.254/mcp"), Settings: Settings{Isolation: policy.Isolation{Egress: &policy.Egress{}}}})
	if s := waitPhase(t, metadata, v1alpha1.PhaseFailed); !strings.Contains(s.LastError, "link-local") {
		t.Errorf("the metadata address: lastError = %q, want the link-local refusal", s.LastError)
	}
	denied := start(t, Options{Server: remote(base + "/mcp"), Settings: Settings{Isolation: policy.Isolation{Egress: &policy.Egress{Deny: patterns(t, "http://127.0.0.1:*")}}}})
	if s := waitPhase(t, denied, v1alpha1.PhaseFailed); !s.Permanent || !strings.Contains(s.LastError, "--deny-url") {
		t.Errorf("a denied URL: %+v, want a permanent failure naming --deny-url", s)
	}

	for name, eg := range map[string]*policy.Egress{
		"a literal allow": {Allow: patterns(t, "http://127.0.0.1:"+port)},
		"dev":             {Loopback: true},
	} {
		c := start(t, Options{Server: remote(base + "/mcp"), Settings: Settings{Isolation: policy.Isolation{Egress: eg}}})
		if s := waitPhase(t, c, v1alpha1.PhaseReady); s.RawToolCount == 0 {
			t.Errorf("%s: no tools", name)
		}
	}
}

// An upstream that answers with something other than MCP fails with what it answered (status,
// content type), never with its body: whoever wrote the config reads lastError and events.
func TestUpstreamBodyNotEchoed(t *testing.T) {
	const secret = "INTERNAL-SERVICE-SECRET"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/html":
			w.Header().Set("Content-Type", "text/html")
			_, _ = w.Write([]byte("<html>" + secret + "</html>\n\n"))
		case "/plain":
			w.Header().Set("Content-Type", "text/plain")
			_, _ = w.Write([]byte(secret + "\n"))
		case "/none":
			w.Header()["Content-Type"] = nil
			_, _ = w.Write([]byte(secret + "\n"))
		default:
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(secret))
		}
	}))
	defer srv.Close()
	for _, tc := range []struct {
		path      string
		transport v1alpha1.HTTPTransport
		want      []string
	}{
		{"/html", v1alpha1.TransportSSE, []string{"200 OK", "text/html"}},
		{"/none", v1alpha1.TransportSSE, []string{"200 OK", "content type none"}},
		{"/plain", v1alpha1.TransportStreamableHTTP, []string{"200 OK", "text/plain"}},
		{"/html", v1alpha1.TransportStreamableHTTP, []string{"200 OK", "text/html"}},
		{"/error", v1alpha1.TransportStreamableHTTP, []string{"Internal Server Error"}},
		{"/error", v1alpha1.TransportSSE, []string{"Internal Server Error"}},
	} {
		c := start(t, Options{Server: v1alpha1.MCPServer{Name: "r", HTTP: &v1alpha1.HTTPServer{URL: srv.URL + tc.path, Transport: tc.transport}}})
		s := waitFor(t, c, "a failure", func(s Snapshot) bool { return s.LastError != "" })
		if strings.Contains(s.LastError, secret) {
			t.Errorf("%s %s: lastError shows the body: %q", tc.transport, tc.path, s.LastError)
		}
		for _, w := range tc.want {
			if !strings.Contains(s.LastError, w) {
				t.Errorf("%s %s: lastError = %q, want it to say %q", tc.transport, tc.path, s.LastError, w)
			}
		}
		c.Destroy()
	}
}

// A URL naming a NAT64 address fails when dialing, with the IPv4 address it carries named.
func TestEgressCarriedAddressAtDialTime(t *testing.T) {
	c := start(t, Options{Server: v1alpha1.MCPServer{Name: "r", HTTP: &v1alpha1.HTTPServer{URL: "http://[64:ff9b::a9fe:a9fe]/mcp"}},
		Settings: Settings{Isolation: policy.Isolation{Egress: &policy.Egress{}}}})
	s := waitPhase(t, c, v1alpha1.PhaseFailed)
	if !strings.Contains(s.LastError, "carries the IPv4 address 169.254.169.254") {
		t.Errorf("lastError = %q, want the refusal of the carried metadata address", s.LastError)
	}
	metadata := start(t, Options{Server: v1alpha1.MCPServer{Name: "r", HTTP: &v1alpha1.HTTPServer{URL: "http://100.100.100.200/mcp"}},
		Settings: Settings{Isolation: policy.Isolation{Egress: &policy.Egress{}}}})
	if s := waitPhase(t, metadata, v1alpha1.PhaseFailed); !strings.Contains(s.LastError, "100.100.100.200 is a cloud metadata service") {
		t.Errorf("lastError = %q, want the metadata refusal", s.LastError)
	}
}
