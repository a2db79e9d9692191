package service

import (
	"context"
	"time"
)

// Every runs fn at once and then every d until ctx is done. It is the
// housekeeping loop of the services (retention, maintenance, settings
// refresh): fn handles and logs its own errors, so one failed round never
// stops the next.
func Every(ctx context.Context, d time.Duration, fn func(context.Context)) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		fn(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
