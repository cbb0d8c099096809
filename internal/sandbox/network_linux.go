package sandbox

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// ProxyPort is where a sandboxed server finds the controller's proxy: 127.0.0.1 of its own
// network namespace, whose only way out it is.
const ProxyPort = 3128

// proxyFD is the descriptor the init sends the proxy's listening socket back on (exec.Cmd's
// second ExtraFiles).
const proxyFD = 4

// openNetwork brings up the namespace's loopback, listens on ProxyPort there and hands the
// listening socket to the controller, which serves the proxy on it from outside; then points
// the server's proxy variables at it.
func openNetwork() error {
	if err := loopbackUp(); err != nil {
		return err
	}
	ln, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("the proxy's socket: %w", err)
	}
	defer unix.Close(ln)
	if err := unix.Bind(ln, &unix.SockaddrInet4{Port: ProxyPort, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return fmt.Errorf("binding the proxy's socket: %w", err)
	}
	if err := unix.Listen(ln, 128); err != nil {
		return fmt.Errorf("listening on the proxy's socket: %w", err)
	}
	err = unix.Sendmsg(proxyFD, []byte{0}, unix.UnixRights(ln), nil, 0)
	_ = unix.Close(proxyFD)
	if err != nil {
		return fmt.Errorf("handing the proxy's socket to the controller: %w", err)
	}
	proxy := "http://127.0.0.1:" + strconv.Itoa(ProxyPort)
	for _, name := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
		_ = os.Setenv(name, proxy)
	}
	return nil
}

// loopbackUp brings up lo, down in a new network namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("bringing up lo: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bringing up lo: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bringing up lo: %w", err)
	}
	return nil
}

// receiveListener takes the listening socket an init sends on sock.
func receiveListener(sock *os.File) (net.Listener, error) {
	buf, oob := make([]byte, 1), make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := unix.Recvmsg(int(sock.Fd()), buf, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("receiving the proxy's socket: %w", err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return nil, errors.New("the sandbox sent no proxy socket")
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		return nil, errors.New("the sandbox sent no proxy socket")
	}
	f := os.NewFile(uintptr(fds[0]), "proxy")
	defer f.Close()
	return net.FileListener(f)
}
