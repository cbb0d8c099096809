package httpcarrier

import (
	"net/http"
	"testing"
)

// Clients of one key share a transport and its pool, made once, whose TCP connections keep
// small buffers (BufferSize): most of them carry an event stream that waits. Another key gets
// a transport of its own, and the last client of a key to give it back takes it away.
func TestShare(t *testing.T) {
	setups := 0
	setup := func(*http.Transport) { setups++ }
	a, poolA, releaseA := Share("k", setup)
	b, poolB, releaseB := Share("k", setup)
	if a != b || poolA != poolB || setups != 1 {
		t.Fatalf("two clients of one key got transports of their own (%d made)", setups)
	}
	if a.ReadBufferSize != BufferSize || a.WriteBufferSize != BufferSize || a.MaxIdleConnsPerHost != MaxIdlePerHost {
		t.Fatalf("buffers %d/%d, idle per host %d", a.ReadBufferSize, a.WriteBufferSize, a.MaxIdleConnsPerHost)
	}
	other, _, releaseOther := Share("other", setup)
	if other == a || Shared() != 2 {
		t.Fatalf("another key shares the transport (%d shared)", Shared())
	}
	releaseOther()
	releaseA()
	releaseA() // a second release gives nothing back twice
	c, poolC, releaseC := Share("k", setup)
	if c != b || poolC != poolB {
		t.Fatal("the transport went while a client still held it")
	}
	releaseB()
	releaseC()
	if n := Shared(); n != 0 {
		t.Fatalf("%d transports left once every client gave them back", n)
	}
	if d, _, releaseD := Share("k", setup); d == a {
		t.Fatal("a transport given back by its last client was shared again")
	} else {
		releaseD()
	}
}
