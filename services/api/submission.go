package api

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/ferryhq/ferry/events/schema"
	"github.com/ferryhq/ferry/platform/auth"
	"github.com/ferryhq/ferry/platform/jobs"
	"github.com/ferryhq/ferry/services/api/internal/idem"
	"github.com/ferryhq/ferry/services/api/internal/store"
	"github.com/ferryhq/ferry/services/api/internal/unique"
)

// pending is what a request holds for one item on its way to Kafka.
type pending struct {
	accepted jobs.Accepted
	// claim is the Idempotency-Key this request holds until the job is
	// produced (nil without a key, or once the key turned out to be taken).
	claim *idem.Claim
	// replay: answered without a new job (a known key, or a refused one).
	replay bool
	rec    *kgo.Record
	// jobID is the new job's id once chosen (see entry.assignedID), or the
	// earlier job a finished Idempotency-Key names.
	jobID string
	// uniqueHeld: this request holds the item's unique key in Redis
	// ("p:<jobID>") until the job is produced.
	uniqueHeld bool
	// twinOf is the earlier item of the batch with the same unique key,
	// whose answer this item shares (answerTwins).
	twinOf *entry
}

// entry is one item of a request through the steps of submit: what was
// asked, what the request holds for it, and its answer.
type entry struct {
	item
	pending
	out outcome
}

// submission is one request's items through the steps of submit.
type submission struct {
	s        *Service
	tenant   string
	keyID    string
	settings auth.Settings
	now      time.Time
	entries  []*entry
	// done are keys whose job is known (the projection's, or produced now);
	// release and abandon are claims to free (see idem.Release, idem.Abandon).
	done             []idem.Finished
	release, abandon []idem.Claim
	produced         []*entry // the entries with a record, in produce order
	accepted         int      // records acknowledged
	// uniqueSettle are the unique claims to settle at the end.
	uniqueSettle []unique.Swap
}

// submit validates, deduplicates and produces items: validate → claim keys →
// answer replays → claim unique keys → check limits → build records →
// produce → record. It returns each item's outcome, in order, or an error
// only when the whole request fails: a store is unreachable, or the new
// jobs of the request would exceed the tenant's rate limit or queue limit
// (limits apply to a request all or nothing: no item is accepted).
func (s *Service) submit(ctx context.Context, settings auth.Settings, items []item) ([]outcome, error) {
	p, _ := auth.FromContext(ctx)
	b := &submission{s: s, tenant: p.TenantID, keyID: p.KeyID, settings: settings,
		now: s.cfg.Now().UTC().Truncate(time.Microsecond), entries: make([]*entry, len(items))}
	for i, it := range items {
		b.entries[i] = &entry{item: it}
	}
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
	out := make([]outcome, len(b.entries))
	for i, e := range b.entries {
		out[i] = e.out
	}
	return out, nil
}

// validate checks every decoded item against the tenant's limits.
func (b *submission) validate() error {
	lim := jobs.TenantLimits(b.settings, b.s.jobDefaults())
	for _, e := range b.entries {
		if e.item.err != nil {
			e.out.err = e.item.err
			continue
		}
		a, err := jobs.Validate(e.req, b.now, lim)
		if err != nil {
			var inv *jobs.Invalid
			if errors.As(err, &inv) {
				e.out.err = inv.HTTPError()
				continue
			}
			return err
		}
		if he := b.s.unknownType(a.Spec); he != nil { // workers.go
			e.out.err = he
			continue
		}
		e.accepted = e.fire.apply(a)
	}
	return nil
}

