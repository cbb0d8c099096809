package peer

import (
	"encoding/binary"
	"net/netip"
	"syscall"
)

// sockDiagUID asks the kernel (netlink sock_diag, as ss does) for the uid of the one TCP
// socket whose local end is peer and remote end is us: a lookup by address, not a read of
// every socket. asked is false when the kernel could not be asked (no netlink here); ok false
// when it has no such socket.
func sockDiagUID(peer, us netip.AddrPort) (uid int, ok, asked bool) {
	fd, err := syscall.Socket(syscall.AF_NETLINK, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, netlinkInetDiag)
	if err != nil {
		return 0, false, false
	}
	defer syscall.Close(fd)
	tv := syscall.Timeval{Sec: 1}
	_ = syscall.SetsockoptTimeval(fd, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &tv)
	if err := syscall.Sendto(fd, diagRequest(peer, us), 0, &syscall.SockaddrNetlink{Family: syscall.AF_NETLINK}); err != nil {
		return 0, false, false
	}
	buf := make([]byte, 8192)
	n, _, err := syscall.Recvfrom(fd, buf, 0)
	if err != nil {
		return 0, false, false
	}
	uid, ok = diagAnswer(buf[:n])
	return uid, ok, true
}

// The kernel's sock_diag interface (linux/inet_diag.h, linux/sock_diag.h).
const (
	netlinkInetDiag  = 4  // NETLINK_INET_DIAG (NETLINK_SOCK_DIAG)
	sockDiagByFamily = 20 // SOCK_DIAG_BY_FAMILY
	nlmsgHeaderLen   = 16
	diagReqLen       = 56 // struct inet_diag_req_v2
	diagMsgUIDOffset = 64 // idiag_uid in struct inet_diag_msg
	allTCPStates     = 0xffffffff
)

// diagRequest is the netlink message asking for the TCP socket from peer to us.
func diagRequest(peer, us netip.AddrPort) []byte {
	msg := make([]byte, nlmsgHeaderLen+diagReqLen)
	binary.NativeEndian.PutUint32(msg[0:], uint32(len(msg)))
	binary.NativeEndian.PutUint16(msg[4:], sockDiagByFamily)
	binary.NativeEndian.PutUint16(msg[6:], syscall.NLM_F_REQUEST)
	req := msg[nlmsgHeaderLen:]
	req[0] = syscall.AF_INET6
	if peer.Addr().Is4() {
		req[0] = syscall.AF_INET
	}
	req[1] = syscall.IPPROTO_TCP
	binary.NativeEndian.PutUint32(req[4:], allTCPStates)
	id := req[8:] // struct inet_diag_sockid: the socket's own end first
	binary.BigEndian.PutUint16(id[0:], peer.Port())
	binary.BigEndian.PutUint16(id[2:], us.Port())
	putAddr(id[4:20], peer.Addr())
	putAddr(id[20:36], us.Addr())
	binary.NativeEndian.PutUint32(id[40:], ^uint32(0)) // INET_DIAG_NOCOOKIE: any socket of these ends
	binary.NativeEndian.PutUint32(id[44:], ^uint32(0))
	return msg
}

func putAddr(dst []byte, a netip.Addr) {
	if a.Is4() {
		v4 := a.As4()
		copy(dst, v4[:])
		return
	}
	v6 := a.As16()
	copy(dst, v6[:])
}

// diagAnswer reads the uid from the kernel's answer; false for an error (no such socket) and
// for a socket no process holds any more (a closing one: the kernel says uid 0 for those).
func diagAnswer(b []byte) (int, bool) {
	if len(b) < nlmsgHeaderLen {
		return 0, false
	}
	if typ := binary.NativeEndian.Uint16(b[4:]); typ != sockDiagByFamily || len(b) < nlmsgHeaderLen+diagMsgUIDOffset+8 {
		return 0, false // NLMSG_ERROR: the kernel knows no such socket
	}
	msg := b[nlmsgHeaderLen:]
	inode := binary.NativeEndian.Uint32(msg[diagMsgUIDOffset+4:])
	if !ownedState(msg[1]) || inode == 0 {
		return 0, false
	}
	return int(binary.NativeEndian.Uint32(msg[diagMsgUIDOffset:])), true
}

// ownedState reports whether a TCP state is one a process still holds its socket in:
// established, or closed by the other end and not yet by it.
func ownedState(state byte) bool { return state == tcpEstablished || state == tcpCloseWait }

const (
	tcpEstablished = 1
	tcpCloseWait   = 8
)
