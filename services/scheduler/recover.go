package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/kafkax"
	"github.com/ferryhq/ferry/services/scheduler/internal/qstore"
)

// Redis is a hot index, not the source of truth (docs/design.md §4). The state
// is complete only while the epoch key exists: a scheduler writes it after
// rebuilding, and both Lua scripts refuse to run without it. So a Redis that
// restarted empty or was flushed is noticed by the next script call (or the
// periodic check of an idle scheduler), and nothing is applied to a partial
// state.
//
// The rebuild re-reads the lifecycle topics from their start (within
// retention) up to their ends as of the rebuild, with a direct consumer,
// folds each job into its latest state and writes it back:
//
//   - completed, dead-lettered, cancelled: a terminal marker, so replays
//     and late events of the job change nothing;
//   - otherwise the latest enqueued attempt, ready or delayed as its run_at
//     says, at the same attempt;
//   - but an attempt the log shows handed to a worker (its dispatch record
//     or its started record) and not yet ended was in flight at a worker
//     that is most likely still running it: it waits one lease
//     from the rebuild before it is dispatched again. Its worker's
//     completion (accepted from any dispatch) ends it meanwhile; a worker
//     that died leaves it to run again, as an expired lease would. Made
//     ready at once, it would race that completion: a copy dispatched to
//     another worker runs the job a second time;
//   - a latest attempt that failed without its retry decision in the log:
//     decided again, as the consumer would have.
//
// Meanwhile this replica's consumer and dispatch loops wait on the gate and
// other replicas' scripts fail with NOEPOCH; one replica rebuilds, under a
// Redis lock. Records the group consumer has not committed are applied
// afterwards on top of the rebuilt state, which is idempotent.

// stateLost tells the recovery loop that a script found no epoch.
func (s *Service) stateLost() {
	select {
	case s.lost <- struct{}{}:
	default:
	}
}

// watchState rebuilds the state whenever it goes missing, until ctx ends.
func (s *Service) watchState(ctx context.Context) error {
	t := time.NewTicker(s.cfg.EpochCheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.lost:
		case <-t.C:
		}
		ep, err := s.store.Epoch(ctx)
		if err != nil || ep != "" {
			continue // Redis unreachable: the scripts fail and retry meanwhile
		}
		s.gate.Lock()
		err = s.recoverState(ctx)
		s.gate.Unlock()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		s.wakeAll()
	}
}

