//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package controlplane

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// lock takes an exclusive flock on path, waiting as long as ctx allows; waiting is called once
// if another process holds it. The kernel drops the lock when its holder exits, however it
// exits, so a killed build never blocks the next one.
func lock(ctx context.Context, path string, waiting func()) (unlock func(), locked bool, err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, false, fmt.Errorf("locking the control plane cache: %w", err)
	}
	told := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				_ = f.Close()
			}, true, nil
		case errors.Is(err, syscall.EINTR):
			continue
		case !errors.Is(err, syscall.EWOULDBLOCK):
			_ = f.Close()
			return nil, false, fmt.Errorf("locking the control plane cache %s: %w", path, err)
		}
		if !told {
			waiting()
			told = true
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, false, fmt.Errorf("waiting for another process to fill the control plane cache: %w", ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
