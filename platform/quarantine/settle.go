package quarantine

import (
	"context"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Settler applies polled batches for one consumer group, retrying
// transient failures forever and parking poison records (package
// documentation).
type Settler struct {
	// Group is the consumer group, the owner of parked rows.
	Group string
	// Apply applies recs and records them as processed (offsets in the same
	// transaction, or marked for commit) — all or nothing. recs is always a
	// prefix of what is left of the polled batch, so records of one
	// partition reach it in order.
	Apply func(ctx context.Context, recs []*kgo.Record) error
	// Park stores rec with its cause (see [Park]) and records it as
	// processed, like Apply. Nil disables parking: every failure is retried
	// forever (a consumer without Postgres).
	Park func(ctx context.Context, rec *kgo.Record, cause error, tries int) error
	// MaxBackoff caps the delay between retries of a transient failure.
	// Defaults to 5s.
	MaxBackoff time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// firstBackoff is the delay after a first failure.
const firstBackoff = 50 * time.Millisecond

// Settle applies recs until every record is applied or parked. It returns
// only ctx's error, once ctx is done; what was applied or parked before then
// stays so, the rest is re-read by the group's next owner.
func (s *Settler) Settle(ctx context.Context, recs []*kgo.Record) error {
	if len(recs) == 0 {
		return nil
	}
	return s.settle(ctx, recs, MaxTries)
}

// settle applies recs, needing tries poison failures before it splits them
// (or parks the single record); transient failures do not count.
func (s *Settler) settle(ctx context.Context, recs []*kgo.Record, tries int) error {
	cause, n, err := s.attempt(ctx, recs, tries)
	if err != nil || cause == nil {
		return err
	}
	if len(recs) == 1 {
		return s.park(ctx, recs[0], cause, n)
	}
	// Bisect: each half is tried once before it is split again, a single
	// record MaxTries times before it is parked.
	mid := len(recs) / 2
	for _, part := range [][]*kgo.Record{recs[:mid], recs[mid:]} {
		t := 1
		if len(part) == 1 {
			t = MaxTries
		}
		if err := s.settle(ctx, part, t); err != nil {
			return err
		}
	}
	return nil
}

// attempt applies recs until it succeeds (nil cause) or fails with poison
// tries times (the last poison error and the number of poison failures), or
// ctx ends (err). Without Park, poison is retried like anything else.
func (s *Settler) attempt(ctx context.Context, recs []*kgo.Record, tries int) (cause error, n int, err error) {
	backoff := firstBackoff
	for {
		aerr := s.Apply(ctx, recs)
		if aerr == nil {
			return nil, n, nil
		}
		if ctx.Err() != nil {
			return nil, n, ctx.Err()
		}
		poison := s.Park != nil && IsPoison(aerr)
		if poison {
			n++
			if n >= tries {
				s.logger().Warn("records fail deterministically; isolating", "group", s.Group, "records", len(recs), "tries", n, "err", aerr)
				return aerr, n, nil
			}
		}
		s.logger().Error("applying records failed; retrying", "group", s.Group, "records", len(recs), "poison", poison, "err", aerr)
		if err := sleep(ctx, backoff); err != nil {
			return nil, n, err
		}
		backoff = min(2*backoff, s.maxBackoff())
	}
}

// park parks rec, retrying until it is stored or ctx ends: the row is
// sanitised so only a transient failure can stop it.
func (s *Settler) park(ctx context.Context, rec *kgo.Record, cause error, tries int) error {
	backoff := firstBackoff
	for {
		err := s.Park(ctx, rec, cause, tries)
		if err == nil {
			parked(ctx, s.Group)
			s.logger().Error("record quarantined: parked until an operator retries or discards it",
				"group", s.Group, "topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset, "err", cause)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.logger().Error("parking a record failed; retrying", "group", s.Group, "topic", rec.Topic,
			"partition", rec.Partition, "offset", rec.Offset, "err", err)
		if err := sleep(ctx, backoff); err != nil {
			return err
		}
		backoff = min(2*backoff, s.maxBackoff())
	}
}

func (s *Settler) maxBackoff() time.Duration {
	if s.MaxBackoff > 0 {
		return s.MaxBackoff
	}
	return 5 * time.Second
}

func (s *Settler) logger() *slog.Logger {
	if s.Logger != nil {
		return s.Logger
	}
	return slog.Default()
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
