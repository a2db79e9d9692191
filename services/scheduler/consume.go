package scheduler

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/kafkax"
	"github.com/ferryhq/ferry/platform/telemetry"
	"github.com/ferryhq/ferry/services/scheduler/internal/qstore"
	"github.com/ferryhq/ferry/services/scheduler/internal/retry"
)

// consume polls the lifecycle and worker topics and applies each batch.
// A batch is retried until it succeeds or ctx ends; its offsets are
// marked for commit only once its effects are in Redis and its records in
// Kafka.
func (s *Service) consume(ctx context.Context, cl *kgo.Client) error {
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
		recs := fetches.Records()
		if len(recs) > 0 {
			// The batch in hand is finished even when ctx ends meanwhile.
			bctx := context.WithoutCancel(ctx)
			backoff := 50 * time.Millisecond
			for {
				err := s.processGated(bctx, recs)
				if err == nil {
					// Committed in the background (kafkax.MarkedGroup); a
					// crash before that replays the batch, which is
					// idempotent.
					cl.MarkCommitRecords(recs...)
					break
				}
				if errors.Is(err, qstore.ErrNoEpoch) {
					// The recovery loop rebuilds the state; then this batch
					// is applied on top of it.
					s.stateLost()
					backoff = 50 * time.Millisecond
				} else {
					s.log.Error("process batch", "records", len(recs), "err", err)
				}
				if ctx.Err() != nil {
					// Uncommitted: the group's next owner replays it.
					cl.AllowRebalance()
					return nil
				}
				select {
				case <-ctx.Done():
				case <-time.After(backoff):
				}
				backoff = min(2*backoff, 2*time.Second)
			}
		}
		cl.AllowRebalance()
		if ctx.Err() != nil {
			return nil
		}
	}
}

// processGated is process under the shared gate: never during a rebuild.
func (s *Service) processGated(ctx context.Context, recs []*kgo.Record) error {
	s.gate.RLock()
	defer s.gate.RUnlock()
	return s.process(ctx, recs)
}

// process applies one polled batch: one Redis round trip for the whole
// batch, then, for failed attempts, one produce of the retry/dlq decisions.
func (s *Service) process(ctx context.Context, recs []*kgo.Record) error {
	now := s.cfg.Now()
	var b qstore.Batch
	failed := map[[2]string]schema.Failed{}
	for _, r := range recs {
		ev, err := schema.Decode(r)
		if err != nil {
			s.log.Warn("skipping undecodable record", "topic", r.Topic, "partition", r.Partition, "offset", r.Offset, "err", err)
			continue
		}
		switch d := ev.Data.(type) {
		case schema.Enqueued:
			if err := b.Enqueue(d, ev.Time); err != nil {
				s.log.Warn("skipping enqueued", "job_id", d.JobID, "err", err)
			}
			b.Trace(d.JobRef, telemetry.TraceParent(r.Context)) // the dispatch continues this trace (observe.go)
		case schema.Started:
			b.Extend(d.JobID, d.DispatchID)
		case schema.Progress:
			b.Extend(d.JobID, d.DispatchID)
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
		}
	}
	res, err := s.store.Apply(ctx, now, &b)
	if err != nil {
		return err
	}
	if res.Wake {
		s.wakeAll()
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

// decide turns a failed attempt into its retry or dead-letter record.
func (s *Service) decide(t qstore.Template, f schema.Failed, now time.Time) (*kgo.Record, error) {
	hist := append(append([]schema.Attempt(nil), t.History...), attemptOf(f))
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
			RunAt:        now.Add(d.Delay).UTC(),
			Reason:       schema.ReasonRetry,
			Actor:        Source,
			History:      hist,
			RedrivenFrom: t.RedrivenFrom,
		})
	case retry.DeadLetter:
		s.countDeadLetter(context.Background(), t, f.Error.Class)
		return s.deadLetter(t, schema.ErrorInfo{Class: f.Error.Class, Message: f.Error.Message}, hist, now)
	}
	// worker_lost and cancelled are settled inside Redis.
	return nil, nil
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
	a := schema.Attempt{Attempt: f.Attempt, Class: f.Error.Class, Error: f.Error.Message, WorkerID: f.WorkerID}
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
