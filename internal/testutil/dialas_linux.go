package testutil

import (
	"net"
	"os"
	"runtime"
	"syscall"
)

// DialAsUser connects to addr over TCP as local user uid would: the socket is made with that
// file-system uid, which is the user the kernel's socket tables then name at its end, as for a
// process of that user. It needs CAP_SETUID (root); CanDialAsUser says whether it has it.
func DialAsUser(uid int, addr string) (net.Conn, error) {
	type dialed struct {
		c   net.Conn
		err error
	}
	ch := make(chan dialed, 1)
	go func() {
		// Never unlocked: the thread, whose file-system uid changes, ends with the goroutine
		// instead of going back to the runtime's pool.
		runtime.LockOSThread()
		if err := syscall.Setfsuid(uid); err != nil {
			ch <- dialed{nil, err}
			return
		}
		c, err := net.Dial("tcp", addr)
		ch <- dialed{c, err}
	}()
	d := <-ch
	return d.c, d.err
}

// CanDialAsUser reports whether DialAsUser can make another user's socket here.
func CanDialAsUser() bool { return os.Geteuid() == 0 }
