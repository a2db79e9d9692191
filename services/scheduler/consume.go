package scheduler

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/kafkax"
	"github.com/ferryhq/ferry/platform/quarantine"
	"github.com/ferryhq/ferry/platform/telemetry"
	"github.com/ferryhq/ferry/services/scheduler/internal/qstore"
	"github.com/ferryhq/ferry/services/scheduler/internal/retry"
)

// consume polls the lifecycle and worker topics and applies each batch
// through the quarantine (settler): a failing batch is retried while the
// failure is transient (Redis or Kafka unavailable, the Redis state lost),
// and a record that fails deterministically (a decision record over the
// broker's maximum message size) is parked after a few tries, so dispatch
// goes on for everyone else. Offsets are marked for commit only once a
// part's effects are in Redis and its records in Kafka, or it is parked.
func (s *Service) consume(ctx context.Context, cl *kgo.Client) error {
	defer s.watchQuarantine(ctx)()
	settler := s.settler(cl)
	for {
		fetches := cl.PollRecords(ctx, s.cfg.MaxPoll)
		if fetches.IsClientClosed() {
			return nil
		}
		fetches.EachError(func(topic string, p int32, err error) {
			if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				s.log.Warn("fetch", "topic", topic, "partition", p, "err", err)
			}
		})
		if recs := fetches.Records(); len(recs) > 0 {
			if err := settler.Settle(ctx, recs); err != nil {
				// ctx ended mid-retry. Unmarked records are replayed by
				// the group's next owner.
				cl.AllowRebalance()
				return nil
			}
		}
		cl.AllowRebalance()
		if ctx.Err() != nil {
			return nil
		}
	}
}

// settler applies (part of) a polled batch and marks it for commit, or
// parks one record in the quarantine table and marks it. Without Postgres
// (tests only) nothing is parked and a failing batch is retried forever.
//
// Apply and Park run to completion even when ctx ends meanwhile (the part
// in hand is finished); the settler stops between tries. Marks are
// committed in the background (kafkax.MarkedGroup); a crash before that
// replays the records, which is idempotent: Redis scripts ignore repeats,
// a replayed failure yields the same decision, and parking the same record
// again updates its row (quarantine.Park).
func (s *Service) settler(cl *kgo.Client) *quarantine.Settler {
	st := &quarantine.Settler{
		Group:      Group,
		Logger:     s.log,
		MaxBackoff: 2 * time.Second,
		Apply: func(ctx context.Context, recs []*kgo.Record) error {
			err := s.processGated(context.WithoutCancel(ctx), recs)
			if errors.Is(err, qstore.ErrNoEpoch) {
				// The recovery loop rebuilds the state; then this part is
				// applied on top of it.
				s.stateLost()
			}
			if err == nil {
				cl.MarkCommitRecords(recs...)
			}
			return err
		},
	}
	if s.deps.Postgres != nil {
		st.Park = func(ctx context.Context, rec *kgo.Record, cause error, tries int) error {
			err := quarantine.Park(context.WithoutCancel(ctx), s.deps.Postgres, Group, rec, cause, tries)
			if err == nil {
				cl.MarkCommitRecords(rec)
			}
			return err
		}
	}
	return st
}

// watchQuarantine runs quarantine.Watch for the scheduler's group beside
// the consumer (operators' retries, the gauge) and returns its stop.
func (s *Service) watchQuarantine(ctx context.Context) (stop func()) {
	if s.deps.Postgres == nil {
		return func() {}
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		quarantine.Watch(wctx, s.deps.Postgres, Group, s.reapply, s.log)
	}()
	return func() { cancel(); <-done }
}

// reapply is the scheduler's quarantine.ReapplyFunc: an operator's retry
// of a parked record runs it through process again (Redis effects are
// idempotent; a failed attempt's decision is produced anew). tx only holds
// the quarantine row meanwhile, so two replicas never both re-apply it.
func (s *Service) reapply(ctx context.Context, _ pgx.Tx, rec *kgo.Record) error {
	return s.processGated(ctx, []*kgo.Record{rec})
}

