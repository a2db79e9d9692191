package api

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/ferryhq/ferry/platform/httpx"
	"github.com/ferryhq/ferry/services/api/internal/idem"
	"github.com/ferryhq/ferry/services/api/internal/store"
	"github.com/ferryhq/ferry/services/api/internal/unique"
)

// uniqueWait bounds how long a submission waits for another request that
// claimed its unique key and has not produced its job yet (a produce takes
// milliseconds); after it the item answers 409 unique_key_in_flight.
const uniqueWait = 3 * time.Second

var errUniqueInFlight = &httpx.Error{Status: http.StatusConflict, Code: "unique_key_in_flight",
	Message: "another request holding this unique key is still being processed; retry", RetryAfter: time.Second}

// claimUnique takes the unique keys of the items that would create jobs.
// An item whose key another job holds (per Redis, checked against the
// projection, or per the projection when Redis has no claim) is answered
// with that job; a later item of the batch with the key of an earlier one
// is answered with the earlier one's job (see answerTwins).
func (b *submission) claimUnique(ctx context.Context) error {
	want := b.uniqueItems()
	stale := map[string]string{} // key → claim value found stale, to replace
	deadline := time.Now().Add(uniqueWait)
	for pause := 5 * time.Millisecond; len(want) > 0; pause = min(2*pause, 200*time.Millisecond) {
		retryNow, err := b.uniqueRound(ctx, want, stale)
		if err != nil {
			return err
		}
		if len(want) == 0 {
			break
		}
		if time.Now().After(deadline) {
			for _, i := range want {
				b.out[i].err, b.per[i].replay = errUniqueInFlight, true
			}
			break
		}
		if !retryNow {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(pause):
			}
		}
	}
	return nil
}

// uniqueItems maps each unique key of the request to the first item that
// would create a job with it, noting later items with the same key as its
// twins.
func (b *submission) uniqueItems() map[string]int {
	want := map[string]int{}
	for i := range b.items {
		u := b.per[i].accepted.Unique
		if u == nil || !b.creates(i) {
			continue
		}
		if first, ok := want[u.Key]; ok {
			if b.twins == nil {
				b.twins = map[int]int{}
			}
			b.twins[i], b.per[i].replay = first, true
			continue
		}
		want[u.Key] = i
	}
	return want
}

// uniqueRound claims the keys still wanted in one round trip and settles
// what it can: keys claimed (unless the projection knows a holder), keys
// whose holder still holds them. It leaves in want the keys held in flight
// and those whose claim was found stale (retryNow: claim them again at once).
func (b *submission) uniqueRound(ctx context.Context, want map[string]int, stale map[string]string) (retryNow bool, err error) {
	claims := make([]unique.Claim, 0, len(want))
	for key, i := range want {
		claims = append(claims, unique.Claim{Key: key, JobID: b.jobID(i), Replace: stale[key]})
	}
	res, err := b.s.unique.Claim(ctx, b.tenant, claims)
	if err != nil {
		b.s.log.ErrorContext(ctx, "unique key claim failed", "tenant", b.tenant, "err", err)
		return false, errUnavailable
	}
	var fresh []string
	held := map[string]unique.Result{}
	for k, r := range res {
		key := claims[k].Key
		switch {
		case r.Claimed:
			fresh = append(fresh, key)
			b.per[want[key]].uniqueHeld = true
		case !r.InFlight:
			held[key] = r
		}
	}
	if err := b.heldUnique(ctx, want, fresh); err != nil {
		return false, err
	}
	return b.checkHolders(ctx, want, held, stale)
}

// heldUnique settles freshly claimed keys: one the projection knows a
// holder of (Redis forgot its claim) answers with that job, and its claim
// is pointed at it; the others are this request's.
func (b *submission) heldUnique(ctx context.Context, want map[string]int, fresh []string) error {
	if len(fresh) == 0 {
		return nil
	}
	holders, err := b.s.store.HoldingUnique(ctx, b.tenant, fresh, b.now)
	if err != nil {
		b.s.log.ErrorContext(ctx, "unique key lookup failed", "tenant", b.tenant, "err", err)
		return errUnavailable
	}
	var repair []unique.Swap
	for _, key := range fresh {
		i := want[key]
		delete(want, key)
		j, ok := holders[key]
		if !ok {
			continue
		}
		b.per[i].uniqueHeld = false
		b.answerWith(i, jobFromRow(j.Row, b.now))
		repair = append(repair, unique.Swap{Key: key, From: unique.Pending(b.per[i].jobID), To: unique.Produced(j.ID), Until: *j.UniqueUntil})
	}
	if err := b.s.unique.Settle(context.WithoutCancel(ctx), b.tenant, repair, b.now); err != nil {
		b.s.log.WarnContext(ctx, "unique key repair failed", "tenant", b.tenant, "err", err)
	}
	return nil
}

