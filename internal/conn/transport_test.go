package conn

import "testing"

// Connections under one egress route share a transport, whose TCP connections keep small
// buffers (connBufferSize): most of them carry an event stream that waits.
func TestSharedTransport(t *testing.T) {
	a, directsA, releaseA := sharedTransport(nil)
	b, directsB, releaseB := sharedTransport(nil)
	defer releaseB()
	if a != b || directsA != directsB {
		t.Fatal("two connections with no egress policy got transports of their own")
	}
	if a.ReadBufferSize != connBufferSize || a.WriteBufferSize != connBufferSize || a.MaxIdleConnsPerHost != maxIdlePerHost {
		t.Fatalf("buffers %d/%d, idle per host %d", a.ReadBufferSize, a.WriteBufferSize, a.MaxIdleConnsPerHost)
	}
	releaseA()
	releaseA() // a second release gives nothing back twice
	c, directsC, releaseC := sharedTransport(nil)
	defer releaseC()
	if c != b || directsC != directsB {
		t.Fatal("the transport went while a connection still held it")
	}
}