// recoverState returns once the epoch exists: rebuilt by this replica
// under the lock, or by another one.
func (s *Service) recoverState(ctx context.Context) error {
	backoff := 100 * time.Millisecond
	logged := false
	for {
		ep, err := s.store.Epoch(ctx)
		if err == nil && ep != "" {
			return nil
		}
		var got bool
		if err == nil {
			got, err = s.store.TryLock(ctx, s.owner, s.cfg.RebuildLockTTL)
		}
		if err == nil && got {
			err = s.rebuildLocked(ctx)
			uerr := s.store.Unlock(context.WithoutCancel(ctx), s.owner)
			if err == nil && uerr == nil {
				return nil
			}
			err = errors.Join(err, uerr)
		}
		if err != nil {
			s.log.Error("rebuilding scheduler state", "err", err)
		} else if !logged {
			s.log.Warn("scheduler state missing in Redis; waiting for another replica to rebuild it")
			logged = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		if err != nil {
			backoff = min(2*backoff, 5*time.Second)
		}
	}
}

// rebuildLocked rebuilds the state while holding the lock, then writes the
// epoch.
func (s *Service) rebuildLocked(ctx context.Context) error {
	// Another replica may have finished between our check and the lock.
	if ep, err := s.store.Epoch(ctx); err != nil || ep != "" {
		return err
	}
	start := time.Now()
	s.log.Warn("scheduler state missing in Redis; rebuilding it from the log")
	jobs, err := s.foldLog(ctx)
	if err != nil {
		return err
	}
	st, err := s.writeState(ctx, jobs)
	if err != nil {
		return err
	}
	// Paused queues and tenant settings come back before dispatch resumes.
	if s.deps.Postgres != nil {
		if err := s.syncSettings(ctx); err != nil {
			return fmt.Errorf("scheduler: rebuild: %w", err)
		}
	}
	if err := s.resetCheckpoint(ctx); err != nil { // checkpoint.go
		return fmt.Errorf("scheduler: rebuild: %w", err)
	}
	if err := s.store.SetEpochLocked(ctx, s.owner, schema.NewEventID()); err != nil {
		return fmt.Errorf("scheduler: rebuild: %w", err)
	}
	s.log.Warn("scheduler state rebuilt", "jobs", len(jobs), "pending", st.pending, "in_flight", st.inFlight, "failed_redecided", st.redecided,
		"terminal", st.terminal, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// foldedJob is what the log says of one job.
type foldedJob struct {
	tenant  string
	enq     *schema.Enqueued
	enqTime time.Time
	// traceParent is the enqueued record's trace, which the job's dispatch
	// continues (as after a consumed enqueued record).
	traceParent string
	failed      *schema.Failed
	// handedOut is the latest attempt the log shows handed to a worker:
	// dispatched (a record of the pool's dispatch topic) or started.
	handedOut int
	done      bool
	dead      bool
	cancel    bool
}

// rebuildTopics are the lifecycle topics the rebuild reads, besides the
// pools' dispatch topics: those and started tell which attempts were in
// flight; progress changes nothing a rebuild keeps.
var rebuildTopics = []schema.EventType{schema.EventEnqueued, schema.EventStarted, schema.EventFailed, schema.EventCompleted,
	schema.EventDLQ, schema.EventCancelled}

// foldLog reads the lifecycle topics up to their current ends and folds
// them per job: find the range to read (logRange), then read it
// (readLog), folding each record (foldRecord).
func (s *Service) foldLog(ctx context.Context) (map[string]*foldedJob, error) {
	var topics []string
	for _, et := range rebuildTopics {
		topics = append(topics, s.deps.Topics.Lifecycle(et))
	}
	for _, p := range s.cfg.Pools {
		topics = append(topics, s.deps.Topics.Dispatch(p))
	}
	from, ends, err := s.logRange(ctx, topics)
	if err != nil {
		return nil, err
	}
	jobs := map[string]*foldedJob{}
	if len(from) == 0 {
		return jobs, nil
	}
	err = s.readLog(ctx, from, ends, func(r *kgo.Record) { s.foldRecord(jobs, r) })
	if err != nil {
		return nil, err
	}
	return jobs, nil
}

// logRange is what the rebuild reads of topics: each non-empty
// partition's start offset (from) and its end as of now (ends, exclusive).
// A topic that does not exist yet has nothing to read.
func (s *Service) logRange(ctx context.Context, topics []string) (map[string]map[int32]kgo.Offset, map[string]map[int32]int64, error) {
	adm := kadm.NewClient(s.deps.Kafka)
	starts, err := adm.ListStartOffsets(ctx, topics...)
	if err != nil {
		return nil, nil, fmt.Errorf("scheduler: rebuild: list start offsets: %w", err)
	}
	listed, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return nil, nil, fmt.Errorf("scheduler: rebuild: list end offsets: %w", err)
	}
	from := map[string]map[int32]kgo.Offset{}
	ends := map[string]map[int32]int64{}
	var lerr error
	listed.Each(func(lo kadm.ListedOffset) {
		if lo.Err != nil {
			if !errors.Is(lo.Err, kerr.UnknownTopicOrPartition) {
				lerr = errors.Join(lerr, fmt.Errorf("%s/%d: %w", lo.Topic, lo.Partition, lo.Err))
			}
			return
		}
		so, ok := starts.Lookup(lo.Topic, lo.Partition)
		if !ok || so.Err != nil || so.Offset >= lo.Offset {
			return
		}
		if from[lo.Topic] == nil {
			from[lo.Topic], ends[lo.Topic] = map[int32]kgo.Offset{}, map[int32]int64{}
		}
		from[lo.Topic][lo.Partition] = kgo.NewOffset().At(so.Offset)
		ends[lo.Topic][lo.Partition] = lo.Offset
	})
	if lerr != nil {
		return nil, nil, fmt.Errorf("scheduler: rebuild: list end offsets: %w", lerr)
	}
	return from, ends, nil
}

// readLog reads every partition of from up to its end in ends with a
// direct consumer and calls fold for each record before the end. It
// renews the rebuild lock meanwhile and fails once the lock is lost, so
// two replicas never rebuild at once.
func (s *Service) readLog(ctx context.Context, from map[string]map[int32]kgo.Offset, ends map[string]map[int32]int64, fold func(*kgo.Record)) error {
	left := map[string]map[int32]bool{} // partitions still to read
	for t, ps := range ends {
		left[t] = map[int32]bool{}
		for p := range ps {
			left[t][p] = true
		}
	}
	cl, err := kafkax.NewClient(s.deps.KafkaConfig("scheduler-rebuild"), kgo.ConsumePartitions(from), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		return fmt.Errorf("scheduler: rebuild: %w", err)
	}
	defer cl.Close()
	lastRenew := time.Now()
	for len(left) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		fs.EachError(func(t string, p int32, err error) {
			s.log.Warn("rebuild: fetch", "topic", t, "partition", p, "err", err)
		})
		fs.EachRecord(func(r *kgo.Record) {
			end := ends[r.Topic][r.Partition]
			if r.Offset < end {
				fold(r)
			}
			if r.Offset+1 >= end {
				delete(left[r.Topic], r.Partition)
				if len(left[r.Topic]) == 0 {
					delete(left, r.Topic)
				}
			}
		})
		if time.Since(lastRenew) > s.cfg.RebuildLockTTL/3 {
			if err := s.store.RenewLock(ctx, s.owner, s.cfg.RebuildLockTTL); err != nil {
				return fmt.Errorf("scheduler: rebuild: %w", err)
			}
			lastRenew = time.Now()
		}
	}
	return nil
}

func (s *Service) foldRecord(jobs map[string]*foldedJob, r *kgo.Record) {
	ev, err := schema.Decode(r)
	if err != nil {
		return
	}
	var ref schema.JobRef
	switch d := ev.Data.(type) {
	case schema.Dispatch:
		ref = d.JobRef
	case schema.Lifecycle:
		ref = d.Ref()
	default:
		return
	}
	j := jobs[ref.JobID]
	if j == nil {
		j = &foldedJob{tenant: ref.TenantID}
		jobs[ref.JobID] = j
	}
	switch d := ev.Data.(type) {
	case schema.Dispatch:
		j.handedOut = max(j.handedOut, d.Attempt)
	case schema.Enqueued:
		if j.enq == nil || d.Attempt > j.enq.Attempt {
			j.enq, j.enqTime, j.traceParent = &d, ev.Time, ev.TraceParent
		}
	case schema.Started:
		j.handedOut = max(j.handedOut, d.Attempt)
	case schema.Failed:
		if d.Error.Class == schema.ClassWorkerLost || d.Error.Class == schema.ClassCancelled {
			return // settled inside Redis, never a retry decision
		}
		if j.failed == nil || d.Attempt > j.failed.Attempt {
			j.failed = &d
		}
	case schema.Completed:
		j.done = true
	case schema.DeadLettered:
		j.dead = true
	case schema.Cancelled:
		if d.Reason != schema.ReasonSuperseded {
			j.cancel = true
		}
	}
}

type rebuildStats struct{ pending, inFlight, redecided, terminal int }

// inFlight reports whether the log shows the job's latest attempt handed
// to a worker and not ended (no failure of it; a completion made the job
// terminal), so the rebuild holds it for a lease. Not a job with a
// concurrency key: held, it would not hold its place under the key's
// limit, and others of the key would run beside it; it is re-queued at
// once as before, and the key's gate admits it again.
func (j *foldedJob) inFlight() bool {
	a := j.enq.Attempt
	return j.handedOut == a && (j.failed == nil || j.failed.Attempt != a) && j.enq.Job.Concurrency == nil
}

// later returns the later of a run_at (zero: none) and t.
func later(runAt, t time.Time) time.Time {
	if runAt.After(t) {
		return runAt
	}
	return t
}

// writeState writes the folded jobs into Redis and produces the decisions
// of failures that had none.
func (s *Service) writeState(ctx context.Context, jobs map[string]*foldedJob) (rebuildStats, error) {
	var st rebuildStats
	const chunk = 2000
	var b qstore.Batch
	failed := map[[2]string]schema.Failed{}
	flush := func() error {
		if b.Len() == 0 {
			return nil
		}
		now := s.cfg.Now()
		res, err := s.store.ApplyRebuild(ctx, now, &b)
		if err != nil {
			return err
		}
		out, err := s.decisions(res, failed, now)
		if err != nil {
			return err
		}
		if err := kafkax.ProduceAll(ctx, s.deps.Kafka, out...); err != nil {
			return fmt.Errorf("scheduler: rebuild: produce decisions: %w", err)
		}
		if err := s.store.RenewLock(ctx, s.owner, s.cfg.RebuildLockTTL); err != nil {
			return fmt.Errorf("scheduler: rebuild: %w", err)
		}
		b, failed = qstore.Batch{}, map[[2]string]schema.Failed{}
		return nil
	}
	for id, j := range jobs {
		switch {
		case j.done:
			b.Complete(id, j.tenant, "")
			st.terminal++
		case j.dead:
			b.Dead(id, j.tenant)
			st.terminal++
		case j.cancel:
			b.Cancel(id, j.tenant)
			st.terminal++
		case j.enq != nil:
			enq := *j.enq
			if j.inFlight() {
				enq.RunAt = later(enq.RunAt, s.cfg.Now().Add(s.cfg.Lease))
				st.inFlight++
			}
			if err := b.Enqueue(enq, j.enqTime); err != nil {
				s.log.Warn("rebuild: skipping job", "job_id", id, "err", err)
				continue
			}
			b.Trace(j.enq.JobRef, j.traceParent)
			st.pending++
			if f := j.failed; f != nil && f.Attempt == j.enq.Attempt && f.DispatchID != "" {
				b.Refail(id, f.DispatchID)
				failed[[2]string{id, f.DispatchID}] = *f
				st.redecided++
			}
		}
		if b.Len() >= chunk {
			if err := flush(); err != nil {
				return st, err
			}
		}
	}
	return st, flush()
}
