//go:build unix

package conn

import (
	"net"
	"syscall"
)

// peek is what a kept connection holds, looked at without reading or waiting.
func peek(c net.Conn) peekState {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return peekGone
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return peekGone
	}
	state := peekGone
	var b [1]byte
	err = rc.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case err == syscall.EAGAIN || err == syscall.EWOULDBLOCK:
			state = peekQuiet
		case err == nil && n > 0:
			state = peekSent
		}
		return true // never wait
	})
	if err != nil {
		return peekGone
	}
	return state
}
