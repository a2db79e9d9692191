package api

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/auth"
	"github.com/ferryhq/ferry/services/api/internal/idem"
	"github.com/ferryhq/ferry/services/api/internal/store"
	"github.com/ferryhq/ferry/services/api/internal/submit"
	"github.com/ferryhq/ferry/services/api/internal/unique"
)

// pending is one item of a submission on its way to Kafka.
type pending struct {
	accepted submit.Accepted
	// claim is the Idempotency-Key this request holds until the job is
	// produced (nil without a key, or once the key turned out to be taken).
	claim *idem.Claim
	// replay: answered without a new job (a known key, or a refused one).
	replay bool
	rec    *kgo.Record
	// jobID is the new job's id once chosen (see submission.jobID).
	jobID string
	// uniqueHeld: this request holds the item's unique key in Redis
	// ("p:<jobID>") until the job is produced.
	uniqueHeld bool
}

// submission is one request's items through the steps of submit.
type submission struct {
	s        *Service
	tenant   string
	keyID    string
	settings auth.Settings
	now      time.Time
	items    []item
	out      []outcome
	per      []pending
	// done are keys whose job is known (the projection's, or produced now);
	// release and abandon are claims to free (see idem.Release, idem.Abandon).
	done             []idem.Finished
	release, abandon []idem.Claim
	produced         []int // item index of each record, in produce order
	accepted         int   // records acknowledged
	// twins maps a batch item to the earlier item with its unique key.
	twins map[int]int
	// uniqueSettle are the unique claims to settle at the end.
	uniqueSettle []unique.Swap
}

// submit validates, deduplicates and produces items: validate → claim keys →
// answer replays → claim unique keys → check limits → build records →
// produce → record. It
// returns an error only when the whole request fails: a store is
// unreachable, or the new jobs of the request would exceed the tenant's rate
// limit or queue limit (limits apply to a request all or nothing: no item is
// accepted).
func (s *Service) submit(ctx context.Context, settings auth.Settings, items []item) ([]outcome, error) {
	p, _ := auth.FromContext(ctx)
	b := &submission{s: s, tenant: p.TenantID, keyID: p.KeyID, settings: settings, items: items,
		now: s.cfg.Now().UTC().Truncate(time.Microsecond), out: make([]outcome, len(items)),
		per: make([]pending, len(items))}
	if err := b.validate(); err != nil {
		return nil, err
	}
	if err := b.claimKeys(ctx); err != nil {
		return nil, err
	}
	for _, step := range []func(context.Context) error{b.claimUnique, b.checkLimits, b.buildRecords} {
		if err := step(ctx); err != nil {
			b.releaseClaims(ctx)
			return nil, err
		}
	}
	b.produce(ctx)
	b.answerTwins()
	b.record(ctx)
	return b.out, nil
}

// validate checks every decoded item against the tenant's limits.
func (b *submission) validate() error {
	lim := submit.Limits{MaxPayloadBytes: b.s.maxPayload(b.settings), MaxAttemptsByType: b.s.cfg.MaxAttemptsByType, MaxDelay: b.s.cfg.MaxDelay}
	for i, it := range b.items {
		if it.err != nil {
			b.out[i].err = it.err
			continue
		}
		a, err := submit.Validate(it.req, b.now, lim)
		if err != nil {
			var inv *submit.Invalid
			if errors.As(err, &inv) {
				b.out[i].err = validationError(inv)
				continue
			}
			return err
		}
		if e := b.s.unknownType(a.Spec); e != nil { // workers.go
			b.out[i].err = e
			continue
		}
		b.per[i].accepted = it.fire.apply(a)
	}
	return nil
}

// claimKeys takes the items' Idempotency-Keys: Redis first, then the
// projection for keys Redis lacks; known keys are answered with their job.
func (b *submission) claimKeys(ctx context.Context) error {
	var claims []idem.Claim
	var idx []int
	for i, it := range b.items {
		if it.key != "" && b.out[i].err == nil {
			claims = append(claims, idem.Claim{Key: it.key, Hash: b.per[i].accepted.Hash, JobID: it.newJobID()})
			idx = append(idx, i)
		}
	}
	if len(claims) == 0 {
		return nil
	}
	res, err := b.s.idem.Claim(ctx, b.tenant, claims)
	if err != nil {
		b.s.log.ErrorContext(ctx, "idempotency claim failed", "tenant", b.tenant, "err", err)
		return errUnavailable
	}
	dedupIDs := map[int]string{}
	var fresh []string
	for ci, r := range res {
		i := idx[ci]
		switch r.Outcome {
		case idem.Claimed:
			c := claims[ci]
			c.JobID = r.JobID // an expired claim's job id, if any
			b.per[i].claim, fresh = &c, append(fresh, c.Key)
		case idem.InFlight:
			b.out[i].err, b.per[i].replay = errInFlight, true
		case idem.Reused:
			b.out[i].err, b.per[i].replay = errKeyReused, true
		case idem.Done:
			dedupIDs[i], b.per[i].replay = r.JobID, true
		}
	}
	if err := b.heldByProjection(ctx, fresh); err != nil {
		b.releaseClaims(ctx)
		return err
	}
	if len(dedupIDs) > 0 {
		if err := b.s.resolveDuplicates(ctx, b.tenant, b.per, dedupIDs, b.out, b.now); err != nil {
			b.releaseClaims(ctx)
			return err
		}
	}
	return nil
}

