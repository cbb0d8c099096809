package testutil

import (
	"net/http"
	"net/http/httputil"
	"net/url"
)

// BareProxy is a plain reverse proxy to target's origin (the standard library's, nothing MCP
// about it): the cost of one more HTTP hop, the floor for any gateway in the benchmarks that
// compare the gateway with it. It passes each event of a stream on at once, and keeps as many
// idle connections to the target as the benchmarks' sessions use; close closes them.
func BareProxy(target *url.URL) (proxy http.Handler, close func()) {
	origin := &url.URL{Scheme: target.Scheme, Host: target.Host}
	p := httputil.NewSingleHostReverseProxy(origin)
	p.FlushInterval = -1
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	p.Transport = tr
	return p, tr.CloseIdleConnections
}
