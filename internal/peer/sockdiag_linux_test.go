package peer

import (
	"net"
	"net/netip"
	"os"
	"testing"
)

// The kernel names the uid of one socket by its ends, as its tables do: for a connection of
// this process over IPv4 and IPv6 loopback, and no one for ends no socket has.
func TestSockDiagUID(t *testing.T) {
	for _, network := range []string{"127.0.0.1:0", "[::1]:0"} {
		ln, err := net.Listen("tcp", network)
		if err != nil {
			t.Logf("%s: %v (no such loopback here)", network, err)
			continue
		}
		client, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		server, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		peer, _ := addrPort(server.RemoteAddr())
		us, _ := addrPort(server.LocalAddr())
		uid, ok, asked := sockDiagUID(peer, us)
		if !asked || !ok || uid != os.Getuid() {
			t.Errorf("%s: sock_diag says uid %d (found %v, asked %v), want %d", network, uid, ok, asked, os.Getuid())
		}
		if tuid, tok := tableUID(peer, us); tok && tuid != uid {
			t.Errorf("%s: sock_diag says uid %d, the tables %d", network, uid, tuid)
		}
		nobody := netip.AddrPortFrom(peer.Addr(), peer.Port()+1)
		if _, ok, asked := sockDiagUID(nobody, us); asked && ok {
			t.Errorf("%s: sock_diag found a socket at %s, where there is none", network, nobody)
		}
		client.Close()
		server.Close()
		ln.Close()
	}
}