// processGated is process under the shared gate: never during a rebuild.
// The dispatches of the steps its apply runs keep the gate until they are
// acknowledged, as a loop's steps do (gateHold).
func (s *Service) processGated(ctx context.Context, recs []*kgo.Record) error {
	hold := s.holdGate()
	defer hold.release()
	return s.process(ctx, recs, hold)
}

// process applies one polled batch: one Redis round trip for the whole
// batch and the dispatch steps it makes due (applyAndStep), then, for
// failed attempts, one produce of the retry/dlq decisions.
func (s *Service) process(ctx context.Context, recs []*kgo.Record, hold *gateHold) error {
	now := s.cfg.Now()
	var b qstore.Batch
	enqueues := false
	failed := map[[2]string]schema.Failed{}
	for _, r := range recs {
		ev, err := schema.Decode(r)
		if err != nil {
			s.log.Warn("skipping undecodable record", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "err", err)
			continue
		}
		switch d := ev.Data.(type) {
		case schema.Enqueued:
			enqueues = true
			if err := b.Enqueue(d, ev.Time); err != nil {
				s.log.Warn("skipping enqueued", "job_id", d.JobID, "err", err)
			}
			b.Trace(d.JobRef, telemetry.TraceParent(kafkax.RecordContext(r))) // the dispatch continues this trace (observe.go)
		case schema.Started:
			b.Extend(d.JobID, d.DispatchID)
		case schema.Progress:
			if d.Lease > 0 {
				b.Hold(d.JobID, d.DispatchID, d.Lease.D())
			} else {
				b.Extend(d.JobID, d.DispatchID)
			}
		case schema.Completed:
			b.Usage(d.JobID, d.DispatchID, d.StartedAt, d.FinishedAt) // reconciles the fair-share charge
			b.Complete(d.JobID, d.TenantID, d.DispatchID)
			countCompleted(ctx, d.TenantID)
		case schema.Failed:
			b.Usage(d.JobID, d.DispatchID, d.StartedAt, d.FinishedAt)
			b.Fail(d.JobID, d.DispatchID, d.Error.Class)
			failed[[2]string{d.JobID, d.DispatchID}] = d
		case schema.Cancelled:
			b.Cancel(d.JobID, d.TenantID)
		case schema.WorkerStatus:
			at := d.At
			if at.IsZero() || at.After(now) {
				at = now
			}
			b.Worker(d, at.Add(s.cfg.WorkerTTL))
			for _, ref := range d.HandedBack {
				b.HandBack(ref.JobID, ref.Attempt)
			}
			for _, ref := range d.Rejected { // not its type: re-routed (route.go)
				b.Release(ref.JobID, ref.DispatchID)
			}
		}
	}
	res, err := s.applyAndStep(ctx, now, &b, enqueues, hold)
	if err != nil {
		return err
	}
	out, err := s.decisions(res, failed, now)
	if err != nil {
		return err
	}
	traceDecisions(ctx, recs, out) // decisions continue their jobs' traces (observe.go)
	return kafkax.ProduceAll(ctx, s.deps.Kafka, out...)
}

