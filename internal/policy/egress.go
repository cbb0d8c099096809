package policy

import (
	"context"
	"errors"
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
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

// Route is the egress decision for one server URL, made before connecting; the addresses
// connected to are checked against it. It is comparable: what a dialer checking addresses
// under it does depends on nothing else.
type Route struct {
	egress  *Egress
	allowed bool // an allow URL pattern matched the URL
	literal bool // ... one naming the host literally
}

// Check refuses a URL the patterns refuse. name is what errors call the URL: the URL as
// configured (before expansion), never a value that may hold secrets.
func (e *Egress) Check(u *url.URL, name string) (*Route, error) {
	r := &Route{egress: e}
	for _, p := range e.Deny {
		if p.matchURL(u) {
			return nil, fmt.Errorf("%s is refused here: it matches the controller's --deny-url %q", name, p)
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
		return nil, fmt.Errorf("%s is not allowed here: it matches no --allow-url pattern of the controller", name)
	}
	return r, nil
}

// checkAddr refuses connecting to an address (after DNS) that the policy refuses. An IPv6
// address that carries an IPv4 address (NAT64, 6to4) reaches that IPv4 address through a
// gateway, so the IPv4 address is checked too, as if it were dialed.
func (r *Route) checkAddr(a netip.Addr) error {
	a = a.Unmap()
	if err := r.refusal(a, true); err != nil {
		return err
	}
	for _, c := range carried(a) {
		if err := r.refusal(c.addr, false); err != nil {
			return fmt.Errorf("address %s carries the IPv4 address %s (%s): %w", a, c.addr, c.scheme, err)
		}
	}
	return nil
}

// refusal is the policy's decision on one address. dialed is false for an IPv4 address carried
// in the dialed one: the allow list decides on the address dialed, the refusals apply to both.
func (r *Route) refusal(a netip.Addr, dialed bool) error {
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
	case metadataAddress(a) && !named:
		return fmt.Errorf("address %s is a cloud metadata service: refused unless an --allow-url of the controller names it", a)
	case dialed && len(r.egress.Allow) > 0 && !r.allowed && !addrAllowed:
		return fmt.Errorf("address %s matches no --allow-url pattern of the controller", a)
	}
	return nil
}

// metadataAddresses are cloud metadata services outside the link-local ranges: AWS's IPv6
// instance metadata (a unique local address) and Alibaba Cloud's (in shared address space).
var metadataAddresses = []netip.Addr{
	netip.MustParseAddr("fd00:ec2::254"),
	netip.MustParseAddr("100.100.100.200"),
}

func metadataAddress(a netip.Addr) bool { return slices.Contains(metadataAddresses, a) }

// carriedAddr is an IPv4 address an IPv6 address carries, and the scheme that carries it.
type carriedAddr struct {
	addr   netip.Addr
	scheme string
}

var (
	nat64WellKnown = netip.MustParsePrefix("64:ff9b::/96")   // RFC 6052
	nat64Local     = netip.MustParsePrefix("64:ff9b:1::/48") // RFC 8215, any prefix length within it
	sixToFour      = netip.MustParsePrefix("2002::/16")      // RFC 3056
)

// carried returns the IPv4 addresses a NAT64 or 6to4 address may carry.
func carried(a netip.Addr) []carriedAddr {
	if !a.Is6() {
		return nil
	}
	b := a.As16()
	switch {
	case nat64WellKnown.Contains(a):
		return []carriedAddr{{netip.AddrFrom4([4]byte(b[12:16])), "NAT64 " + nat64WellKnown.String()}}
	case nat64Local.Contains(a):
		return localNAT64(b)
	case sixToFour.Contains(a):
		return []carriedAddr{{netip.AddrFrom4([4]byte(b[2:6])), "6to4 " + sixToFour.String()}}
	}
	return nil
}

// nat64Layouts are where RFC 6052 (section 2.2) puts the IPv4 address for each prefix length
// within the local-use prefix: the octets it occupies (octet 8 is always zero and skipped)
// and the first octet of the suffix that follows it, which is zero.
var nat64Layouts = []struct {
	octets [4]int
	suffix int
}{
	{[4]int{6, 7, 9, 10}, 11},    // /48
	{[4]int{7, 9, 10, 11}, 12},   // /56
	{[4]int{9, 10, 11, 12}, 13},  // /64
	{[4]int{12, 13, 14, 15}, 16}, // /96
}

// localNAT64 returns the IPv4 addresses an address of the local-use NAT64 prefix may carry:
// its operator picks the prefix length, which the address does not tell, so every layout
// whose suffix is zero is a candidate, and an address is refused if any candidate is. A
// candidate of 0.0.0.0 is what a layout reads from the zeros around a shorter or longer one,
// so it counts only when no other layout fits.
func localNAT64(b [16]byte) []carriedAddr {
	scheme := "NAT64 " + nat64Local.String()
	var out []carriedAddr
	zero := false
	for _, l := range nat64Layouts {
		if slices.ContainsFunc(b[l.suffix:], func(x byte) bool { return x != 0 }) {
			continue
		}
		v4 := netip.AddrFrom4([4]byte{b[l.octets[0]], b[l.octets[1]], b[l.octets[2]], b[l.octets[3]]})
		if v4.IsUnspecified() {
			zero = true
		} else if !slices.ContainsFunc(out, func(c carriedAddr) bool { return c.addr == v4 }) {
			out = append(out, carriedAddr{v4, scheme})
		}
	}
	if len(out) == 0 && zero {
		out = append(out, carriedAddr{netip.IPv4Unspecified(), scheme})
	}
	return out
}

// Dialer connects only to addresses the route admits: the check runs on the address actually
// dialed, after DNS, for every attempt (each address of a name is tried in turn).
func (r *Route) Dialer() *net.Dialer {
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

// SameOrigin sends a request only to the origin (scheme, host and port) of the server's URL,
// and only where the egress policy admits its URL: the configured headers (often credentials)
// go with every request, and a legacy SSE server's endpoint event names the URL every message
// is POSTed to, which may be any URL. Redirects come here too. A refused request is never
// sent: no connection is opened for it.
type SameOrigin struct {
	Base    http.RoundTripper
	Origin  string  // OriginOf the server's URL
	Egress  *Egress // nil: no policy
	Refused *atomic.Pointer[RefusedRequest]
}

func (t SameOrigin) RoundTrip(req *http.Request) (*http.Response, error) {
	if msg := t.refusal(req); msg != "" {
		if req.Body != nil {
			req.Body.Close() // a RoundTripper closes the body, even on error
		}
		r := &RefusedRequest{msg}
		if t.Refused != nil {
			t.Refused.CompareAndSwap(nil, r)
		}
		return nil, r
	}
	return t.Base.RoundTrip(req)
}

// RefusedRequest is a request SameOrigin did not send. It is the server's doing (its endpoint
// event, its redirect), not the configuration's: not permanent.
type RefusedRequest struct{ msg string }

func (e *RefusedRequest) Error() string { return e.msg }

// refusal is why req may not be sent, or "". It names the origin asked for, never the path or
// query: an SSE endpoint's URL carries the server's session id.
func (t SameOrigin) refusal(req *http.Request) string {
	what := "the SSE endpoint event"
	if req.Response != nil {
		what = "a redirect"
	}
	if o := OriginOf(req.URL); o != t.Origin {
		return fmt.Sprintf("%s names another origin: %s, not the origin of the server's url; refused, nothing was sent there", what, o)
	}
	if t.Egress == nil {
		return ""
	}
	if _, err := t.Egress.Check(req.URL, "the url that "+what+" names"); err != nil {
		return err.Error()
	}
	return ""
}

// OriginOf is a URL's scheme, host and port, in lower case, the port always given.
func OriginOf(u *url.URL) string {
	scheme := strings.ToLower(u.Scheme)
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[scheme]
	}
	return scheme + "://" + net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}

// Proxied is the Proxy function of a transport whose dialer checks addresses under r (nil: no
// policy), fromEnv the proxy settings of the controller's environment. Through a proxy the dialer sees only the proxy's address, so before each request
// that goes through one, the URL's host is resolved here and every address it resolves to is
// checked as if dialed; one refused address refuses the request. The proxy resolves the name
// again, so a name whose answers change between the two lookups (DNS rebinding) can still
// reach a refused address: a URL naming an address is checked exactly.
func (r *Route) Proxied(fromEnv func(*url.URL) (*url.URL, error)) func(*http.Request) (*url.URL, error) {
	return func(req *http.Request) (*url.URL, error) {
		p, err := fromEnv(req.URL)
		if err != nil {
			// The value may carry the proxy's credentials: it is not shown.
			return nil, errors.New("the HTTP proxy of the controller's environment (HTTP_PROXY, HTTPS_PROXY) is not a valid URL")
		}
		if p == nil || r == nil {
			return p, nil
		}
		if err := r.checkHost(req.Context(), req.URL.Hostname()); err != nil {
			return nil, fmt.Errorf("through the proxy %s: %w", ProxyName(p), err)
		}
		return p, nil
	}
}

// checkHost checks every address host (a name or an address) resolves to.
func (r *Route) checkHost(ctx context.Context, host string) error {
	if a, err := netip.ParseAddr(host); err == nil {
		return r.checkAddr(a)
	}
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return fmt.Errorf("resolving the host to check its addresses: %w", err)
	}
	for _, a := range addrs {
		if err := r.checkAddr(a); err != nil {
			return err
		}
	}
	return nil
}

// ProxyName is a proxy's URL without its credentials, path or query: scheme://host[:port].
func ProxyName(p *url.URL) string { return p.Scheme + "://" + p.Host }

// MCPResponses refuses answers that are not MCP, before the SDK reads them: the SDK quotes
// part of a body it cannot parse in its errors (the first line of a non-event-stream answer to
// an SSE connect), and those errors reach status and events, where whoever wrote the config
// could read what an internal service answered. The error says what came back (status,
// content type) and never the body.
type MCPResponses struct{ Base http.RoundTripper }

func (t MCPResponses) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.Base.RoundTrip(req)
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
