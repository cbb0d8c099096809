// Package httpserve is HTTP/1 serving below MCP: it knows nothing of projectmcp, only of
// responses and connections. It holds what the gateway's long-lived streams need and net/http
// does not give cheaply:
//
//   - Take: a stream's connection taken from net/http once its header is out, written in
//     chunked framing by hand, and given back to the server (HomeListener) when it ends whole;
//   - Readiness: one epoll instance, parked in Go's netpoller, that starts a taken
//     connection's reader only when the client sends something or goes (Linux; elsewhere each
//     taken connection has a reader from the start);
//   - DeadlineWriter: a write deadline armed only for writes that can reach the connection
//     (StreamWriteTimeout), so a client that stops reading blocks no one for long;
//   - EventStream: the server-sent events framing;
//   - CertFiles: a TLS certificate reloaded when its files change.
//
// It is systems code, and it is benchmark-gated: it exists because it saves goroutines,
// buffers and syscalls per idle stream and per call. A change here is measured with `make
// bench` (BenchmarkGatewayCallOverhead and BenchmarkGatewayThroughput in internal/gateway,
// BenchmarkCallPathProcesses in cmd/projectmcp) and `make bench-scale` (goroutines and memory
// per idle session), before and after, in interleaved rounds.
package httpserve
