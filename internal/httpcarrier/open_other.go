//go:build !unix

package httpcarrier

import "net"

// open: without a way to look at a kept connection, none is reused.
func open(net.Conn) bool { return false }