// heldByProjection answers freshly claimed keys the status projection
// already knows (Redis forgot them) with their job: such an item is a
// replay, not a new job.
func (b *submission) heldByProjection(ctx context.Context, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	held, err := b.s.store.ByIdempotencyKeys(ctx, b.tenant, keys)
	if err != nil {
		return err
	}
	for i := range b.per {
		c := b.per[i].claim
		if c == nil {
			continue
		}
		j, ok := held[c.Key]
		if !ok {
			continue
		}
		b.per[i].claim, b.per[i].replay = nil, true
		b.done = append(b.done, idem.Finished{Key: c.Key, Hash: j.RequestHash, JobID: j.ID})
		if j.RequestHash == c.Hash {
			b.out[i] = outcome{job: dedup(jobFromRow(j.Row, b.now))}
		} else {
			b.out[i].err = errKeyReused
		}
	}
	return nil
}

// creates reports whether item i becomes a new job.
func (b *submission) creates(i int) bool { return b.out[i].err == nil && !b.per[i].replay }

// checkLimits applies the tenant's limits to the jobs this request would
// create; replays and rejected items cost nothing.
func (b *submission) checkLimits(ctx context.Context) error {
	var queues []string
	for i := range b.items {
		if b.creates(i) {
			queues = append(queues, b.per[i].accepted.Spec.Queue)
		}
	}
	if len(queues) == 0 {
		return nil
	}
	return b.s.checkLimits(ctx, b.tenant, b.settings, queues)
}

// buildRecords mints each new job and its enqueued record; a record over
// the submit bound is refused here rather than failing the produce (and
// every retry of the client) or a later retry event.
func (b *submission) buildRecords(ctx context.Context) error {
	traceID := ""
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		traceID = sc.TraceID().String()
	}
	for i := range b.items {
		if !b.creates(i) {
			continue
		}
		pe := &b.per[i]
		ev := schema.Enqueued{
			// An idempotency claim's id: a retry after a lost request reuses it.
			JobRef:    schema.JobRef{JobID: b.jobID(i), TenantID: b.tenant, Attempt: 1},
			Job:       pe.accepted.Spec,
			CreatedAt: b.now, RunAt: pe.accepted.RunAt, Reason: schema.ReasonSubmitted, Actor: b.keyID,
			Unique: pe.accepted.Unique, ScheduleID: b.items[i].fire.scheduleID(),
		}
		if c := pe.claim; c != nil {
			ev.IdempotencyKey, ev.RequestHash = c.Key, c.Hash
		}
		rec, err := schema.NewRecord(b.s.deps.Topics.Lifecycle(schema.EventEnqueued), source, ev)
		if err != nil {
			return err
		}
		if schema.RecordBytes(rec) > schema.MaxSubmitRecordBytes {
			b.out[i] = outcome{err: errRecordTooLarge}
			b.releaseOne(i)
			continue
		}
		pe.rec = rec
		b.produced = append(b.produced, i)
		job := jobFromSubmission(ev.JobID, b.tenant, pe.accepted.Spec, b.now, pe.accepted.RunAt, traceID)
		job.Unique = pe.accepted.Unique
		job.ScheduleID = ev.ScheduleID
		f := false
		job.Deduplicated = &f
		b.out[i] = outcome{job: job, created: true}
	}
	return nil
}

// produceGroupTimeout bounds one group commit's produce: it runs on no
// request's context (one client going away must not fail the others'
// records), so it needs a bound of its own for a broker that never answers.
const produceGroupTimeout = 30 * time.Second

