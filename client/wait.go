package client

import (
	"context"
	"errors"
	"time"
)

// WaitOptions tune Wait.
type WaitOptions struct {
	// PollInterval is how often the job is read while no event says it
	// changed, and the whole mechanism if the event stream is unavailable.
	// Defaults to 2s.
	PollInterval time.Duration
	// NoStream polls only, without the event stream.
	NoStream bool
}

// fastPoll is the polling pace once the stream announced the final event:
// the status projection shows it moments later.
const fastPoll = 100 * time.Millisecond

// notFoundGrace is how long Wait accepts 404 for a job that may not be
// visible yet.
const notFoundGrace = 10 * time.Second

// Wait blocks until the job reaches a terminal status (succeeded, dead or
// cancelled) and returns it, or until ctx ends. It follows the job's event
// stream and reads the job when an event arrives; should the stream fail
// (a proxy that buffers it, a stream limit) it falls back to polling.
func (c *Client) Wait(ctx context.Context, id string, opts *WaitOptions) (*Job, error) {
	var o WaitOptions
	if opts != nil {
		o = *opts
	}
	if o.PollInterval <= 0 {
		o.PollInterval = 2 * time.Second
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	kick := make(chan bool, 1) // true: a final event arrived
	if !o.NoStream {
		go c.watch(ctx, id, kick)
	}
	interval := o.PollInterval
	missingSince := time.Time{}
	for {
		job, err := c.Get(ctx, id)
		switch {
		case err == nil && job.Status.Terminal():
			return job, nil
		case errors.Is(err, ErrNotFound):
			// A job of a re-drive shows up moments after its answer.
			if missingSince.IsZero() {
				missingSince = time.Now()
			} else if time.Since(missingSince) > notFoundGrace {
				return nil, err
			}
		case err != nil:
			return nil, err
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case final := <-kick:
			if final {
				interval = fastPoll
			}
		case <-t.C:
		}
		t.Stop()
	}
}

// watch signals kick on each event of the job's stream; it returns when
// the stream ends or fails (Wait keeps polling).
func (c *Client) watch(ctx context.Context, id string, kick chan bool) {
	for ev, err := range c.JobEvents(ctx, id, nil) {
		if err != nil {
			return
		}
		final := ev.Type.Final()
		select {
		case kick <- final:
		default:
			if final { // replace a pending non-final kick
				select {
				case <-kick:
				default:
				}
				select {
				case kick <- true:
				default:
				}
			}
		}
	}
}
