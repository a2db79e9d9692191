package projection

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// A projection that reads several topics gets them as the broker answers
// its fetches: up to a byte limit per partition. Behind on a backlog, a
// topic of small records (a job's started and completed events) is read
// further in time per fetch than one of large records (its enqueued event,
// which carries the job's specification and payload), and the gap grows
// with every fetch. The status projection then meets a job's start long
// before its enqueued event: it creates the row from the start and
// rewrites it whole when the enqueued event arrives, a second update that
// moves the row's indexed columns (not HOT), for most of a backlog's jobs
// (docs/performance-history.md, Round 28). Nothing is wrong, only costly: the
// merge rules take events in any order.
//
// aligner keeps a consumer's topics level in time. Of each fetch it hands
// out only the records no later than the newest record of every partition
// still behind its end (the frontier), merged in time across partitions,
// and holds the rest; a partition holding a batch's worth is paused, so the
// ones behind are fetched alone until they catch up (pausing drops what
// the client buffered of it, to be fetched again: not worth it for a
// partition only a little ahead). The merge also puts a job's start and
// its outcome, two topics, in one batch more often: one row write, not
// two. A partition's records keep their offset order: behind one held
// record every later one of its partition is held too (the projections
// skip offsets below the ones they were given). No record is held longer
// than maxHold after it was polled, whatever the frontier says.
type aligner struct {
	maxHold time.Duration
	now     func() time.Time

	pauseAt int // held records that pause a partition: a batch

	mu    sync.Mutex // the rebalance callbacks forget partitions
	parts map[topicPartition]*partitionState
	held  []heldRecord // in the order polled
}

// heldRecord is a record held back, with when it was polled.
type heldRecord struct {
	rec   *kgo.Record
	since time.Time
}

type topicPartition struct {
	topic     string
	partition int32
}

// partitionState is what the aligner knows of one partition.
type partitionState struct {
	newest time.Time // timestamp of the newest record polled from it
	behind bool      // its last poll ended short of its high watermark
	held   int       // its records held
	paused bool      // the aligner paused its fetching
}

// newAligner holds a record at most maxHold and pauses a partition once it
// holds pauseAt of its records (the consumer's batch).
func newAligner(maxHold time.Duration, pauseAt int) *aligner {
	return &aligner{maxHold: maxHold, pauseAt: max(pauseAt, 1), now: time.Now, parts: map[topicPartition]*partitionState{}}
}

// alignHold is how long an aligner may hold a record back: twice a
// fetch's wait, so a partition behind gets two fetches to catch up.
func alignHold(fetchMaxWait time.Duration) time.Duration { return 2 * fetchMaxWait }

// poll takes every fetch the client has buffered and returns the records
// the aligner lets through now (more than a batch: the caller splits
// them), having paused or resumed partitions for the next poll. It takes
// whole fetches, not a batch's worth of records, so that every partition a
// fetch answered for is seen at once: a partition not yet seen bounds
// nothing. While it holds records the poll waits no longer than they may
// be held. Nil once ctx is done.
func (a *aligner) poll(ctx context.Context, cl *kgo.Client, group string, log *slog.Logger) []*kgo.Record {
	pctx, cancel := ctx, context.CancelFunc(func() {})
	if d, ok := a.holding(); ok {
		pctx, cancel = context.WithTimeout(ctx, d)
	}
	fetches := cl.PollFetches(pctx)
	cancel()
	if ctx.Err() != nil {
		return nil
	}
	logFetchErrors(fetches, group, log)
	recs := a.take(fetches)
	a.pace(cl)
	return recs
}

// take adds a poll's records and returns those to apply now, merged in
// time across partitions (mergeByTime).
func (a *aligner) take(fetches kgo.Fetches) []*kgo.Record {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	fetches.EachPartition(func(p kgo.FetchTopicPartition) {
		if len(p.Records) == 0 {
			return
		}
		st := a.state(topicPartition{p.Topic, p.Partition})
		last := p.Records[len(p.Records)-1]
		st.newest, st.behind = last.Timestamp, last.Offset+1 < p.HighWatermark
		for _, r := range p.Records {
			a.held = append(a.held, heldRecord{r, now})
		}
	})
	frontier, bounded := a.frontier()
	if !bounded {
		return a.releaseAll()
	}
	return a.release(frontier, now)
}

// frontier is the newest record time of the partitions behind their end
// that are furthest back; false when none is behind.
func (a *aligner) frontier() (time.Time, bool) {
	var f time.Time
	bounded := false
	for _, st := range a.parts {
		if st.behind && (!bounded || st.newest.Before(f)) {
			f, bounded = st.newest, true
		}
	}
	return f, bounded
}

