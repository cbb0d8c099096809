//go:build !unix

package conn

import "net"

// peek: without a way to look at a kept connection, none is reused.
func peek(net.Conn) peekState { return peekGone }
