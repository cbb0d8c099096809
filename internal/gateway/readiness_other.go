//go:build !linux

package gateway

import "net"

// readinessSupported says whether add watches connections (tests).
const readinessSupported = false

// readiness watches no connection here: each taken connection has a reader of its own from the
// start (readiness_linux.go is the one that spares it).
type readiness struct{}

func newReadiness() (*readiness, error) { return nil, nil }

func (*readiness) add(net.Conn, func()) (unwatch func() bool) { return nil }

func (*readiness) watching() int { return 0 }

func (*readiness) close() {}