// claimKeys takes the items' Idempotency-Keys: Redis first, then the
// projection for keys Redis lacks; known keys are answered with their job.
func (b *submission) claimKeys(ctx context.Context) error {
	var keyed []*entry
	for _, e := range b.entries {
		if e.key != "" && e.out.err == nil {
			keyed = append(keyed, e)
		}
	}
	if len(keyed) == 0 {
		return nil
	}
	claims := make([]idem.Claim, len(keyed))
	for k, e := range keyed {
		claims[k] = idem.Claim{Key: e.key, Hash: jobs.Hash(e.req), JobID: e.newJobID()}
	}
	res, err := b.s.idem.Claim(ctx, b.tenant, claims) // one result per claim, in order
	if err != nil {
		b.s.log.ErrorContext(ctx, "idempotency claim failed", "tenant", b.tenant, "err", err)
		return errUnavailable
	}
	var dups []*entry
	var fresh []string
	for k, r := range res {
		e := keyed[k]
		switch r.Outcome {
		case idem.Claimed:
			c := claims[k]
			c.JobID = r.JobID // an expired claim's job id, if any
			e.claim, fresh = &c, append(fresh, c.Key)
		case idem.InFlight:
			e.out.err, e.replay = errInFlight, true
		case idem.Reused:
			e.out.err, e.replay = errKeyReused, true
		case idem.Done:
			e.jobID, e.replay = r.JobID, true
			dups = append(dups, e)
		}
	}
	if err := b.heldByProjection(ctx, fresh); err != nil {
		b.releaseClaims(ctx)
		return err
	}
	if err := b.resolveDuplicates(ctx, dups); err != nil {
		b.releaseClaims(ctx)
		return err
	}
	return nil
}

