package conn

import (
	"testing"

	"github.com/dsh-dev/projectmcp/internal/httpcarrier"
)

// Connections under one egress route share a transport, whose TCP connections keep small
// buffers (httpcarrier.BufferSize): most of them carry an event stream that waits.
func TestSharedTransport(t *testing.T) {
	a, poolA, releaseA := sharedTransport(nil)
	b, poolB, releaseB := sharedTransport(nil)
	defer releaseB()
	if a != b || poolA != poolB {
		t.Fatal("two connections with no egress policy got transports of their own")
	}
	if a.ReadBufferSize != httpcarrier.BufferSize || a.WriteBufferSize != httpcarrier.BufferSize || a.MaxIdleConnsPerHost != httpcarrier.MaxIdlePerHost {
		t.Fatalf("buffers %d/%d, idle per host %d", a.ReadBufferSize, a.WriteBufferSize, a.MaxIdleConnsPerHost)
	}
	releaseA()
	releaseA() // a second release gives nothing back twice
	c, poolC, releaseC := sharedTransport(nil)
	defer releaseC()
	if c != b || poolC != poolB {
		t.Fatal("the transport went while a connection still held it")
	}
}
