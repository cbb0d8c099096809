package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"net"
	"net/netip"
	"os"
	"strconv"
)

// In local mode every caller is on this machine, and the OS can say which user each
// connection's other end runs as: sessions are then bound to that user (a principal of its
// own), so two users of one machine cannot reach each other's sessions. Where the OS does not
// say (another OS, another network namespace), every caller is the one local user.

type peerKey struct{}

// peerContext is the gateway server's ConnContext: in local mode it notes the uid of the
// process at the other end of a loopback connection, once per connection.
func peerContext(ctx context.Context, c net.Conn) context.Context {
	local, okL := addrPort(c.LocalAddr())
	remote, okR := addrPort(c.RemoteAddr())
	if !okL || !okR || !remote.Addr().IsLoopback() {
		return ctx
	}
	if uid, ok := peerUID(remote, local); ok {
		return context.WithValue(ctx, peerKey{}, uid)
	}
	return ctx
}

// localPrincipalOf is the principal of a local-mode request: the local user of the uid at the
// other end of its connection, when known.
func localPrincipalOf(ctx context.Context) string {
	if uid, ok := ctx.Value(peerKey{}).(int); ok {
		return localPrincipal + ":uid:" + strconv.Itoa(uid)
	}
	return localPrincipal
}

func addrPort(a net.Addr) (netip.AddrPort, bool) {
	tcp, ok := a.(*net.TCPAddr)
	if !ok {
		return netip.AddrPort{}, false
	}
	ap := tcp.AddrPort()
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), true
}

// peerUID finds the uid owning the socket whose local end is peer and remote end is us, in
// the kernel's socket tables.
func peerUID(peer, us netip.AddrPort) (int, bool) {
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
		if len(f) < 8 {
			continue
		}
		l, okL := procAddr(f[1])
		r, okR := procAddr(f[2])
		if !okL || !okR || l != local || r != remote {
			continue
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
