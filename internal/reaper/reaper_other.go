//go:build !linux

package reaper

import (
	"context"

	"github.com/go-logr/logr"
)

// Run does nothing outside Linux, which has no child subreaper: orphans go to init, which
// reaps them. It returns when ctx ends.
func Run(ctx context.Context, _ logr.Logger) error {
	<-ctx.Done()
	return nil
}
