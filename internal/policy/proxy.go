package policy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Domains are a server's own network settings (VS Code's sandbox.network): when Allowed is not
// empty, the only hosts it may reach; Denied, hosts it may not reach whatever Allowed says. A
// "*." prefix matches any subdomain (not the domain itself).
type Domains struct{ Allowed, Denied []string }

// Admits reports whether host passes the domain lists, or says why not.
func (d Domains) Admits(host string) error {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, p := range d.Denied {
		if domainMatch(p, host) {
			return fmt.Errorf("%s is refused by the server's sandbox.network.deniedDomains %q", host, p)
		}
	}
	if len(d.Allowed) == 0 {
		return nil
	}
	for _, p := range d.Allowed {
		if domainMatch(p, host) {
			return nil
		}
	}
	return fmt.Errorf("%s matches none of the server's sandbox.network.allowedDomains", host)
}

// domainMatch matches host against pattern: equal, or "*.d" and a subdomain of d.
func domainMatch(pattern, host string) bool {
	pattern = strings.ToLower(strings.TrimSuffix(pattern, "."))
	if rest, ok := strings.CutPrefix(pattern, "*."); ok {
		return strings.HasSuffix(host, "."+rest)
	}
	return host == pattern
}

// Proxy is the only way out of a sandboxed server's network namespace: an HTTP proxy (CONNECT
// and plain requests) that connects where the controller's egress policy (--allow-url,
// --deny-url: the rules HTTP servers obey) and the server's own domains admit, and nowhere
// else. Metadata addresses are always refused, after DNS, as the policy refuses them.
type Proxy struct {
	egress  *Egress
	domains Domains
	srv     *http.Server
	mu      sync.Mutex
	tunnels map[net.Conn]bool
}

// NewProxy is a proxy under egress (nil: the default policy) and domains.
func NewProxy(egress *Egress, domains Domains) *Proxy {
	if egress == nil {
		egress = &Egress{}
	}
	p := &Proxy{egress: egress, domains: domains, tunnels: map[net.Conn]bool{}}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second}
	return p
}

// Serve serves the proxy on ln until Close.
func (p *Proxy) Serve(ln net.Listener) { _ = p.srv.Serve(ln) }

// Close stops the proxy and ends every tunnel it holds.
func (p *Proxy) Close() {
	_ = p.srv.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.tunnels {
		_ = c.Close()
	}
}

// route is the egress decision for reaching scheme://host:port, or why it is refused.
func (p *Proxy) route(scheme, hostport string) (*Route, error) {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return nil, fmt.Errorf("%q: not host:port", hostport)
	}
	if err := p.domains.Admits(host); err != nil {
		return nil, err
	}
	return p.egress.Check(&url.URL{Scheme: scheme, Host: hostport}, scheme+"://"+hostport)
}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		p.connect(w, r)
		return
	}
	p.forward(w, r)
}

// connect opens a tunnel to the CONNECT request's host:port, checked as https.
func (p *Proxy) connect(w http.ResponseWriter, r *http.Request) {
	route, err := p.route("https", r.Host)
	if err != nil {
		http.Error(w, err.Error(), http.StatusForbidden)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	up, err := route.Dialer().DialContext(ctx, "tcp", r.Host)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		_ = up.Close()
		http.Error(w, "no tunnel over this connection", http.StatusInternalServerError)
		return
	}
	down, buf, err := hj.Hijack()
	if err != nil {
		_ = up.Close()
		return
	}
	p.track(up, down)
	defer p.untrack(up, down)
	if _, err := down.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		return
	}
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(up, buf.Reader) // what the client sent after its CONNECT, then the rest
		_ = up.(*net.TCPConn).CloseWrite()
		close(done)
	}()
	_, _ = io.Copy(down, up)
	_ = down.Close()
	<-done
}

// forward sends a plain HTTP request on, checked as http.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request) {
	if r.URL.Scheme != "http" || r.URL.Host == "" {
		http.Error(w, "a proxy request names an absolute http:// URL (https goes through CONNECT)", http.StatusBadRequest)
		return
	}
	hostport := r.URL.Host
	if r.URL.Port() == "" {
		hostport = net.JoinHostPort(r.URL.Hostname(), "80")
	}
	route, err := p.route("http", hostport)
	if err != nil {
		http.Error(w, err.Error(), http.StatusForbidden)
		return
	}
	t := &http.Transport{DialContext: route.Dialer().DialContext, DisableKeepAlives: true}
	defer t.CloseIdleConnections()
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.Header.Del("Proxy-Connection")
	out.Header.Del("Proxy-Authorization")
	resp, err := t.RoundTrip(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

func (p *Proxy) track(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		p.tunnels[c] = true
	}
}

func (p *Proxy) untrack(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
		delete(p.tunnels, c)
	}
}
