package api

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"time"

	"github.com/ferryhq/ferry/platform/httpx"
	"github.com/ferryhq/ferry/platform/jobs"
	"github.com/ferryhq/ferry/platform/projection"
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
			for _, e := range want {
				e.out.err, e.replay = errUniqueInFlight, true
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
func (b *submission) uniqueItems() map[string]*entry {
	want := map[string]*entry{}
	for _, e := range b.entries {
		u := e.accepted.Unique
		if u == nil || !e.creates() {
			continue
		}
		if first, ok := want[u.Key]; ok {
			e.twinOf, e.replay = first, true
			continue
		}
		want[u.Key] = e
	}
	return want
}

// uniqueRound claims the keys still wanted in one round trip and settles
// what it can: keys claimed (unless the projection knows a holder), keys
// whose holder still holds them. It leaves in want the keys held in flight
// and those whose claim was found stale (retryNow: claim them again at once).
func (b *submission) uniqueRound(ctx context.Context, want map[string]*entry, stale map[string]string) (retryNow bool, err error) {
	claims := make([]unique.Claim, 0, len(want))
	for key, e := range want {
		claims = append(claims, unique.Claim{Key: key, JobID: e.assignedID(), Replace: stale[key]})
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
			want[key].uniqueHeld = true
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
func (b *submission) heldUnique(ctx context.Context, want map[string]*entry, fresh []string) error {
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
		e := want[key]
		delete(want, key)
		j, ok := holders[key]
		if !ok {
			continue
		}
		e.uniqueHeld = false
		e.answerWith(jobFromRow(j.Row, b.now))
		repair = append(repair, unique.Swap{Key: key, From: unique.Pending(e.jobID), To: unique.Produced(j.ID), Until: *j.UniqueUntil})
	}
	if err := b.s.unique.Settle(context.WithoutCancel(ctx), b.tenant, repair, b.now); err != nil {
		b.s.log.WarnContext(ctx, "unique key repair failed", "tenant", b.tenant, "err", err)
	}
	return nil
}

// checkHolders answers items whose key is claimed by a produced job that
// still holds it (per the projection, which findJobs waits for when the job
// is new) with that job; a claim whose job no longer holds the key is stale
// and claimed again in the next round.
func (b *submission) checkHolders(ctx context.Context, want map[string]*entry, held map[string]unique.Result, stale map[string]string) (retryNow bool, err error) {
	if len(held) == 0 {
		return false, nil
	}
	ids := make([]string, 0, len(held))
	for _, r := range held {
		ids = append(ids, r.JobID)
	}
	rows, err := b.s.findJobs(ctx, b.tenant, ids, b.now)
	if err != nil && !errors.Is(err, errNotVisibleYet) {
		return false, err
	}
	for key, r := range held {
		e := want[key]
		row, projected := rows[r.JobID]
		switch {
		case projected && row.HoldsUnique(b.now):
			e.answerWith(jobFromRow(row.Row, b.now))
		case !projected && b.s.mintedRecently(r.JobID, b.now):
			continue // produced, the projection far behind: wait for it
		default:
			stale[key], retryNow = r.Value, true
			continue
		}
		delete(want, key)
	}
	return retryNow, nil
}

// answerWith answers e with the job holding its unique key.
func (e *entry) answerWith(j Job) {
	e.out, e.replay = outcome{job: j.Deduplicate(true)}, true
}

// answerTwins answers each later batch item with a unique key of an earlier
// item as that item was answered: its job, deduplicated, or its error.
func (b *submission) answerTwins() {
	for _, e := range b.entries {
		switch first := e.twinOf; {
		case first == nil:
		case first.out.err != nil:
			e.out = outcome{err: first.out.err}
		default:
			e.out = outcome{job: first.out.job.Deduplicate(true)}
		}
	}
}

// settleAnswered ends the Idempotency-Key claims of items answered by their
// unique key, which create no job: the key then names the job the item was
// answered with (a retry of the request gets the same answer), or is freed
// when the item was answered with an error.
func (b *submission) settleAnswered() {
	for _, e := range b.entries {
		c := e.claim
		if c == nil || !e.replay {
			continue
		}
		if e.out.err == nil {
			b.done = append(b.done, idem.Finished{Key: c.Key, Hash: c.Hash, JobID: e.out.job.ID})
		} else {
			b.release = append(b.release, *c)
		}
		e.claim = nil
	}
}

// assignedID is the id e's new job gets: its idempotency claim's, else one
// minted once.
func (e *entry) assignedID() string {
	switch {
	case e.claim != nil:
		e.jobID = e.claim.JobID
	case e.jobID == "":
		e.jobID = e.newJobID()
	}
	return e.jobID
}

// uniqueSwaps are the claim changes at the end of a request: a produced
// job's claim holds until the key's end; a claim of an item certainly not
// produced is freed (released true). A failed produce leaves its claim to
// expire with its lease: the job may have reached Kafka, and the
// projection will know it by then.
func (e *entry) uniqueSwap(produced bool) unique.Swap {
	sw := unique.Swap{Key: e.accepted.Unique.Key, From: unique.Pending(e.jobID)}
	if produced {
		sw.To, sw.Until = unique.Produced(e.jobID), e.accepted.Unique.Until
	}
	return sw
}

// findJobs loads jobs of tenant by id from the status projection. When it
// lacks a job minted within Config.FreshWindow (submitted moments ago,
// perhaps), it first waits for the projection to apply everything written
// before the call (Service.visible), so a read after a 202 sees the job.
// errNotVisibleYet: the projection was still behind after
// Config.VisibleWait (or the barrier could not list the topic's offsets);
// the rows it has are returned with it.
func (s *Service) findJobs(ctx context.Context, tenant string, ids []string, now time.Time) (map[string]store.Job, error) {
	rows, err := s.store.GetMany(ctx, tenant, ids)
	if err != nil {
		return nil, err
	}
	var fresh []string
	for _, id := range ids {
		if _, ok := rows[id]; !ok && s.mintedRecently(id, now) {
			fresh = append(fresh, id)
		}
	}
	if len(fresh) == 0 {
		return rows, nil
	}
	if err := s.visible.Wait(ctx); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !errors.Is(err, projection.ErrBehind) { // e.g. the broker unreachable
			s.log.WarnContext(ctx, "read barrier failed", "tenant", tenant, "err", err)
		}
		return rows, errNotVisibleYet
	}
	more, err := s.store.GetMany(ctx, tenant, fresh)
	if err != nil {
		return nil, err
	}
	maps.Copy(rows, more)
	return rows, nil
}

// mintedRecently reports whether the job id was minted within
// Config.FreshWindow of now (either side: clocks differ between replicas).
func (s *Service) mintedRecently(id string, now time.Time) bool {
	w := s.cfg.FreshWindow
	return !jobs.MintedBefore(id, now.Add(-w)) && jobs.MintedBefore(id, now.Add(w))
}
