package peer

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"testing"
)

// The kernel's socket tables name a socket's ends in hex words of its own byte order; the
// uid is the eighth field.
func TestSocketUID(t *testing.T) {
	table := []byte(`  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:2124 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 1 1 0000000000000000 100 0 0 10 0
   1: 0100007F:C350 0100007F:2124 01 00000000:00000000 00:00000000 00000000  1001        0 2 1 0000000000000000 20 4 30 10 -1
   2: 0100007F:2124 0100007F:C350 01 00000000:00000000 00:00000000 00000000  1000        0 3 1 0000000000000000 20 4 30 10 -1
`)
	table6 := []byte(`  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:C351 00000000000000000000000001000000:2124 01 00000000:00000000 00:00000000 00000000  1002        0 4 1
`)
	closing := []byte(`  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:C352 0100007F:2124 06 00000000:00000000 03:00000000 00000000     0        0 0 3 0000000000000000
   1: 0100007F:C353 0100007F:2124 01 00000000:00000000 00:00000000 00000000  1001        0 0 1 0000000000000000 20 4 30 10 -1
`)
	server := netip.MustParseAddrPort("127.0.0.1:8484")
	for _, c := range []struct {
		table         []byte
		local, remote string
		uid           int
		ok            bool
	}{
		{table, "127.0.0.1:50000", "127.0.0.1:8484", 1001, true},
		{table, "127.0.0.1:8484", "127.0.0.1:50000", 1000, true},
		{table, "127.0.0.1:50001", "127.0.0.1:8484", 0, false},
		{closing, "127.0.0.1:50002", "127.0.0.1:8484", 0, false}, // TIME_WAIT: uid 0, no process
		{closing, "127.0.0.1:50003", "127.0.0.1:8484", 0, false}, // established, no inode
		{table6, "[::1]:50001", "[::1]:8484", 1002, true},
		{[]byte("header only\n"), "127.0.0.1:50000", server.String(), 0, false},
	} {
		uid, ok := socketUID(c.table, netip.MustParseAddrPort(c.local), netip.MustParseAddrPort(c.remote))
		if uid != c.uid || ok != c.ok {
			t.Errorf("socketUID(%s → %s) = %d, %v; want %d, %v", c.local, c.remote, uid, ok, c.uid, c.ok)
		}
	}
}

// On this machine a loopback connection's other end is found in the kernel's tables: the test
// process's own uid.
func TestPeerContextFindsOurUID(t *testing.T) {
	if _, err := os.Stat("/proc/net/tcp"); err != nil {
		t.Skip("no /proc/net/tcp on this OS") // the principal is then the one local user
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	uid, ok := UID(Context(context.Background(), server))
	if !ok || uid != os.Getuid() {
		t.Fatalf("uid %d (known %v), want %d", uid, ok, os.Getuid())
	}
	if _, ok := UID(WithUID(Context(context.Background(), server), 0, false)); ok {
		t.Fatal("WithUID(…, false) left the uid known")
	}
}

// A request says its sender's uid: what its connection's context says (a replica's word
// included), else, served without Context, as the kernel names its connection's other end; a
// request that came by no connection has none. CanName says whether this machine names them.
func TestOfRequest(t *testing.T) {
	if _, err := os.Stat("/proc/net/tcp"); err != nil {
		if CanName() {
			t.Fatal("CanName with no socket tables")
		}
		t.Skip("no /proc/net/tcp on this OS")
	}
	if !CanName() {
		t.Fatal("CanName: false on a machine with socket tables")
	}
	got := make(chan [2]int, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		uid, ok := OfRequest(r)
		known := 0
		if ok {
			known = 1
		}
		got <- [2]int{uid, known}
	}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if g := <-got; g != [2]int{os.Getuid(), 1} {
		t.Fatalf("served without Context: uid %d (known %d), want %d", g[0], g[1], os.Getuid())
	}
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "127.0.0.1:1234"
	if _, ok := OfRequest(r); ok {
		t.Fatal("a request that came by no connection has a uid")
	}
	if uid, ok := OfRequest(r.WithContext(WithUID(r.Context(), 4242, true))); uid != 4242 || !ok {
		t.Fatalf("a replica's word: %d %v", uid, ok)
	}
	if _, ok := OfRequest(r.WithContext(WithUID(r.Context(), 0, false))); ok {
		t.Fatal("a replica that could not say: a uid")
	}
}
