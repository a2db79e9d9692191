package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ferryhq/ferry/platform/service"
)

// The epoch (recover.go) notices a Redis that lost everything, not one that
// went back in time: restored from an older RDB/AOF, or a failover to a
// replica that missed recent writes. Such a Redis still has its epoch, but
// forgets jobs enqueued, completed or cancelled since its snapshot.
//
// So every CheckpointInterval one replica stamps an increasing number in
// Redis (P checkpoint) and then in Postgres (scheduler_checkpoint). Read in
// the other order (Postgres, then Redis), Redis's number can only be
// behind Postgres's if Redis lost writes it had acknowledged; the scheduler
// then resets Redis and rebuilds it from the log, as for an empty Redis.
// Writes lost within the last interval before a stamp reached Postgres are
// not noticed.

// checkpointLoop stamps and checks the checkpoint until ctx ends.
func (s *Service) checkpointLoop(ctx context.Context) error {
	if s.deps.Postgres == nil {
		return nil
	}
	service.Every(ctx, s.cfg.CheckpointInterval, func(ctx context.Context) {
		behind, err := s.stampCheckpoint(ctx)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("scheduler checkpoint", "err", err)
			}
			return
		}
		if behind {
			if err := s.rewind(ctx); err != nil && ctx.Err() == nil {
				s.log.Error("rebuilding a Redis that went back in time", "err", err)
			}
		}
	})
	return nil
}

// pgCheckpoint is the last checkpoint stamped in Postgres (0 if none).
func (s *Service) pgCheckpoint(ctx context.Context) (int64, error) {
	var n int64
	err := s.deps.Postgres.QueryRow(ctx, `SELECT seq FROM scheduler_checkpoint WHERE id = 1`).Scan(&n)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("scheduler: read checkpoint: %w", err)
	}
	return n, nil
}

// savePGCheckpoint records n in Postgres, never moving it backwards.
func (s *Service) savePGCheckpoint(ctx context.Context, n int64) error {
	_, err := s.deps.Postgres.Exec(ctx, `INSERT INTO scheduler_checkpoint (id, seq) VALUES (1, $1)
		ON CONFLICT (id) DO UPDATE SET seq = GREATEST(scheduler_checkpoint.seq, EXCLUDED.seq), stamped_at = now()`, n)
	if err != nil {
		return fmt.Errorf("scheduler: save checkpoint: %w", err)
	}
	return nil
}

// behind reports whether Redis's checkpoint is older than Postgres's. A
// Redis without its epoch is being (or about to be) rebuilt: not behind.
func (s *Service) behind(ctx context.Context) (redisCP, pgCP int64, behind bool, err error) {
	if ep, err := s.store.Epoch(ctx); err != nil || ep == "" {
		return 0, 0, false, err
	}
	if pgCP, err = s.pgCheckpoint(ctx); err != nil { // Postgres first: see above
		return 0, 0, false, err
	}
	if redisCP, err = s.store.Checkpoint(ctx); err != nil {
		return 0, 0, false, err
	}
	return redisCP, pgCP, redisCP < pgCP, nil
}

// stampCheckpoint checks the checkpoint and, when Redis is not behind,
// advances it in Redis and then in Postgres.
func (s *Service) stampCheckpoint(ctx context.Context) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if !s.hasEpoch(ctx) {
		return false, nil // lost or being rebuilt: the rebuild sets the checkpoint
	}
	r, _, behind, err := s.behind(ctx)
	if err != nil || behind {
		return behind, err
	}
	next := r + 1
	ok, err := s.store.AdvanceCheckpoint(ctx, r, next)
	if err != nil || !ok {
		return false, err // another replica stamped meanwhile
	}
	return false, s.savePGCheckpoint(ctx, next)
}

func (s *Service) hasEpoch(ctx context.Context) bool {
	ep, err := s.store.Epoch(ctx)
	return err == nil && ep != ""
}

// resetCheckpoint puts Redis's checkpoint past Postgres's once a rebuild
// made Redis whole again (before the epoch is written).
func (s *Service) resetCheckpoint(ctx context.Context) error {
	if s.deps.Postgres == nil {
		return nil
	}
	p, err := s.pgCheckpoint(ctx)
	if err != nil {
		return err
	}
	if err := s.store.SetCheckpoint(ctx, p+1); err != nil {
		return err
	}
	return s.savePGCheckpoint(ctx, p+1)
}

// rewind resets a Redis that went back in time and rebuilds it from the
// log, under the rebuild lock, while this replica's work waits on the gate
// (other replicas' scripts fail with NOEPOCH once the epoch is gone).
func (s *Service) rewind(ctx context.Context) error {
	s.gate.Lock()
	defer s.gate.Unlock()
	got, err := s.store.TryLock(ctx, s.owner, s.cfg.RebuildLockTTL)
	if err != nil || !got {
		return err // another replica holds it: it rebuilds, or just did
	}
	defer func() {
		if err := s.store.Unlock(context.WithoutCancel(ctx), s.owner); err != nil {
			s.log.Warn("rebuild unlock", "err", err)
		}
	}()
	r, p, behind, err := s.behind(ctx)
	if err != nil || !behind {
		return err
	}
	s.log.Error("Redis went back in time (restored from an older snapshot, or a failover lost writes): "+
		"its checkpoint is behind Postgres's; resetting and rebuilding the scheduler state from the log",
		"redis_checkpoint", r, "postgres_checkpoint", p)
	if err := s.store.Reset(ctx); err != nil {
		return err
	}
	if err := s.rebuildLocked(ctx); err != nil {
		return err
	}
	s.wakeAll()
	return nil
}
