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
	submitted        map[string][]byte
}

// submit validates, deduplicates and produces items: validate → claim keys →
// answer replays → check limits → build records → produce → record. It
// returns an error only when the whole request fails: a store is
// unreachable, or the new jobs of the request would exceed the tenant's rate
// limit or queue limit (limits apply to a request all or nothing: no item is
// accepted).
func (s *Service) submit(ctx context.Context, settings auth.Settings, items []item) ([]outcome, error) {
	p, _ := auth.FromContext(ctx)
	b := &submission{s: s, tenant: p.TenantID, keyID: p.KeyID, settings: settings, items: items,
		now: s.cfg.Now().UTC().Truncate(time.Microsecond), out: make([]outcome, len(items)),
		per: make([]pending, len(items)), submitted: map[string][]byte{}}
	if err := b.validate(); err != nil {
		return nil, err
	}
	if err := b.claimKeys(ctx); err != nil {
		return nil, err
	}
	for _, step := range []func(context.Context) error{b.checkLimits, b.buildRecords} {
		if err := step(ctx); err != nil {
			b.releaseClaims(ctx)
			return nil, err
		}
	}
	b.produce(ctx)
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
		b.per[i].accepted = a
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
			claims = append(claims, idem.Claim{Key: it.key, Hash: b.per[i].accepted.Hash, JobID: "job_" + schema.NewEventID()})
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
			JobRef:    schema.JobRef{JobID: "job_" + schema.NewEventID(), TenantID: b.tenant, Attempt: 1},
			Job:       pe.accepted.Spec,
			CreatedAt: b.now, RunAt: pe.accepted.RunAt, Reason: schema.ReasonSubmitted, Actor: b.keyID,
		}
		if c := pe.claim; c != nil {
			// The claim's id: a retry after a lost request reuses it.
			ev.JobID, ev.IdempotencyKey, ev.RequestHash = c.JobID, c.Key, c.Hash
		}
		rec, err := schema.NewRecord(b.s.deps.Topics.Lifecycle(schema.EventEnqueued), source, ev)
		if err != nil {
			return err
		}
		if schema.RecordBytes(rec) > schema.MaxSubmitRecordBytes {
			b.out[i] = outcome{err: errRecordTooLarge}
			b.releaseOne(pe)
			continue
		}
		pe.rec = rec
		b.produced = append(b.produced, i)
		job := jobFromSubmission(ev.JobID, b.tenant, pe.accepted.Spec, b.now, pe.accepted.RunAt, traceID)
		f := false
		job.Deduplicated = &f
		b.out[i] = outcome{job: job, created: true}
	}
	return nil
}

// produce sends every new job in one call and notes what each outcome means
// for its key.
func (b *submission) produce(ctx context.Context) {
	if len(b.produced) == 0 {
		return
	}
	recs := make([]*kgo.Record, len(b.produced))
	for k, i := range b.produced {
		recs[k] = b.per[i].rec
	}
	keyed := len(b.claimsHeld()) > 0
	b.s.testPause(ctx, pauseClaimed, keyed)
	results := b.s.deps.Kafka.ProduceSync(ctx, recs...)
	b.s.testPause(ctx, pauseProduced, keyed)
	for k, res := range results {
		i := b.produced[k]
		c := b.per[i].claim
		if res.Err != nil {
			b.s.log.ErrorContext(ctx, "produce enqueued failed", "tenant", b.tenant, "job_id", b.out[i].job.ID, "err", res.Err)
			b.out[i] = outcome{err: errUnavailable}
			if c != nil {
				b.abandon = append(b.abandon, *c) // it may have reached Kafka
			}
			continue
		}
		if c != nil {
			b.done = append(b.done, idem.Finished{Key: c.Key, Hash: c.Hash, JobID: b.out[i].job.ID})
		}
		cached := b.out[i].job
		cached.Deduplicated = nil
		enc, _ := json.Marshal(cached)
		b.submitted[cached.ID] = enc
		b.s.log.DebugContext(ctx, "job submitted", "tenant", b.tenant, "job_id", cached.ID, "type", cached.Type, "queue", cached.Queue)
	}
}

// record settles the keys in Redis and counts what this replica accepted
// until the cached count refreshes. The jobs are produced by now: a failure
// here is logged, and the projection remains the durable record.
func (b *submission) record(ctx context.Context) {
	if produced := len(b.submitted); produced > 0 {
		b.s.counts.Add(b.tenant, func(c store.Counts) store.Counts { c.Pending += int64(produced); return c })
	}
	bg := context.WithoutCancel(ctx)
	if err := b.s.idem.Release(bg, b.tenant, b.release); err != nil {
		b.s.log.WarnContext(ctx, "idempotency release failed", "tenant", b.tenant, "err", err)
	}
	if err := b.s.idem.Abandon(bg, b.tenant, b.abandon); err != nil {
		b.s.log.WarnContext(ctx, "idempotency release failed", "tenant", b.tenant, "err", err)
	}
	if err := b.s.idem.Complete(bg, b.tenant, b.done, b.submitted); err != nil {
		b.s.log.WarnContext(ctx, "idempotency completion failed", "tenant", b.tenant, "err", err)
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

// releaseOne frees item pe's key at the end: its job is certainly not
// produced.
func (b *submission) releaseOne(pe *pending) {
	if pe.claim != nil {
		b.release = append(b.release, *pe.claim)
		pe.claim = nil
	}
}

// releaseClaims frees every key the request holds, and those already set
// aside for release, when it fails whole.
func (b *submission) releaseClaims(ctx context.Context) {
	_ = b.s.idem.Release(context.WithoutCancel(ctx), b.tenant, append(b.claimsHeld(), b.release...))
}
