package scheduler

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/services/scheduler/internal/qstore"
)

// produceTimeout bounds the produce of one dispatch step.
const produceTimeout = 10 * time.Second

// dispatchLoop runs dispatch steps for pool: at once when woken by the
// consumer, at the next due time or lease deadline, and on the fallback tick.
func (s *Service) dispatchLoop(ctx context.Context, pool string) error {
	tick := time.NewTicker(s.cfg.Tick)
	defer tick.Stop()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	wake := s.wake[pool]
	for {
		if ctx.Err() != nil {
			return nil
		}
		res, err := s.stepGated(ctx, pool)
		if errors.Is(err, qstore.ErrNoEpoch) {
			// Wait for the rebuild; it wakes every loop when done.
			s.stateLost()
			select {
			case <-ctx.Done():
				return nil
			case <-wake:
			case <-time.After(s.cfg.EpochCheck):
			}
			continue
		}
		if err != nil && ctx.Err() == nil {
			s.log.Error("dispatch step", "pool", pool, "err", err)
		}
		if ctx.Err() != nil {
			return nil
		}
		if err == nil && res.More {
			continue
		}
		now := s.cfg.Now()
		next := time.Time{}
		for _, t := range []time.Time{res.NextDue, res.NextLease} {
			if !t.IsZero() && (next.IsZero() || t.Before(next)) {
				next = t
			}
		}
		if !next.IsZero() {
			// Scores are whole ms; wake just after the due ms begins.
			timer.Reset(max(next.Sub(now), 0))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-timer.C:
		case <-tick.C:
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
	}
}

// stepGated is step under the shared gate: never during a rebuild.
func (s *Service) stepGated(ctx context.Context, pool string) (qstore.DispatchResult, error) {
	s.gate.RLock()
	defer s.gate.RUnlock()
	return s.step(ctx, pool)
}

// step runs one dispatch step of pool and produces its records.
func (s *Service) step(ctx context.Context, pool string) (qstore.DispatchResult, error) {
	// Once the step starts it runs to the end: a reply lost to a cancel
	// would leave jobs leased but never handed out until their lease expires.
	ctx = context.WithoutCancel(ctx)
	res, err := s.store.Dispatch(ctx, qstore.DispatchParams{
		Pool: pool, Now: s.cfg.Now(), Prefetch: s.cfg.Prefetch, MaxBatch: s.cfg.MaxBatch,
		DispatchIDPrefix: schema.NewEventID(),
	})
	if err != nil || (len(res.Dispatched) == 0 && len(res.Expired) == 0) {
		return res, err
	}
	// Leased jobs are handed out even if ctx ends now; a lost produce is
	// released below or recovered when the lease expires.
	pctx, cancel := context.WithTimeout(ctx, produceTimeout)
	defer cancel()
	topic := s.deps.Topics.Dispatch(pool)
	recs := make([]*kgo.Record, 0, len(res.Dispatched)+len(res.Expired))
	owner := make(map[*kgo.Record]qstore.Template, cap(recs))
	var release qstore.Batch
	for _, t := range res.Dispatched {
		rec, err := schema.NewRecord(topic, Source, schema.Dispatch{
			JobRef:     schema.JobRef{JobID: t.JobID, TenantID: t.TenantID, Attempt: t.Attempt},
			DispatchID: t.DispatchID,
			Job:        t.Job,
			CreatedAt:  t.CreatedAt,
			ReadyAt:    t.ReadyAt,
			LeaseUntil: t.LeaseUntil.UTC(),
		})
		if err != nil {
			s.log.Error("encode dispatch", "job_id", t.JobID, "err", err)
			release.Release(t.JobID, t.DispatchID)
			continue
		}
		recs = append(recs, rec)
		owner[rec] = t
	}
	now := s.cfg.Now()
	for _, t := range res.Expired {
		rec, err := s.deadLetter(t, schema.ErrorInfo{Class: schema.ClassExpired, Message: "not_after passed before the job could start"}, t.History, now)
		if err != nil {
			s.log.Error("encode dlq", "job_id", t.JobID, "err", err)
			continue
		}
		recs = append(recs, rec)
		owner[rec] = t
	}
	s.observeDispatch(pctx, pool, res, recs, owner) // traces and metrics (observe.go)
	var acks qstore.Batch
	for _, r := range s.deps.Kafka.ProduceSync(pctx, recs...) {
		t := owner[r.Record]
		switch {
		case r.Err != nil && t.DispatchID != "":
			s.log.Warn("produce dispatch", "job_id", t.JobID, "err", r.Err)
			release.Release(t.JobID, t.DispatchID)
		case r.Err != nil:
			s.log.Warn("produce dlq", "job_id", t.JobID, "err", r.Err)
		case t.DispatchID == "":
			acks.AckExpired(pool, t.JobID)
		}
	}
	for _, b := range []*qstore.Batch{&release, &acks} {
		if b.Len() == 0 {
			continue
		}
		ar, err := s.store.Apply(pctx, s.cfg.Now(), b)
		if err != nil {
			return res, err
		}
		if ar.Wake {
			s.wakeAll()
		}
	}
	return res, nil
}
