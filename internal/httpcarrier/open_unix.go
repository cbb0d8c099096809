//go:build unix

package httpcarrier

import (
	"net"
	"syscall"
)

// open reports whether a kept connection is still open and quiet: the server has neither
// closed it nor sent anything on it while it was idle. It looks without reading or waiting.
func open(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	quiet := false
	var b [1]byte
	err = rc.Read(func(fd uintptr) bool {
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		quiet = err == syscall.EAGAIN || err == syscall.EWOULDBLOCK
		return true // never wait
	})
	return err == nil && quiet
}