// resolveDuplicates answers items whose key names a finished job with that
// job: from the projection, else rebuilt from the (identical) request, as
// it was submitted; a replay does not wait for the projection.
func (b *submission) resolveDuplicates(ctx context.Context, dups []*entry) error {
	if len(dups) == 0 {
		return nil
	}
	ids := make([]string, 0, len(dups))
	for _, e := range dups {
		ids = append(ids, e.jobID)
	}
	rows, err := b.s.store.GetMany(ctx, b.tenant, ids)
	if err != nil {
		return err
	}
	for _, e := range dups {
		if row, ok := rows[e.jobID]; ok {
			e.out = outcome{job: jobFromRow(row.Row, b.now).Deduplicate(true)}
		} else {
			e.out = outcome{job: jobs.Submitted(e.jobID, b.tenant, e.accepted.Spec, b.now, e.accepted.RunAt).Deduplicate(true)}
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
	for _, e := range b.entries {
		c := e.claim
		if c == nil {
			continue
		}
		j, ok := held[c.Key]
		if !ok {
			continue
		}
		e.claim, e.replay = nil, true
		b.done = append(b.done, idem.Finished{Key: c.Key, Hash: j.RequestHash, JobID: j.ID})
		if j.RequestHash == c.Hash {
			e.out = outcome{job: jobFromRow(j.Row, b.now).Deduplicate(true)}
		} else {
			e.out.err = errKeyReused
		}
	}
	return nil
}

// creates reports whether the entry becomes a new job.
func (e *entry) creates() bool { return e.out.err == nil && !e.replay }

// checkLimits applies the tenant's limits to the jobs this request would
// create; replays and rejected items cost nothing.
func (b *submission) checkLimits(ctx context.Context) error {
	var queues []string
	for _, e := range b.entries {
		if e.creates() {
			queues = append(queues, e.accepted.Spec.Queue)
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
	for _, e := range b.entries {
		if !e.creates() {
			continue
		}
		ev := schema.Enqueued{
			// An idempotency claim's id: a retry after a lost request reuses it.
			JobRef:    schema.JobRef{JobID: e.assignedID(), TenantID: b.tenant, Attempt: 1},
			Job:       e.accepted.Spec,
			CreatedAt: b.now, RunAt: e.accepted.RunAt, Reason: schema.ReasonSubmitted, Actor: b.keyID,
			Unique: e.accepted.Unique, ScheduleID: e.fire.scheduleID(),
		}
		if c := e.claim; c != nil {
			ev.IdempotencyKey, ev.RequestHash = c.Key, c.Hash
		}
		rec, err := schema.NewRecord(b.s.deps.Topics.Lifecycle(schema.EventEnqueued), source, ev)
		if err != nil {
			return err
		}
		if schema.RecordBytes(rec) > schema.MaxSubmitRecordBytes {
			e.out = outcome{err: errRecordTooLarge}
			b.releaseOne(e)
			continue
		}
		e.rec = rec
		b.produced = append(b.produced, e)
		job := jobs.Submitted(ev.JobID, b.tenant, e.accepted.Spec, b.now, e.accepted.RunAt)
		job.TraceID, job.Unique, job.ScheduleID = traceID, e.accepted.Unique, ev.ScheduleID
		e.out = outcome{job: job.Deduplicate(false), created: true}
	}
	return nil
}

// produceGroupTimeout bounds one group commit's produce: it runs on no
// request's context (one client going away must not fail the others'
// records), so it needs a bound of its own for a broker that never answers.
const produceGroupTimeout = 30 * time.Second

// produce sends every new job in the next group commit and notes what each
// outcome means for its key.
func (b *submission) produce(ctx context.Context) {
	if len(b.produced) == 0 {
		return
	}
	recs := make([]*kgo.Record, len(b.produced))
	for k, e := range b.produced {
		recs[k] = e.rec
	}
	keyed := len(b.claimsHeld()) > 0
	b.s.testPause(ctx, pauseClaimed, keyed)
	errs := b.s.commit.Produce(ctx, recs...) // one error per record, in order
	b.s.testPause(ctx, pauseProduced, keyed)
	for k, err := range errs {
		b.settleProduced(ctx, b.produced[k], err)
	}
}

// settleProduced notes what the produce of e's record means for its keys:
// a failed produce abandons its Idempotency-Key (the record may have
// reached Kafka); a produced job completes it and keeps its unique key.
func (b *submission) settleProduced(ctx context.Context, e *entry, err error) {
	c := e.claim
	if err != nil {
		b.s.log.ErrorContext(ctx, "produce enqueued failed", "tenant", b.tenant, "job_id", e.out.job.ID, "err", err)
		e.out = outcome{err: errUnavailable}
		if c != nil {
			b.abandon = append(b.abandon, *c)
		}
		return
	}
	if c != nil {
		b.done = append(b.done, idem.Finished{Key: c.Key, Hash: c.Hash, JobID: e.out.job.ID})
	}
	if e.uniqueHeld {
		b.uniqueSettle = append(b.uniqueSettle, e.uniqueSwap(true))
	}
	b.accepted++
	j := e.out.job
	b.s.log.DebugContext(ctx, "job submitted", "tenant", b.tenant, "job_id", j.ID, "type", j.Type, "queue", j.Queue)
}

// record settles the keys in Redis and counts what this replica accepted
// until the cached count refreshes. The jobs are produced by now: a failure
// here is logged, and the projection remains the durable record.
func (b *submission) record(ctx context.Context) {
	if n := b.accepted; n > 0 {
		b.s.counts.Update(b.tenant, func(c store.Counts) store.Counts { c.Pending += int64(n); return c })
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
	for _, e := range b.entries {
		if e.claim != nil {
			out = append(out, *e.claim)
		}
	}
	return out
}

// releaseOne frees e's keys at the end: its job is certainly not
// produced.
func (b *submission) releaseOne(e *entry) {
	if e.claim != nil {
		b.release = append(b.release, *e.claim)
		e.claim = nil
	}
	if e.uniqueHeld {
		b.uniqueSettle = append(b.uniqueSettle, e.uniqueSwap(false))
		e.uniqueHeld = false
	}
}

// releaseClaims frees every key the request holds, and those already set
// aside for release, when it fails whole.
func (b *submission) releaseClaims(ctx context.Context) {
	bg := context.WithoutCancel(ctx)
	_ = b.s.idem.Release(bg, b.tenant, append(b.claimsHeld(), b.release...))
	for _, e := range b.entries {
		if e.uniqueHeld {
			b.uniqueSettle = append(b.uniqueSettle, e.uniqueSwap(false))
		}
	}
	_ = b.s.unique.Settle(bg, b.tenant, b.uniqueSettle, b.now)
}
