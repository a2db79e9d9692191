package eventlog

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferryhq/ferry/services/sse-bridge/internal/hub"
)

// Tailer is a process's one reader of the log: it reads rows after the last
// one it published, in batches, whenever the projection notifies or every
// Poll, and publishes them to the hub. Every SSE client of the process
// shares this single consumption.
type Tailer struct {
	pool  *pgxpool.Pool
	hub   *hub.Hub
	log   *slog.Logger
	poll  time.Duration
	batch int
	last  atomic.Int64
}

// NewTailer returns a tailer that publishes rows after start to h.
func NewTailer(pool *pgxpool.Pool, h *hub.Hub, log *slog.Logger, start int64, poll time.Duration) *Tailer {
	t := &Tailer{pool: pool, hub: h, log: log, poll: poll, batch: 1000}
	t.last.Store(start)
	return t
}

// Last returns the seq of the last published row.
func (t *Tailer) Last() int64 { return t.last.Load() }

// Run tails until ctx is done. Connection errors are logged and retried.
func (t *Tailer) Run(ctx context.Context) error {
	for ctx.Err() == nil {
		err := t.listen(ctx)
		if ctx.Err() != nil {
			break
		}
		t.log.Warn("sse-bridge: tailer connection lost; retrying", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	return nil
}

func (t *Tailer) listen(ctx context.Context) error {
	conn, err := t.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "LISTEN "+Channel); err != nil {
		return err
	}
	defer func() {
		if ctx.Err() == nil {
			_, _ = conn.Exec(context.WithoutCancel(ctx), "UNLISTEN "+Channel)
		} else {
			// A cancelled wait may leave the connection in any state.
			conn.Conn().PgConn().Close(context.WithoutCancel(ctx)) //nolint:errcheck
		}
	}()
	for {
		// Drain everything after last.
		for {
			evs, err := After(ctx, conn, t.last.Load(), t.batch)
			if err != nil {
				return err
			}
			if len(evs) > 0 {
				t.hub.Publish(evs)
				t.last.Store(evs[len(evs)-1].Seq)
			}
			if len(evs) < t.batch {
				break
			}
		}
		wctx, cancel := context.WithTimeout(ctx, t.poll)
		err := conn.Conn().PgConn().WaitForNotification(wctx)
		cancel()
		if err != nil && ctx.Err() == nil && !isTimeout(err) {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) {
		return true
	}
	return false
}
