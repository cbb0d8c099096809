//go:build linux

package httpserve

import (
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A taken stream's connection has nothing to read while it is idle: the client sends nothing
// on a stream but, rarely, its next request, or it hangs up. So no reader of its own waits on
// it; the gateway's readiness does, for every taken connection at once: an epoll instance of
// its own, itself registered with Go's netpoller, so that its one goroutine is parked there
// (no thread blocked) until a connection has something to read. Each connection is registered
// one-shot, and its event starts that connection's reader (Taken.read). An idle stream
// then holds no goroutine.

// ReadinessSupported says whether add watches connections (tests).
const ReadinessSupported = true

// readiness tells, once, when each of its connections has something to read.
type Readiness struct {
	f    *os.File        // the epoll instance, as Go's netpoller sees it
	raw  syscall.RawConn // f's
	done chan struct{}   // closed once the watcher has ended

	mu      sync.Mutex
	next    uint64             // the last token given
	waiting map[uint64]watched // by token: the epoll event's data, never a pointer or an fd
	closed  bool               // add watches no more connections
}

// watched is a connection registered with a readiness.
type watched struct {
	raw   syscall.RawConn // the connection's: its fd is valid only while the connection is open
	ready func()
}

// readyBatch is how many events the watcher takes from the epoll instance at a time.
const readyBatch = 128

// NewReadiness starts a readiness; its watcher ends with close.
func NewReadiness() (*Readiness, error) {
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		_ = unix.Close(fd)
		return nil, os.NewSyscallError("setnonblock", err)
	}
	f := os.NewFile(uintptr(fd), "readiness") // non-blocking: the netpoller takes it
	// A file the netpoller does not take has no deadlines: its watcher could not park.
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		_ = f.Close()
		return nil, err
	}
	raw, err := f.SyscallConn()
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	r := &Readiness{f: f, raw: raw, done: make(chan struct{}), waiting: map[uint64]watched{}}
	go r.watch()
	return r, nil
}

// watch takes the epoll instance's events until it is closed; parked in the netpoller while
// there are none.
func (r *Readiness) watch() {
	defer close(r.done)
	events := make([]unix.EpollEvent, readyBatch)
	_ = r.raw.Read(func(epfd uintptr) bool {
		for {
			n, err := unix.EpollWait(int(epfd), events, 0)
			switch {
			case err == unix.EINTR:
				continue
			case err != nil:
				return true // not a state the instance gets in while open: the watcher ends
			case n == 0:
				// Nothing is ready: the netpoller wakes the watcher on the next event. (It is
				// told of every event, edge-triggered, so each call takes what is ready.)
				return false
			}
			for _, ev := range events[:n] {
				r.fire(int(epfd), uint64(uint32(ev.Fd))|uint64(uint32(ev.Pad))<<32)
			}
		}
	})
	// Closed: whoever still waits gets its reader, which then watches its connection itself.
	r.mu.Lock()
	r.closed = true
	rest := r.waiting
	r.waiting = nil
	r.mu.Unlock()
	for _, w := range rest {
		w.ready()
	}
}

// fire calls the ready of the connection of token tok, unless it was unwatched meanwhile.
func (r *Readiness) fire(epfd int, tok uint64) {
	r.mu.Lock()
	w, ok := r.waiting[tok]
	if ok {
		delete(r.waiting, tok)
		w.deregister(epfd) // the connection may be taken again once its stream ends
	}
	r.mu.Unlock()
	if ok {
		w.ready()
	}
}

// deregister removes the connection from the epoll instance epfd while it is open (once it is
// closed, its fd may be another's; the kernel has dropped its registration with it).
func (w watched) deregister(epfd int) {
	_ = w.raw.Control(func(fd uintptr) { _ = unix.EpollCtl(epfd, unix.EPOLL_CTL_DEL, int(fd), nil) })
}

// add calls ready (from the watcher: it must not block) once c has something to read (data,
// its end or an error). unwatch stops that: true when ready has not been called and will not
// be; false when it has (or is being). add returns nil where it cannot watch c (not an OS
// socket, or r nil or closed): the caller reads c itself.
func (r *Readiness) add(c net.Conn, ready func()) (unwatch func() bool) {
	if r == nil {
		return nil
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock() // the watcher finds the token in waiting, however soon the event comes
	if r.closed {
		return nil
	}
	r.next++
	tok := r.next
	var added error
	err = r.raw.Control(func(epfd uintptr) {
		if err := raw.Control(func(fd uintptr) {
			// Level-triggered and one-shot: what is there already fires at once, and only once.
			ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLONESHOT, Fd: int32(uint32(tok)), Pad: int32(uint32(tok >> 32))}
			added = unix.EpollCtl(int(epfd), unix.EPOLL_CTL_ADD, int(fd), &ev)
		}); err != nil {
			added = err
		}
	})
	if err != nil || added != nil {
		return nil
	}
	r.waiting[tok] = watched{raw: raw, ready: ready}
	return func() bool { return r.remove(tok) }
}

// remove unwatches the connection of token tok: true when its ready had not been called.
func (r *Readiness) remove(tok uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	w, ok := r.waiting[tok]
	if !ok {
		return false
	}
	delete(r.waiting, tok)
	_ = r.raw.Control(func(epfd uintptr) { w.deregister(int(epfd)) })
	return true
}

// watching is how many connections wait for their ready.
func (r *Readiness) Watching() int {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.waiting)
}

// close ends the watcher, once the connections still watched have their ready called.
func (r *Readiness) Close() {
	if r == nil {
		return
	}
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	_ = r.f.Close() // the watcher's Read ends
	<-r.done
}
