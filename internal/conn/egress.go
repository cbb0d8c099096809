package conn

import (
	"context"
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Egress is where HTTP and SSE servers may be reached. The controller runs next to things a
// config's author must not reach through it: the cloud's metadata service (link-local), the
// controller's own ports and sidecars (loopback), and whatever the allow and deny patterns
// name. Addresses are checked when connecting, after DNS, so a name that resolves to a
// refused address is refused too.
type Egress struct {
	// Loopback admits loopback addresses (dev: its servers run on the same machine).
	Loopback bool
	// Allow, when not empty, are the only URLs or addresses servers may reach; an allow
	// pattern naming a host literally (no wildcard), or an address range, also admits a
	// loopback or link-local address. Deny patterns are refused whatever Allow says.
	Allow, Deny []URLPattern
}

// URLPattern is one --allow-url or --deny-url value: an IP address or CIDR range, matched
// against every address connected to, or a URL pattern (scheme://host[:port][/path]) matched
// against the server's URL. In a URL pattern '*' and '?' match within the host (a host has no
// '/' or ':'), a port of '*' matches any port and no port the scheme's default, and the path,
// when given, is a glob over the URL's path ('*' matching '/' too).
type URLPattern struct {
	raw                      string
	prefix                   netip.Prefix // valid for an address pattern
	scheme, host, port, path string
}

func (p URLPattern) String() string { return p.raw }

// ParseURLPattern parses an --allow-url or --deny-url value.
func ParseURLPattern(s string) (URLPattern, error) {
	p := URLPattern{raw: s}
	if prefix, err := netip.ParsePrefix(s); err == nil {
		p.prefix = prefix.Masked()
		return p, nil
	}
	if addr, err := netip.ParseAddr(s); err == nil {
		p.prefix = netip.PrefixFrom(addr.Unmap(), addr.Unmap().BitLen())
		return p, nil
	}
	scheme, rest, ok := strings.Cut(s, "://")
	scheme = strings.ToLower(scheme)
	if !ok || (scheme != "http" && scheme != "https") {
		return p, fmt.Errorf("%q is neither an IP address, a CIDR range nor an http(s):// URL pattern", s)
	}
	authority, path, hasPath := strings.Cut(rest, "/")
	if hasPath {
		p.path = "/" + path
	}
	host, port := authority, ""
	if strings.HasPrefix(authority, "[") { // [ipv6]:port
		end := strings.IndexByte(authority, ']')
		if end < 0 {
			return p, fmt.Errorf("%q: unclosed [ in the host", s)
		}
		host, port = authority[1:end], strings.TrimPrefix(authority[end+1:], ":")
	} else if h, pt, found := strings.Cut(authority, ":"); found {
		host, port = h, pt
	}
	if host == "" || strings.ContainsAny(host, "@/?#") {
		return p, fmt.Errorf("%q: the host pattern must be a host name or address, with * or ? as wildcards", s)
	}
	if port != "" && port != "*" {
		if n, err := parsePort(port); err != nil || n == 0 {
			return p, fmt.Errorf("%q: port %q is not a number from 1 to 65535 or *", s, port)
		}
	}
	p.scheme, p.host, p.port = scheme, strings.ToLower(host), port
	return p, nil
}

func parsePort(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || strconv.Itoa(n) != s || n > 65535 {
		return 0, fmt.Errorf("bad port %q", s)
	}
	return n, nil
}

func (p URLPattern) isAddress() bool { return p.prefix.IsValid() }

// literal reports a URL pattern that names one host, no wildcard.
func (p URLPattern) literal() bool { return !p.isAddress() && !strings.ContainsAny(p.host, "*?") }

func (p URLPattern) matchURL(u *url.URL) bool {
	if p.isAddress() || strings.ToLower(u.Scheme) != p.scheme || !Glob(p.host, strings.ToLower(u.Hostname())) {
		return false
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[p.scheme]
	}
	want := p.port
	if want == "" {
		want = map[string]string{"http": "80", "https": "443"}[p.scheme]
	}
	if want != "*" && want != port {
		return false
	}
	path := u.EscapedPath()
	if path == "" {
		path = "/"
	}
	return p.path == "" || Glob(p.path, path)
}

func (p URLPattern) matchAddr(a netip.Addr) bool { return p.isAddress() && p.prefix.Contains(a) }

// route is the egress decision for one server URL, made before connecting; the addresses
// connected to are checked against it.
type route struct {
	egress  *Egress
	allowed bool // an allow URL pattern matched the URL
	literal bool // ... one naming the host literally
}

// check refuses a URL the patterns refuse. template is the URL as configured (before
// expansion), named in errors instead of a value that may hold secrets.
func (e *Egress) check(u *url.URL, template string) (*route, error) {
	r := &route{egress: e}
	for _, p := range e.Deny {
		if p.matchURL(u) {
			return nil, &invalidConfigError{msg: fmt.Sprintf("url %q is refused here: it matches the controller's --deny-url %q", template, p)}
		}
	}
	addressAllows := false
	for _, p := range e.Allow {
		addressAllows = addressAllows || p.isAddress()
		if p.matchURL(u) {
			r.allowed, r.literal = true, r.literal || p.literal()
		}
	}
	if len(e.Allow) > 0 && !r.allowed && !addressAllows {
		return nil, &invalidConfigError{msg: fmt.Sprintf("url %q is not allowed here: it matches no --allow-url pattern of the controller", template)}
	}
	return r, nil
}

// checkAddr refuses connecting to an address (after DNS) that the policy refuses.
func (r *route) checkAddr(a netip.Addr) error {
	a = a.Unmap()
	addrAllowed := false
	for _, p := range r.egress.Deny {
		if p.matchAddr(a) {
			return fmt.Errorf("address %s is refused by the controller's --deny-url %q", a, p)
		}
	}
	for _, p := range r.egress.Allow {
		addrAllowed = addrAllowed || p.matchAddr(a)
	}
	named := addrAllowed || r.literal
	switch {
	case (a.IsLoopback() || a.IsUnspecified()) && !r.egress.Loopback && !named:
		return fmt.Errorf("address %s is a loopback address: refused unless an --allow-url of the controller names it", a)
	case (a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast()) && !named:
		return fmt.Errorf("address %s is link-local (such as a cloud metadata service): refused unless an --allow-url of the controller names it", a)
	case len(r.egress.Allow) > 0 && !r.allowed && !addrAllowed:
		return fmt.Errorf("address %s matches no --allow-url pattern of the controller", a)
	}
	return nil
}

// dialer connects only to addresses the route admits: the check runs on the address actually
// dialed, after DNS, for every attempt (each address of a name is tried in turn).
func (r *route) dialer() *net.Dialer {
	return &net.Dialer{
		Timeout:   30 * time.Second,
		KeepAlive: 30 * time.Second,
		ControlContext: func(_ context.Context, _, address string, _ syscall.RawConn) error {
			host, _, err := net.SplitHostPort(address)
			if err != nil {
				return err
			}
			a, err := netip.ParseAddr(host)
			if err != nil {
				return fmt.Errorf("dialing %q: not an address", address)
			}
			return r.checkAddr(a)
		},
	}
}

// mcpResponses refuses answers that are not MCP, before the SDK reads them: the SDK quotes
// part of a body it cannot parse in its errors (the first line of a non-event-stream answer to
// an SSE connect), and those errors reach status and events, where whoever wrote the config
// could read what an internal service answered. The error says what came back (status,
// content type) and never the body.
type mcpResponses struct{ base http.RoundTripper }

func (t mcpResponses) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil || resp.StatusCode < 200 || resp.StatusCode > 299 {
		// Error statuses pass: the SDK shows only the status text, or the message of a
		// JSON-RPC error in the body.
		return resp, err
	}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	stream := req.Method == http.MethodGet
	switch {
	case ct == "text/event-stream":
		return resp, nil
	case ct == "application/json" && !stream:
		return resp, nil
	case !stream && (resp.StatusCode == http.StatusAccepted || resp.StatusCode == http.StatusNoContent || resp.ContentLength == 0):
		return resp, nil // an answer to a notification: no body to read
	}
	resp.Body.Close()
	want := "application/json or text/event-stream"
	if stream {
		want = "text/event-stream"
	}
	shown := ct
	if shown == "" {
		shown = "none"
	}
	return nil, fmt.Errorf("the server answered a %s with %s, content type %s, not %s: not an MCP endpoint (the body is not shown)",
		req.Method, resp.Status, shown, want)
}
