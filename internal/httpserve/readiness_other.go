//go:build !linux

package httpserve

import "net"

// ReadinessSupported says whether add watches connections (tests).
const ReadinessSupported = false

// readiness watches no connection here: each taken connection has a reader of its own from the
// start (readiness_linux.go is the one that spares it).
type Readiness struct{}

func NewReadiness() (*Readiness, error) { return nil, nil }

func (*Readiness) add(net.Conn, func()) (unwatch func() bool) { return nil }

func (*Readiness) Watching() int { return 0 }

func (*Readiness) Close() {}