// decisions are the records that follow from an Apply: the retry or
// dead-letter decision of each failed attempt, and a stop signal for each
// superseded copy.
func (s *Service) decisions(res qstore.ApplyResult, failed map[[2]string]schema.Failed, now time.Time) ([]*kgo.Record, error) {
	var out []*kgo.Record
	for _, t := range res.Superseded {
		rec, err := s.superseded(t, now)
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	for _, t := range res.Failed {
		f, ok := failed[[2]string{t.JobID, t.DispatchID}]
		if !ok {
			continue
		}
		rec, err := s.decide(t, f, now)
		if err != nil {
			return nil, err
		}
		if rec != nil {
			out = append(out, rec)
		}
	}
	return out, nil
}

// superseded is the stop signal for a copy of a job that completed by an
// earlier dispatch: a cancelled event with reason superseded. Workers stop
// the copy without reporting; projections keep succeeded, which outranks
// cancelled.
func (s *Service) superseded(t qstore.Template, now time.Time) (*kgo.Record, error) {
	s.log.Info("job completed by an earlier dispatch; stopping the copy in flight", "job_id", t.JobID, "dispatch_id", t.DispatchID)
	return schema.NewRecord(s.deps.Topics.Lifecycle(schema.EventCancelled), Source, schema.Cancelled{
		JobRef: schema.JobRef{JobID: t.JobID, TenantID: t.TenantID, Attempt: t.Attempt},
		Reason: schema.ReasonSuperseded,
		Actor:  Source,
		At:     now.UTC(),
	})
}

// decide turns a failed attempt into its retry or dead-letter record. The
// history it carries is bounded (boundHistory) and so is each error
// message (history.go): a job's records cannot outgrow the broker's
// maximum message size however often it fails or however long its errors.
func (s *Service) decide(t qstore.Template, f schema.Failed, now time.Time) (*kgo.Record, error) {
	hist := boundHistory(append(append([]schema.Attempt(nil), t.History...), attemptOf(f)))
	d := s.policy.Decide(retry.Input{
		Job: t.Job, Attempt: t.Attempt, Class: f.Error.Class, RetryAfter: f.RetryAfter.D(), History: t.History,
	})
	topics := s.deps.Topics
	switch d.Action {
	case retry.Retry:
		s.countRetry(t, f.Error.Class, d.Delay)
		return schema.NewRecord(topics.Lifecycle(schema.EventEnqueued), Source, schema.Enqueued{
			JobRef:       schema.JobRef{JobID: t.JobID, TenantID: t.TenantID, Attempt: t.Attempt + 1},
			Job:          t.Job,
			CreatedAt:    t.CreatedAt,
			RunAt:        retryAt(f, now, d.Delay),
			Reason:       schema.ReasonRetry,
			Actor:        Source,
			History:      hist,
			RedrivenFrom: t.RedrivenFrom,
		})
	case retry.DeadLetter:
		s.countDeadLetter(context.Background(), t, f.Error.Class)
		return s.deadLetter(t, schema.ErrorInfo{Class: f.Error.Class, Message: boundError(f.Error.Message)}, hist, now)
	}
	// worker_lost and cancelled are settled inside Redis.
	return nil, nil
}

// retryAt is when the retry of failed attempt f is due: delay after the
// attempt ended (its finished_at, the worker's clock), so the time the
// failure spent on its way to the scheduler (the consumer's lag) is not
// added to the backoff. A finished_at ahead of the scheduler's clock (or
// unknown) counts from now; a due time already past is now.
func retryAt(f schema.Failed, now time.Time, delay time.Duration) time.Time {
	from := now
	if !f.FinishedAt.IsZero() && f.FinishedAt.Before(now) {
		from = f.FinishedAt
	}
	at := from.Add(delay)
	if at.Before(now) {
		at = now
	}
	return at.UTC()
}

func (s *Service) deadLetter(t qstore.Template, e schema.ErrorInfo, hist []schema.Attempt, now time.Time) (*kgo.Record, error) {
	if hist == nil {
		hist = []schema.Attempt{}
	}
	return schema.NewRecord(s.deps.Topics.Lifecycle(schema.EventDLQ), Source, schema.DeadLettered{
		JobRef:       schema.JobRef{JobID: t.JobID, TenantID: t.TenantID, Attempt: t.Attempt},
		Job:          t.Job,
		CreatedAt:    t.CreatedAt,
		Error:        e,
		History:      hist,
		DeadAt:       now.UTC(),
		RedrivenFrom: t.RedrivenFrom,
	})
}

func attemptOf(f schema.Failed) schema.Attempt {
	a := schema.Attempt{Attempt: f.Attempt, Class: f.Error.Class, Error: boundError(f.Error.Message), WorkerID: f.WorkerID}
	if !f.StartedAt.IsZero() {
		st := f.StartedAt
		a.StartedAt = &st
	}
	if !f.FinishedAt.IsZero() {
		fin := f.FinishedAt
		a.FinishedAt = &fin
	}
	return a
}