// checkHolders answers items whose key is claimed by a produced job that
// still holds it (per the projection, or just submitted and not projected
// yet) with that job; a claim whose job no longer holds the key is stale
// and claimed again in the next round.
func (b *submission) checkHolders(ctx context.Context, want map[string]int, held map[string]unique.Result, stale map[string]string) (retryNow bool, err error) {
	if len(held) == 0 {
		return false, nil
	}
	ids := make([]string, 0, len(held))
	for _, r := range held {
		ids = append(ids, r.JobID)
	}
	rows, cached, err := b.s.findJobs(ctx, b.tenant, ids, b.now)
	if err != nil {
		return false, err
	}
	for key, r := range held {
		i := want[key]
		row, projected := rows[r.JobID]
		job, recent := cached[r.JobID]
		switch {
		case projected && row.HoldsUnique(b.now):
			b.answerWith(i, jobFromRow(row.Row, b.now))
		case !projected && recent:
			b.answerWith(i, job) // just submitted: where every state starts
		case !projected && !idOlderThan(r.JobID, b.now, b.s.cfg.SubmittedTTL):
			continue // produced, not projected, not cached: wait for the projection
		default:
			stale[key], retryNow = r.Value, true
			continue
		}
		delete(want, key)
	}
	return retryNow, nil
}

// answerWith answers item i with the job holding its unique key.
func (b *submission) answerWith(i int, j Job) {
	b.out[i], b.per[i].replay = outcome{job: dedup(j)}, true
}

// answerTwins answers each later batch item with a unique key of an earlier
// item as that item was answered: its job, deduplicated, or its error.
func (b *submission) answerTwins() {
	for i, first := range b.twins {
		if o := b.out[first]; o.err != nil {
			b.out[i] = outcome{err: o.err}
		} else {
			b.out[i] = outcome{job: dedup(o.job)}
		}
	}
}

// settleAnswered ends the Idempotency-Key claims of items answered by their
// unique key, which create no job: the key then names the job the item was
// answered with (a retry of the request gets the same answer), or is freed
// when the item was answered with an error.
func (b *submission) settleAnswered() {
	for i := range b.per {
		c := b.per[i].claim
		if c == nil || !b.per[i].replay {
			continue
		}
		if o := b.out[i]; o.err == nil {
			b.done = append(b.done, idem.Finished{Key: c.Key, Hash: c.Hash, JobID: o.job.ID})
		} else {
			b.release = append(b.release, *c)
		}
		b.per[i].claim = nil
	}
}

// jobID is the id item i's job gets: its idempotency claim's, else one
// minted once.
func (b *submission) jobID(i int) string {
	pe := &b.per[i]
	switch {
	case pe.claim != nil:
		pe.jobID = pe.claim.JobID
	case pe.jobID == "":
		pe.jobID = b.items[i].newJobID()
	}
	return pe.jobID
}

// uniqueSwaps are the claim changes at the end of a request: a produced
// job's claim holds until the key's end; a claim of an item certainly not
// produced is freed (released true). A failed produce leaves its claim to
// expire with its lease: the job may have reached Kafka, and the
// projection will know it by then.
func (b *submission) uniqueSwap(i int, produced bool) unique.Swap {
	pe := &b.per[i]
	sw := unique.Swap{Key: pe.accepted.Unique.Key, From: unique.Pending(pe.jobID)}
	if produced {
		sw.To, sw.Until = unique.Produced(pe.jobID), pe.accepted.Unique.Until
	}
	return sw
}

// idOlderThan reports whether the UUIDv7 job id was minted more than d
// before now (true when the id carries no time).
func idOlderThan(jobID string, now time.Time, d time.Duration) bool {
	u, err := uuid.Parse(strings.TrimPrefix(jobID, "job_"))
	if err != nil || u.Version() != 7 {
		return true
	}
	sec, nsec := u.Time().UnixTime()
	return now.Sub(time.Unix(sec, nsec)) > d
}

// findJobs loads jobs of tenant by id: the projection's rows, and for ids
// it lacks, the cached resources of just-submitted jobs.
func (s *Service) findJobs(ctx context.Context, tenant string, ids []string, now time.Time) (map[string]store.Job, map[string]Job, error) {
	rows, err := s.store.GetMany(ctx, tenant, ids)
	if err != nil {
		return nil, nil, err
	}
	var missing []string
	for _, id := range ids {
		if _, ok := rows[id]; !ok {
			missing = append(missing, id)
		}
	}
	cached := map[string]Job{}
	raw, err := s.idem.Submitted(ctx, missing...)
	if err != nil {
		s.log.WarnContext(ctx, "submitted cache read failed", "tenant", tenant, "err", err)
		return rows, cached, nil
	}
	for id, b := range raw {
		if j, ok := cachedJob(b, tenant, now); ok {
			cached[id] = j
		}
	}
	return rows, cached, nil
}
