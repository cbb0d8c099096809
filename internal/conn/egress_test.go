package conn

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/test/fixture"
)

func patterns(t *testing.T, raw ...string) []URLPattern {
	t.Helper()
	var out []URLPattern
	for _, r := range raw {
		p, err := ParseURLPattern(r)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

func TestParseURLPattern(t *testing.T) {
	for _, good := range []string{"10.0.0.0/8", "10.96.0.1", "fd00::/8", "::1", "https://*.example.com", "http://127.0.0.1:*",
		"https://mcp.example.com:8443/mcp*", "http://[::1]:8080", "HTTPS://Docs.Example.com/"} {
		if _, err := ParseURLPattern(good); err != nil {
			t.Errorf("ParseURLPattern(%q): %v", good, err)
		}
	}
	for _, bad := range []string{"", "example.com", "ftp://x", "https://", "https://:80", "http://a:0", "http://a:99999", "http://a:x",
		"http://user@host", "http://[::1", "10.0.0.0/33"} {
		if _, err := ParseURLPattern(bad); err == nil {
			t.Errorf("ParseURLPattern(%q) accepted", bad)
		}
	}
}

// The decisions, URL first and then each address dialed.
func TestEgressPolicy(t *testing.T) {
	addr := netip.MustParseAddr
	cases := []struct {
		name    string
		egress  Egress
		url     string
		address string
		refused string // "" when admitted; else a word of the error
	}{
		{"public address", Egress{}, "https://mcp.example.com/mcp", "93.184.216.34", ""},
		{"loopback", Egress{}, "http://localhost:8080/mcp", "127.0.0.1", "loopback"},
		{"loopback v6", Egress{}, "http://[::1]:8080/mcp", "::1", "loopback"},
		{"mapped loopback", Egress{}, "http://x:8080/mcp", "::ffff:127.0.0.1", "loopback"},
		{"unspecified", Egress{}, "http://0.0.0.0:8080/mcp", "0.0.0.0", "loopback"},
		{"metadata", Egress{}, "http://169.254.169.254/latest", "169.254.169.254", "link-local"},
		{"link-local v6", Egress{}, "http://[fe80::1]/", "fe80::1", "link-local"},
		{"dev admits loopback", Egress{Loopback: true}, "http://127.0.0.1:9/mcp", "127.0.0.1", ""},
		{"dev still refuses link-local", Egress{Loopback: true}, "http://169.254.169.254/", "169.254.169.254", "link-local"},
		{"a literal allow admits loopback", Egress{Allow: patterns(t, "http://127.0.0.1:*")}, "http://127.0.0.1:9/mcp", "127.0.0.1", ""},
		{"a wildcard allow does not", Egress{Allow: patterns(t, "http://*:*")}, "http://rebind.example:9/mcp", "127.0.0.1", "loopback"},
		{"an address allow does", Egress{Allow: patterns(t, "127.0.0.0/8")}, "http://localhost:9/mcp", "127.0.0.1", ""},
		{"allow by URL", Egress{Allow: patterns(t, "https://*.example.com")}, "https://mcp.example.com/mcp", "93.184.216.34", ""},
		{"allow: other host", Egress{Allow: patterns(t, "https://*.example.com")}, "https://evil.test/mcp", "", "no --allow-url"},
		{"allow: suffix trick", Egress{Allow: patterns(t, "https://*.example.com")}, "https://evil.test/.example.com", "", "no --allow-url"},
		{"allow: other port", Egress{Allow: patterns(t, "https://*.example.com")}, "https://a.example.com:8443/", "", "no --allow-url"},
		{"allow: path", Egress{Allow: patterns(t, "https://a.example.com/mcp*")}, "https://a.example.com/other", "", "no --allow-url"},
		{"allow by address only", Egress{Allow: patterns(t, "10.0.0.0/8")}, "http://svc.ns:80/mcp", "192.168.1.1", "no --allow-url"},
		{"allow by address, in range", Egress{Allow: patterns(t, "10.0.0.0/8")}, "http://svc.ns:80/mcp", "10.1.2.3", ""},
		{"deny URL", Egress{Deny: patterns(t, "https://*.internal")}, "https://kube.internal/", "", "--deny-url"},
		{"deny address", Egress{Deny: patterns(t, "10.96.0.1")}, "https://kubernetes.default.svc/", "10.96.0.1", "--deny-url"},
		{"deny wins over allow", Egress{Allow: patterns(t, "10.0.0.0/8"), Deny: patterns(t, "10.96.0.0/12")}, "https://k/", "10.96.0.1", "--deny-url"},
	}
	for _, tc := range cases {
		u, err := url.Parse(tc.url)
		if err != nil {
			t.Fatal(err)
		}
		r, err := tc.egress.check(u, tc.url)
		if err == nil && tc.address != "" {
			err = r.checkAddr(addr(tc.address))
		}
		switch {
		case tc.refused == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused)):
			t.Errorf("%s: error %v, want one saying %q", tc.name, err, tc.refused)
		}
	}
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

	refused := start(t, Options{Server: remote(base + "/mcp"), Settings: Settings{Isolation: Isolation{Egress: &Egress{}}}})
	s := waitPhase(t, refused, v1alpha1.PhaseFailed)
	if !strings.Contains(s.LastError, "127.0.0.1 is a loopback address") {
		t.Errorf("lastError = %q, want the loopback refusal", s.LastError)
	}
	byName := start(t, Options{Server: remote("http://localhost:" + port + "/mcp"), Settings: Settings{Isolation: Isolation{Egress: &Egress{Allow: patterns(t, "http://*:*")}}}})
	if s := waitPhase(t, byName, v1alpha1.PhaseFailed); !strings.Contains(s.LastError, "loopback") {
		t.Errorf("a name resolving to loopback: lastError = %q, want the loopback refusal", s.LastError)
	}
	metadata := start(t, Options{Server: remote("http://169.254.169.254/mcp"), Settings: Settings{Isolation: Isolation{Egress: &Egress{}}}})
	if s := waitPhase(t, metadata, v1alpha1.PhaseFailed); !strings.Contains(s.LastError, "link-local") {
		t.Errorf("the metadata address: lastError = %q, want the link-local refusal", s.LastError)
	}
	denied := start(t, Options{Server: remote(base + "/mcp"), Settings: Settings{Isolation: Isolation{Egress: &Egress{Deny: patterns(t, "http://127.0.0.1:*")}}}})
	if s := waitPhase(t, denied, v1alpha1.PhaseFailed); !s.Permanent || !strings.Contains(s.LastError, "--deny-url") {
		t.Errorf("a denied URL: %+v, want a permanent failure naming --deny-url", s)
	}

	for name, eg := range map[string]*Egress{
		"a literal allow": {Allow: patterns(t, "http://127.0.0.1:"+port)},
		"dev":             {Loopback: true},
	} {
		c := start(t, Options{Server: remote(base + "/mcp"), Settings: Settings{Isolation: Isolation{Egress: eg}}})
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