// release hands out the held records up to frontier and those held for
// maxHold, keeping each partition's order, and holds the rest.
func (a *aligner) release(frontier, now time.Time) []*kgo.Record {
	out := make([]*kgo.Record, 0, len(a.held))
	kept := a.held[:0]
	for _, st := range a.parts {
		st.held = 0
	}
	for _, h := range a.held {
		st := a.parts[topicPartition{h.rec.Topic, h.rec.Partition}]
		if st.held > 0 || (h.rec.Timestamp.After(frontier) && now.Sub(h.since) < a.maxHold) {
			st.held++
			kept = append(kept, h)
			continue
		}
		out = append(out, h.rec)
	}
	clear(a.held[len(kept):]) // no references past the kept records
	a.held = kept
	return mergeByTime(out)
}

// releaseAll hands out every held record.
func (a *aligner) releaseAll() []*kgo.Record {
	out := make([]*kgo.Record, len(a.held))
	for i, h := range a.held {
		out[i] = h.rec
	}
	a.held = a.held[:0]
	for _, st := range a.parts {
		st.held = 0
	}
	return mergeByTime(out)
}

// mergeByTime orders recs by time across partitions, each partition's
// records staying in their order: the caller cuts the result into
// batches, and a record must not land in a batch before one that came
// earlier in time from another topic. A merge of the partitions' runs, not
// a sort: a partition's timestamps need not rise with its offsets.
func mergeByTime(recs []*kgo.Record) []*kgo.Record {
	runs := map[topicPartition][]*kgo.Record{}
	var order []topicPartition
	for _, r := range recs {
		tp := topicPartition{r.Topic, r.Partition}
		if runs[tp] == nil {
			order = append(order, tp)
		}
		runs[tp] = append(runs[tp], r)
	}
	if len(order) < 2 {
		return recs
	}
	out := recs[:0]
	for {
		var next topicPartition
		found := false
		for _, tp := range order {
			run := runs[tp]
			if len(run) > 0 && (!found || run[0].Timestamp.Before(runs[next][0].Timestamp)) {
				next, found = tp, true
			}
		}
		if !found {
			return out
		}
		out = append(out, runs[next][0])
		runs[next] = runs[next][1:]
	}
}

// holding reports how long the next poll may wait before the oldest held
// record is due (maxHold after it was polled); false when none is held.
func (a *aligner) holding() (time.Duration, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.held) == 0 {
		return 0, false
	}
	return max(a.maxHold-a.now().Sub(a.held[0].since), 0), true
}

// pace pauses the fetching of the partitions the aligner holds a batch's
// worth of records of (pauseAt), and resumes those it paused once it holds
// none.
func (a *aligner) pace(cl *kgo.Client) {
	a.mu.Lock()
	pause, resume := map[string][]int32{}, map[string][]int32{}
	for tp, st := range a.parts {
		switch {
		case st.held >= a.pauseAt && !st.paused:
			st.paused = true
			pause[tp.topic] = append(pause[tp.topic], tp.partition)
		case st.held == 0 && st.paused:
			st.paused = false
			resume[tp.topic] = append(resume[tp.topic], tp.partition)
		}
	}
	a.mu.Unlock()
	if len(pause) > 0 {
		cl.PauseFetchPartitions(pause)
	}
	if len(resume) > 0 {
		cl.ResumeFetchPartitions(resume)
	}
}

// forget drops what the aligner holds and knows of partitions the consumer
// gave up (revoked or lost) and resumes their fetching: whoever owns them
// next reads them again from the stored offsets.
func (a *aligner) forget(cl *kgo.Client, ps map[string][]int32) {
	a.mu.Lock()
	gone := map[topicPartition]bool{}
	for t, parts := range ps {
		for _, p := range parts {
			gone[topicPartition{t, p}] = true
			delete(a.parts, topicPartition{t, p})
		}
	}
	kept := a.held[:0]
	for _, h := range a.held {
		if !gone[topicPartition{h.rec.Topic, h.rec.Partition}] {
			kept = append(kept, h)
		}
	}
	clear(a.held[len(kept):])
	a.held = kept
	a.mu.Unlock()
	if cl != nil && len(ps) > 0 {
		cl.ResumeFetchPartitions(ps)
	}
}

func (a *aligner) state(tp topicPartition) *partitionState {
	st := a.parts[tp]
	if st == nil {
		st = &partitionState{}
		a.parts[tp] = st
	}
	return st
}
