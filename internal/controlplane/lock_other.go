//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package controlplane

import "context"

// lock is a no-op where flock is unavailable: concurrent first runs then each fill a temporary
// directory of their own, and the atomic rename keeps whichever finishes first (see install).
func lock(context.Context, string, func()) (unlock func(), locked bool, err error) {
	return func() {}, false, nil
}
