package httpcarrier

import (
	"net/http"
	"sync"
)

// shared are the net/http Transports of clients that share one (Share), with the pools of
// their carriers' connections, by key. With a transport of its own, each client would keep its
// own idle keep-alive connection to its server between requests (two goroutines, 8 KB of
// buffers and a descriptor each, at every one of thousands of clients of a few hosts); shared,
// the idle connections to a host are pooled (at most MaxIdlePerHost) and an HTTP/2 server is
// reached over one TCP connection. A transport lives while a client uses it: the last one to
// give it back closes its idle connections, so nothing of it outlives the clients that used it.
var shared = struct {
	sync.Mutex
	m map[any]*sharedTransport
}{m: map[any]*sharedTransport{}}

type sharedTransport struct {
	t    *http.Transport
	pool *Pool // the carriers' connections, dialed as the transport's
	refs int
}

// Share returns the net/http Transport every client of key shares, the pool of its carriers'
// connections, and the function that gives them back (once, however often it is called). key
// is comparable, and stands for everything the transport's behaviour depends on: the first
// client of a key makes its transport, a clone of net/http's DefaultTransport keeping up to
// MaxIdlePerHost idle connections to a host with buffers of BufferSize, which setup then
// configures (its dialer, its proxy).
func Share(key any, setup func(*http.Transport)) (*http.Transport, *Pool, func()) {
	shared.Lock()
	defer shared.Unlock()
	st := shared.m[key]
	if st == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = MaxIdlePerHost
		t.ReadBufferSize, t.WriteBufferSize = BufferSize, BufferSize
		setup(t)
		st = &sharedTransport{t: t, pool: NewPool(t.DialContext)}
		shared.m[key] = st
	}
	st.refs++
	var once sync.Once
	return st.t, st.pool, func() {
		once.Do(func() {
			shared.Lock()
			st.refs--
			last := st.refs == 0
			if last {
				delete(shared.m, key)
			}
			shared.Unlock()
			if last {
				st.t.CloseIdleConnections()
				st.pool.Close()
			}
		})
	}
}

// Shared is how many shared transports are in use.
func Shared() int {
	shared.Lock()
	defer shared.Unlock()
	return len(shared.m)
}