// cacheSubmitted is the group commit's side write: the resources of the
// group's new jobs, for reads that beat the projection. It runs beside the
// produce, so a job whose produce fails is cached too; harmless, since only
// the request that failed knew its id (an Idempotency-Key retry reuses the
// id and produces the same job).
func (s *Service) cacheSubmitted(ctx context.Context, groups []map[string][]byte) {
	if err := s.idem.CacheSubmitted(ctx, groups); err != nil {
		s.log.WarnContext(ctx, "submitted cache write failed", "err", err)
	}
}

// produce sends every new job in the next group commit and notes what each
// outcome means for its key.
func (b *submission) produce(ctx context.Context) {
	if len(b.produced) == 0 {
		return
	}
	recs := make([]*kgo.Record, len(b.produced))
	cache := make(map[string][]byte, len(b.produced))
	for k, i := range b.produced {
		recs[k] = b.per[i].rec
		cached := b.out[i].job
		cached.Deduplicated = nil
		cache[cached.ID], _ = json.Marshal(cached)
	}
	keyed := len(b.claimsHeld()) > 0
	b.s.testPause(ctx, pauseClaimed, keyed)
	errs := b.s.commit.Produce(ctx, cache, recs...)
	b.s.testPause(ctx, pauseProduced, keyed)
	for k, err := range errs {
		i := b.produced[k]
		c := b.per[i].claim
		if err != nil {
			b.s.log.ErrorContext(ctx, "produce enqueued failed", "tenant", b.tenant, "job_id", b.out[i].job.ID, "err", err)
			b.out[i] = outcome{err: errUnavailable}
			if c != nil {
				b.abandon = append(b.abandon, *c) // it may have reached Kafka
			}
			continue
		}
		if c != nil {
			b.done = append(b.done, idem.Finished{Key: c.Key, Hash: c.Hash, JobID: b.out[i].job.ID})
		}
		if b.per[i].uniqueHeld {
			b.uniqueSettle = append(b.uniqueSettle, b.uniqueSwap(i, true))
		}
		b.accepted++
		j := b.out[i].job
		b.s.log.DebugContext(ctx, "job submitted", "tenant", b.tenant, "job_id", j.ID, "type", j.Type, "queue", j.Queue)
	}
}

// record settles the keys in Redis and counts what this replica accepted
// until the cached count refreshes. The jobs are produced by now: a failure
// here is logged, and the projection remains the durable record.
func (b *submission) record(ctx context.Context) {
	if n := b.accepted; n > 0 {
		b.s.counts.Add(b.tenant, func(c store.Counts) store.Counts { c.Pending += int64(n); return c })
	}
	b.settleAnswered()
	bg := context.WithoutCancel(ctx)
	if err := b.s.idem.Release(bg, b.tenant, b.release); err != nil {
		b.s.log.WarnContext(ctx, "idempotency release failed", "tenant", b.tenant, "err", err)
	}
	if err := b.s.idem.Abandon(bg, b.tenant, b.abandon); err != nil {
		b.s.log.WarnContext(ctx, "idempotency release failed", "tenant", b.tenant, "err", err)
	}
	if err := b.s.idem.Complete(bg, b.tenant, b.done); err != nil {
		b.s.log.WarnContext(ctx, "idempotency completion failed", "tenant", b.tenant, "err", err)
	}
	if err := b.s.unique.Settle(bg, b.tenant, b.uniqueSettle, b.now); err != nil {
		b.s.log.WarnContext(ctx, "unique key settle failed", "tenant", b.tenant, "err", err)
	}
}

// claimsHeld are the keys this request still holds.
func (b *submission) claimsHeld() []idem.Claim {
	var out []idem.Claim
	for _, pe := range b.per {
		if pe.claim != nil {
			out = append(out, *pe.claim)
		}
	}
	return out
}

// releaseOne frees item i's keys at the end: its job is certainly not
// produced.
func (b *submission) releaseOne(i int) {
	pe := &b.per[i]
	if pe.claim != nil {
		b.release = append(b.release, *pe.claim)
		pe.claim = nil
	}
	if pe.uniqueHeld {
		b.uniqueSettle = append(b.uniqueSettle, b.uniqueSwap(i, false))
		pe.uniqueHeld = false
	}
}

// releaseClaims frees every key the request holds, and those already set
// aside for release, when it fails whole.
func (b *submission) releaseClaims(ctx context.Context) {
	bg := context.WithoutCancel(ctx)
	_ = b.s.idem.Release(bg, b.tenant, append(b.claimsHeld(), b.release...))
	for i := range b.per {
		if b.per[i].uniqueHeld {
			b.uniqueSettle = append(b.uniqueSettle, b.uniqueSwap(i, false))
		}
	}
	_ = b.s.unique.Settle(bg, b.tenant, b.uniqueSettle, b.now)
}
