// Package peer finds who is calling the gateway from this machine: the uid of the process at
// the other end of a connection, which the kernel's socket tables name for any connection
// whose two ends are both local (loopback, or an address of this host or pod).
//
// In local mode only the controller's own user is admitted (unless flags name others), and
// sessions are bound to the user (a principal of their own), so two users admitted on one
// machine cannot reach each other's sessions. Among replicas, a request another replica
// proxied carries its client's address and uid, believed only when the connection is a
// replica's (the Router's Trusted): then its context says the client's uid, not the proxying
// replica's. Where the OS does not say (another OS, another network namespace), the uid is
// unknown.
package peer

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"sync"
)

type key struct{}

// Context is a gateway server's ConnContext: the uid of the process at the other end of a
// connection from this machine, looked up once, when a request first asks (UID). The lookup
// reads the kernel's socket tables, whose size grows with every socket of the machine: with
// 10,000 sessions a lookup cost a second under load, so a connection nobody asks about costs
// none.
func Context(ctx context.Context, c net.Conn) context.Context {
	local, okL := addrPort(c.LocalAddr())
	remote, okR := addrPort(c.RemoteAddr())
	if !okL || !okR || !(remote.Addr().IsLoopback() || remote.Addr() == local.Addr()) {
		return ctx
	}
	ctx = context.WithValue(ctx, localKey{}, true)
	return context.WithValue(ctx, key{}, sync.OnceValues(func() (int, bool) { return peerUID(remote, local) }))
}

// localKey marks a connection from this machine or pod.
type localKey struct{}

// Local reports whether the request's connection comes from this machine or pod: one whose
// process the OS can name (UID), whether or not it does.
func Local(ctx context.Context) bool {
	local, _ := ctx.Value(localKey{}).(bool)
	return local
}

// WithUID says the caller's uid (known false: the OS cannot say, whatever ctx said before).
func WithUID(ctx context.Context, uid int, known bool) context.Context {
	return context.WithValue(ctx, key{}, func() (int, bool) { return uid, known })
}

// UID is the uid of the process calling, when known.
func UID(ctx context.Context) (int, bool) {
	lookup, _ := ctx.Value(key{}).(func() (int, bool))
	if lookup == nil {
		return 0, false
	}
	return lookup()
}

// OfRequest is the uid of the process that sent r, when known: what its context says (Context,
// or WithUID for a request a replica proxied), else, for a request whose server gave it no
// Context, the uid looked up from the two ends of its connection, so that local mode's rule
// holds however the gateway's handler is served. A request that came by no connection (made in
// a test) has no uid.
func OfRequest(r *http.Request) (int, bool) {
	ctx := r.Context()
	if lookup, ok := ctx.Value(key{}).(func() (int, bool)); ok {
		return lookup()
	}
	la, _ := ctx.Value(http.LocalAddrContextKey).(net.Addr)
	local, okL := addrPort(la)
	remote, err := netip.ParseAddrPort(r.RemoteAddr)
	if !okL || err != nil {
		return 0, false
	}
	remote = netip.AddrPortFrom(remote.Addr().Unmap(), remote.Port())
	if !remote.Addr().IsLoopback() && remote.Addr() != local.Addr() {
		return 0, false
	}
	return peerUID(remote, local)
}

// CanName reports whether this machine names the user at the other end of a loopback
// connection (Linux's socket tables do; elsewhere, or where they are hidden, the user is
// unknown): it connects to itself and looks.
func CanName() bool {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return false
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			c = nil
		}
		accepted <- c
	}()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return false
	}
	defer client.Close()
	server := <-accepted
	if server == nil {
		return false
	}
	defer server.Close()
	uid, ok := UID(Context(context.Background(), server))
	return ok && uid == os.Getuid()
}

func addrPort(a net.Addr) (netip.AddrPort, bool) {
	tcp, ok := a.(*net.TCPAddr)
	if !ok {
		return netip.AddrPort{}, false
	}
	ap := tcp.AddrPort()
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), true
}

// peerUID finds the uid owning the socket whose local end is peer and remote end is us: by
// asking the kernel for that one socket (sockDiagUID, Linux), else in its socket tables.
func peerUID(peer, us netip.AddrPort) (int, bool) {
	if uid, ok, asked := sockDiagUID(peer, us); asked {
		return uid, ok
	}
	return tableUID(peer, us)
}

// tableUID finds the socket in the kernel's socket tables, whose reading costs in proportion to
// every socket of the machine.
func tableUID(peer, us netip.AddrPort) (int, bool) {
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		data, err := os.ReadFile(table)
		if err != nil {
			continue
		}
		if uid, ok := socketUID(data, peer, us); ok {
			return uid, true
		}
	}
	return 0, false
}

// socketUID reads a /proc/net/tcp or tcp6 table for the socket from local to remote and
// returns its uid. The table's addresses are hex words in the kernel's byte order
// (little-endian here), its ports big-endian hex.
func socketUID(table []byte, local, remote netip.AddrPort) (int, bool) {
	s := bufio.NewScanner(bytes.NewReader(table))
	s.Scan() // the header
	for s.Scan() {
		f := bytes.Fields(s.Bytes())
		if len(f) < 10 {
			continue
		}
		l, okL := procAddr(f[1])
		r, okR := procAddr(f[2])
		if !okL || !okR || l != local || r != remote {
			continue
		}
		// Only a socket a process still holds (established or half-closed, with an inode):
		// a closing one says uid 0 whoever held it.
		if st, inode := string(f[3]), string(f[9]); (st != "01" && st != "08") || inode == "0" {
			return 0, false
		}
		uid, err := strconv.Atoi(string(f[7]))
		return uid, err == nil
	}
	return 0, false
}

// procAddr decodes "0100007F:1F90" (127.0.0.1:8080) or its 32-digit IPv6 form.
func procAddr(field []byte) (netip.AddrPort, bool) {
	host, port, ok := bytes.Cut(field, []byte(":"))
	if !ok {
		return netip.AddrPort{}, false
	}
	raw, err := hex.DecodeString(string(host))
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return netip.AddrPort{}, false
	}
	for i := 0; i+4 <= len(raw); i += 4 { // each 32-bit word is in host (little-endian) order
		raw[i], raw[i+1], raw[i+2], raw[i+3] = raw[i+3], raw[i+2], raw[i+1], raw[i]
	}
	addr, _ := netip.AddrFromSlice(raw)
	p, err := strconv.ParseUint(string(port), 16, 16)
	if err != nil {
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(addr.Unmap(), uint16(p)), true
}
