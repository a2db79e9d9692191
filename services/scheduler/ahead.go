package scheduler

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/platform/quarantine"
	"github.com/ferryhq/ferry/services/scheduler/internal/qstore"
)

// decisionsAhead bounds the polled batches whose decision records may be on
// their way to the broker while the consumer applies the batches after them.
//
// Waiting for each batch's decisions (a retry or dead letter per failed
// attempt) before polling the next held every later record back by the
// produce's round trip: the failures and completions in them free worker
// slots, so a burst of failing jobs was dispatched at the pace of that
// wait (docs/performance.md, the retry workload).
const decisionsAhead = 8

// aheadBatch is a polled batch applied to Redis whose decisions are being
// produced.
type aheadBatch struct {
	recs []*kgo.Record
	left atomic.Int64
	mu   sync.Mutex
	err  error // the first produce error, read once done is closed
	done chan struct{}
}

// ended records the outcome of one of b's decision records; the last one
// calls release and closes done.
func (b *aheadBatch) ended(err error, release func()) {
	if err != nil {
		b.mu.Lock()
		if b.err == nil {
			b.err = err
		}
		b.mu.Unlock()
	}
	if b.left.Add(-1) == 0 {
		release()
		close(b.done)
	}
}

// decisionPipe marks applied batches for commit in the order they were
// polled, each once its decisions are acknowledged, so a committed offset
// never passes a record whose decision is not in Kafka. A batch whose
// decisions could not all be produced goes through the settler again
// (resettle): applying it again is idempotent (a failed attempt's template
// comes back and its decision is made anew), and the settler retries or
// parks it as it does any batch.
type decisionPipe struct {
	queue chan *aheadBatch
	// room holds a token per batch in the pipe, taken before the batch is
	// applied, so the consumer never waits for room while it holds the gate.
	room chan struct{}
	mu   sync.Mutex
	idle *sync.Cond
	n    int // batches in the pipe, not yet marked or settled
}

func newDecisionPipe() *decisionPipe {
	p := &decisionPipe{queue: make(chan *aheadBatch, decisionsAhead), room: make(chan struct{}, decisionsAhead)}
	p.idle = sync.NewCond(&p.mu)
	return p
}

// reserve waits for room for one more batch.
func (p *decisionPipe) reserve() {
	p.room <- struct{}{}
	p.mu.Lock()
	p.n++
	p.mu.Unlock()
}

// push hands batch recs, applied, to the pipe with its decisions out and
// produces them; release is called once every one is acknowledged or has
// failed. It never blocks: room was reserved.
func (p *decisionPipe) push(ctx context.Context, cl *kgo.Client, recs, out []*kgo.Record, release func()) {
	b := &aheadBatch{recs: recs, done: make(chan struct{})}
	p.queue <- b
	if len(out) == 0 {
		release()
		close(b.done)
		return
	}
	b.left.Store(int64(len(out)))
	for _, rec := range out {
		cl.Produce(ctx, rec, func(_ *kgo.Record, err error) { b.ended(err, release) })
	}
}

// run marks or re-settles the batches in order until stop.
func (p *decisionPipe) run(ctx context.Context, mark func(...*kgo.Record), resettle func(context.Context, []*kgo.Record) error) {
	for b := range p.queue {
		if b == nil {
			return
		}
		<-b.done
		if b.err != nil {
			// Nothing is marked; ctx ending meanwhile leaves the batch to
			// the group's next owner, as for any batch.
			_ = resettle(ctx, b.recs)
		} else {
			mark(b.recs...)
		}
		<-p.room
		p.mu.Lock()
		p.n--
		if p.n == 0 {
			p.idle.Broadcast()
		}
		p.mu.Unlock()
	}
}

// stop makes run return once every batch pushed before is marked or
// settled.
func (p *decisionPipe) stop() { p.queue <- nil }

// drain waits until every batch in the pipe is marked or settled.
func (p *decisionPipe) drain() {
	p.mu.Lock()
	for p.n > 0 {
		p.idle.Wait()
	}
	p.mu.Unlock()
}

// applyAhead applies recs to Redis under the gate and hands their decisions
// to the pipe; the gate is held until the decisions are acknowledged, so a
// rebuild never reads the log without a decision already applied (as a
// dispatch step holds it for its dispatches). A batch that fails to apply
// goes through the settler once every batch before it is marked: retried
// while the failure is transient, parked when it is not. It returns only
// ctx's error.
func (s *Service) applyAhead(ctx context.Context, settler *quarantine.Settler, recs []*kgo.Record) error {
	s.pipe.reserve()
	s.gate.RLock()
	out, err := s.apply(context.WithoutCancel(ctx), recs)
	if err == nil {
		s.pipe.push(context.WithoutCancel(ctx), s.deps.Kafka, recs, out, s.gate.RUnlock)
		return nil
	}
	s.gate.RUnlock()
	if errors.Is(err, qstore.ErrNoEpoch) {
		s.stateLost()
	}
	s.pipe.push(ctx, s.deps.Kafka, nil, nil, func() {}) // gives the reserved room back in order
	s.pipe.drain()
	return settler.Settle(ctx, recs)
}
