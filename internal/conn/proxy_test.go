package conn

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsh-dev/projectmcp/api/v1alpha1"
	"github.com/dsh-dev/projectmcp/internal/policy"
)

// forwardProxy is an HTTP proxy on loopback (127.0.0.2, an address no server of these tests
// uses): it forwards absolute-form requests and tunnels CONNECT, and records what it is asked.
type forwardProxy struct {
	addr string
	mu   sync.Mutex
	asks []string
}

func startProxy(t *testing.T) *forwardProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &forwardProxy{addr: ln.Addr().String()}
	forward := &httputil.ReverseProxy{
		Rewrite:       func(pr *httputil.ProxyRequest) { pr.Out.URL = pr.In.URL },
		Transport:     &http.Transport{}, // no proxy of its own
		FlushInterval: -1,
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		p.asks = append(p.asks, r.Method+" "+r.Host)
		p.mu.Unlock()
		if r.Method == http.MethodConnect {
			p.tunnel(w, r)
			return
		}
		forward.ServeHTTP(w, r)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return p
}

func (p *forwardProxy) tunnel(w http.ResponseWriter, r *http.Request) {
	upstream, err := net.DialTimeout("tcp", r.Host, 2*time.Second)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	w.WriteHeader(http.StatusOK)
	client, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		upstream.Close()
		return
	}
	go func() { _, _ = io.Copy(upstream, client); upstream.Close() }()
	_, _ = io.Copy(client, upstream)
	client.Close()
}

func (p *forwardProxy) asked() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.asks...)
}

// useProxy puts the proxy in the environment, with credentials that must never be shown.
func useProxy(t *testing.T, p *forwardProxy) {
	for _, name := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
		t.Setenv(name, "http://user:PR0XY-PASS@"+p.addr)
	}
	t.Setenv("NO_PROXY", "")
	t.Setenv("no_proxy", "")
}

// Through a proxy the dialer sees only the proxy's address; the URL's host is checked before
// each request instead, and a refused address refuses the request before the proxy is asked.
// The proxy's own address (127.0.0.2) is admitted by an --allow-url; the servers' are not.
func TestEgressThroughProxy(t *testing.T) {
	proxy := startProxy(t)
	useProxy(t, proxy)
	proxyNoted = sync.Once{}
	// The server only records: the MCP SDK refuses a Host header it does not know as loopback,
	// LOCALHOST among them.
	var reached []string
	var mu sync.Mutex
	recorder := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		reached = append(reached, r.Method+" "+r.Host+" "+r.Header.Get("Authorization"))
		mu.Unlock()
		http.Error(w, "recorded", http.StatusTeapot)
	}))
	defer recorder.Close()
	recorderPort := strings.TrimPrefix(recorder.URL, "http://127.0.0.1:")
	remote := func(u string) v1alpha1.MCPServer {
		return v1alpha1.MCPServer{Name: "r", HTTP: &v1alpha1.HTTPServer{URL: u}}
	}
	sink := &logSink{}

	// An address in the URL. (Go never proxies a URL naming a loopback address or localhost.)
	metadata := start(t, Options{Server: remote("http://169.254.169.254/latest/meta-data"), Log: sink.logger(),
		Settings: Settings{Isolation: policy.Isolation{Egress: &policy.Egress{Allow: patterns(t, "127.0.0.2")}}}})
	s := waitPhase(t, metadata, v1alpha1.PhaseFailed)
	if want := "through the proxy http://" + proxy.addr + ": address 169.254.169.254 is link-local"; !strings.Contains(s.LastError, want) {
		t.Errorf("the metadata address through the proxy: lastError = %q, want it to say %q", s.LastError, want)
	}
	// The same over https: the request is refused before the proxy is asked to CONNECT.
	tunnelled := start(t, Options{Server: remote("https://169.254.169.254/mcp"),
		Settings: Settings{Isolation: policy.Isolation{Egress: &policy.Egress{Allow: patterns(t, "127.0.0.2")}}}})
	s = waitPhase(t, tunnelled, v1alpha1.PhaseFailed)
	if want := "through the proxy http://" + proxy.addr + ": address 169.254.169.254 is link-local"; !strings.Contains(s.LastError, want) {
		t.Errorf("the metadata address over https through the proxy: lastError = %q, want it to say %q", s.LastError, want)
	}
	// A name that resolves, here, to a refused address (/etc/hosts matches names whatever
	// their case; Go's proxy exemption of localhost does not).
	byName := start(t, Options{Server: remote("http://LOCALHOST:" + recorderPort + "/mcp"),
		Settings: Settings{Isolation: policy.Isolation{Egress: &policy.Egress{Allow: patterns(t, "127.0.0.2")}}}})
	s = waitPhase(t, byName, v1alpha1.PhaseFailed)
	if want := "through the proxy http://" + proxy.addr + ": address 127.0.0.1 is a loopback address"; !strings.Contains(s.LastError, want) {
		t.Errorf("a name resolving to loopback through the proxy: lastError = %q, want it to say %q", s.LastError, want)
	}
	if asked := proxy.asked(); len(asked) != 0 {
		t.Errorf("the proxy was asked %q", asked)
	}
	mu.Lock()
	if len(reached) != 0 {
		t.Errorf("the server got %q", reached)
	}
	mu.Unlock()
	for _, text := range []string{s.LastError, sink.all()} {
		if strings.Contains(text, "PR0XY-PASS") || strings.Contains(text, "user:") {
			t.Errorf("the proxy's credentials are shown: %q", text)
		}
	}

	// Admitted, the same name goes through the proxy.
	admitted := start(t, Options{Log: sink.logger(),
		Server: v1alpha1.MCPServer{Name: "r", HTTP: &v1alpha1.HTTPServer{URL: "http://LOCALHOST:" + recorderPort + "/mcp",
			Headers: []v1alpha1.NameValue{{Name: "Authorization", Value: "Bearer through"}}}},
		Settings: Settings{Isolation: policy.Isolation{Egress: &policy.Egress{Allow: patterns(t, "127.0.0.0/8")}}}})
	s = waitPhase(t, admitted, v1alpha1.PhaseFailed)
	if !strings.Contains(s.LastError, "I'm a teapot") {
		t.Errorf("through the proxy: lastError = %q, want the recorder's answer", s.LastError)
	}
	if asked := proxy.asked(); len(asked) == 0 || asked[0] != "POST LOCALHOST:"+recorderPort {
		t.Errorf("the proxy was asked %q, want the server's requests", asked)
	}
	mu.Lock()
	if len(reached) == 0 || reached[0] != "POST LOCALHOST:"+recorderPort+" Bearer through" {
		t.Errorf("the server got %q, want the requests through the proxy, with their headers", reached)
	}
	mu.Unlock()
	logged := sink.all()
	if n := strings.Count(logged, "reached through an HTTP proxy"); n != 1 {
		t.Errorf("the proxy is noted %d times, want once: %s", n, logged)
	}
	if !strings.Contains(logged, `"proxy"="http://`+proxy.addr+`"`) {
		t.Errorf("the proxy's notice does not name it: %s", logged)
	}
}
