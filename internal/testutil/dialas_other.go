//go:build !linux

package testutil

import (
	"errors"
	"net"
)

// DialAsUser connects as another local user on Linux only.
func DialAsUser(int, string) (net.Conn, error) {
	return nil, errors.New("DialAsUser: Linux only")
}

// CanDialAsUser reports whether DialAsUser can make another user's socket here: never.
func CanDialAsUser() bool { return false }
