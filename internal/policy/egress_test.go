package policy

import (
	"net/netip"
	"net/url"
	"strings"
	"testing"
)

// patterns parses --allow-url or --deny-url values.
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
		r, err := tc.egress.Check(u, tc.url)
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
