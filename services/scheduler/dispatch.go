package scheduler

import (
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/services/scheduler/internal/qstore"
)

// produceTimeout bounds the produce of one dispatch step.
const produceTimeout = 10 * time.Second

// idleTickMax caps the fallback tick of a pool whose steps dispatch nothing.
// Every event that can make a job dispatchable wakes the loop (the
// consumer's Apply, a rebuild, a queue or breaker change) or is a due time
// the step reports (delays, leases, gate refills), so the tick only bounds
// what a missed wake could cost. At a constant 5 ms an idle scheduler ran
// 400 empty steps a second over its two pools: ~7,800 Redis commands a
// second and a fifth of a core with no job in sight.
const idleTickMax = 100 * time.Millisecond

// nextTick is the fallback tick after a step that dispatched n jobs: Tick
// while jobs flow, doubling per empty step up to idleTickMax (or Tick, if
// that is longer).
func (s *Service) nextTick(prev time.Duration, n int) time.Duration {
	if n > 0 || prev <= 0 {
		return s.cfg.Tick
	}
	return min(2*prev, max(idleTickMax, s.cfg.Tick))
}

// dispatchLoop runs dispatch steps for pool: at once when woken by the
// consumer, at the next due time or lease deadline (its own steps', or an
// earlier one of the consumer's steps: applyAndStep), and on the fallback
// tick (nextTick).
func (s *Service) dispatchLoop(ctx context.Context, pool string) error {
	var fallback time.Duration
	tick := time.NewTimer(time.Hour)
	defer tick.Stop()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	l := s.loops[pool]
	for {
		if ctx.Err() != nil {
			return nil
		}
		// The step reads the state after the consumer's steps offered their
		// next due times so far: its own next times cover them.
		l.next.take()
		res, err := s.stepGated(ctx, pool)
		l.dispatched(s.cfg.Now(), len(res.Dispatched))
		fallback = s.nextTick(fallback, len(res.Dispatched))
		if errors.Is(err, qstore.ErrNoEpoch) {
			// Wait for the rebuild; it wakes every loop when done.
			s.stateLost()
			select {
			case <-ctx.Done():
				return nil
			case <-l.wake:
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
		if !s.awaitStep(ctx, l, earliest(res.NextDue, res.NextLease), fallback, timer, tick) {
			return nil
		}
	}
}

// awaitStep waits for the loop's next step: a wake, the next due time
// (next, or an earlier one the consumer's steps offer meanwhile), or the
// fallback tick. False when ctx ended.
func (s *Service) awaitStep(ctx context.Context, l *poolLoop, next time.Time, fallback time.Duration, timer, tick *time.Timer) bool {
	l.waiting.Store(true)
	defer l.waiting.Store(false)
	defer timer.Stop()
	defer tick.Stop()
	arm := func() {
		if !next.IsZero() {
			// Scores are whole ms; wake just after the due ms begins.
			timer.Reset(max(next.Sub(s.cfg.Now()), 0))
		}
	}
	arm()
	tick.Reset(fallback)
	for {
		select {
		case <-ctx.Done():
			return false
		case <-l.wake:
			return true
		case <-timer.C:
			return true
		case <-tick.C:
			return true
		case <-l.next.ch:
			if t := l.next.take(); !t.IsZero() && (next.IsZero() || t.Before(next)) {
				next = t
				arm()
			}
		}
	}
}

// rateTau is the time constant of a pool's dispatch rate estimate.
const rateTau = 500 * time.Millisecond

// rateEstimate is an exponentially decaying estimate of a pool's dispatch
// rate (jobs/s); only its dispatch loop uses it.
type rateEstimate struct {
	perSec float64
	at     time.Time
}

// decayed is the estimate at now.
func (r *rateEstimate) decayed(now time.Time) float64 {
	if r.at.IsZero() || !now.After(r.at) {
		return r.perSec
	}
	return r.perSec * math.Exp(-float64(now.Sub(r.at))/float64(rateTau))
}

// add counts n jobs dispatched at now.
func (r *rateEstimate) add(now time.Time, n int) {
	r.perSec = r.decayed(now) + float64(n)/rateTau.Seconds()
	r.at = now
}

// prefetch is the pool's allowance beyond its live slots for the next step:
// Prefetch, plus what it dispatched in the last PrefetchWindow (bandwidth ×
// round trip), so the window grows with the rate jobs complete at and a pool
// of slow jobs stays at Prefetch.
func (s *Service) prefetch(l *poolLoop) int {
	if s.cfg.PrefetchWindow <= 0 {
		return s.cfg.basePrefetch()
	}
	extra := l.rateAt(s.cfg.Now()) * s.cfg.PrefetchWindow.Seconds()
	return s.cfg.basePrefetch() + int(min(extra, float64(s.cfg.PrefetchMax)))
}

// stepGated is step under the shared gate: never during a rebuild. The gate
// is held until the step's records are acknowledged (see step).
func (s *Service) stepGated(ctx context.Context, pool string) (qstore.DispatchResult, error) {
	s.gate.RLock()
	return s.step(ctx, pool, sync.OnceFunc(s.gate.RUnlock))
}

// stepRecords are the records of a dispatch step: a dispatch per leased
// job and a dead letter per expired one, each with the template it came
// from (in res, which the records' owner map points into); a job whose
// dispatch cannot be encoded is to be released.
func (s *Service) stepRecords(pool string, res qstore.DispatchResult) ([]*kgo.Record, recordOwners, qstore.Batch) {
	topic := s.deps.Topics.Dispatch(pool)
	recs := make([]*kgo.Record, 0, len(res.Dispatched)+len(res.Expired))
	owner := make(recordOwners, cap(recs))
	var release qstore.Batch
	for i := range res.Dispatched {
		t := &res.Dispatched[i]
		rec, err := schema.NewRecord(topic, Source, schema.Dispatch{
			JobRef:     schema.JobRef{JobID: t.JobID, TenantID: t.TenantID, Attempt: t.Attempt},
			DispatchID: t.DispatchID,
			Job:        t.Job,
			CreatedAt:  t.CreatedAt,
			ReadyAt:    t.ReadyAt,
			LeaseUntil: t.LeaseUntil.UTC(),
			NotBefore:  notBefore(t),
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
	for i := range res.Expired {
		t := &res.Expired[i]
		rec, err := s.deadLetter(*t, schema.ErrorInfo{Class: schema.ClassExpired, Message: "not_after passed before the job could start"}, t.History, now)
		if err != nil {
			s.log.Error("encode dlq", "job_id", t.JobID, "err", err)
			continue
		}
		recs = append(recs, rec)
		owner[rec] = t
	}
	return recs, owner, release
}

// recordOwners are the templates a dispatch step's records were made from,
// by record: pointers, as a step's templates (each with its job's spec)
// are large to copy into a map.
type recordOwners map[*kgo.Record]*qstore.Template

// notBefore is the not_before of t's dispatch: its due time when it was
// leased ahead of it (Config.Lookahead), else none. Redis orders due times
// by whole milliseconds, rounded up, so t.NotBefore is up to 1 ms after the
// job's run_at; the job's ready time (t.ReadyAt, its exact run_at when it
// was delayed) within that millisecond is the due time the worker waits
// for, so a held job starts at its run_at, not up to 1 ms after it.
func notBefore(t *qstore.Template) *time.Time {
	if t.NotBefore.IsZero() {
		return nil
	}
	nb := t.NotBefore.UTC()
	if early := nb.Sub(t.ReadyAt); early > 0 && early < time.Millisecond {
		nb = t.ReadyAt.UTC()
	}
	return &nb
}

// step runs one dispatch step of pool, with the dispatches its window
// allows beyond its live slots (prefetch), and hands out what it leased
// (handOut). done is called exactly once, on every path.
func (s *Service) step(ctx context.Context, pool string, done func()) (qstore.DispatchResult, error) {
	// Once the step starts it runs to the end: a reply lost to a cancel
	// would leave jobs leased but never handed out until their lease expires.
	ctx = context.WithoutCancel(ctx)
	res, err := s.store.Dispatch(ctx, s.stepParams(pool))
	if err != nil {
		done()
		return res, err
	}
	s.handOut(ctx, pool, res, done)
	return res, nil
}

// handOut produces the records of a step's result without waiting for
// them: the loop can lease the next jobs while they are acknowledged. Once
// every record is acknowledged (or failed), a goroutine releases the jobs
// whose dispatch could not be produced and acknowledges the expired jobs'
// dead letters, then calls done. done is called exactly once, on every
// path.
func (s *Service) handOut(ctx context.Context, pool string, res qstore.DispatchResult, done func()) {
	ctx = context.WithoutCancel(ctx)
	if len(res.Dispatched) == 0 && len(res.Expired) == 0 {
		done()
		return
	}
	// Leased jobs are handed out even if ctx ends now; a lost produce is
	// released below or recovered when the lease expires.
	pctx, cancel := context.WithTimeout(ctx, produceTimeout)
	recs, owner, release := s.stepRecords(pool, res)
	s.observeDispatch(pctx, pool, res, recs, owner) // traces and metrics (observe.go)
	routeDispatches(pctx, recs, owner)              // to a worker handling the type (route.go)

	var (
		mu   sync.Mutex
		acks qstore.Batch
		left atomic.Int64
	)
	finish := func() {
		defer s.produces.Done()
		defer done()
		cancel()
		actx, cancelA := context.WithTimeout(ctx, produceTimeout)
		defer cancelA()
		for _, b := range []*qstore.Batch{&release, &acks} {
			if b.Len() == 0 {
				continue
			}
			ar, err := s.store.Apply(actx, s.cfg.Now(), b)
			if errors.Is(err, qstore.ErrNoEpoch) {
				s.stateLost() // the rebuild recovers these jobs from their leases
				return
			}
			if err != nil {
				s.log.Error("dispatch step: settling produce results", "pool", pool, "err", err)
				return
			}
			s.wakePools(ar.Wake, nil)
		}
	}
	s.produces.Add(1)
	if len(recs) == 0 {
		finish()
		return
	}
	left.Store(int64(len(recs)))
	for _, rec := range recs {
		s.deps.Kafka.Produce(pctx, rec, func(r *kgo.Record, err error) {
			t := owner[r]
			mu.Lock()
			switch {
			case err != nil && t.DispatchID != "":
				s.log.Warn("produce dispatch", "job_id", t.JobID, "err", err)
				release.Release(t.JobID, t.DispatchID)
			case err != nil:
				s.log.Warn("produce dlq", "job_id", t.JobID, "err", err)
			case t.DispatchID == "":
				acks.AckExpired(pool, t.JobID)
			}
			mu.Unlock()
			if left.Add(-1) == 0 {
				go finish() // never block the client's promise goroutine on Redis
			}
		})
	}
}
