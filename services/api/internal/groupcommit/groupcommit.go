// Package groupcommit produces the records of concurrent submissions
// together: a request's records go out at once while fewer than a bound of
// produce calls are in flight; past the bound, requests wait and go out
// together in the next call a slot takes, as one ProduceSync of all their
// records (a group commit). Each request still learns the outcome of
// exactly its own records, only once they are acknowledged (or failed), so
// durability is the producer's (acks=all, idempotent): nothing changes but
// the number of produce calls.
//
// The bound is what trades latency against produce requests: with one call
// in flight a request that arrives during a produce waits for it to end and
// then for its own (1.5 round trips on average under steady load); with
// several, it waits only while every slot is busy. franz-go's idempotent
// producer keeps up to five produce requests in flight per broker, in order
// per partition, so concurrent calls keep each request's records in order.
package groupcommit

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"
)

// ProduceFunc produces records and returns one result per record, in order
// (kgo.Client.ProduceSync).
type ProduceFunc func(ctx context.Context, recs ...*kgo.Record) kgo.ProduceResults

// Committer groups the produces of concurrent requests, at most max
// produce calls at once: a request added while a slot is free goes out at
// once, with whatever else waits; added while every slot is busy, it waits
// and goes out with the requests added meanwhile, in the next group a slot
// takes. The zero value is not usable; see New.
type Committer struct {
	produce ProduceFunc
	timeout time.Duration
	max     int

	mu      sync.Mutex
	waiting []*request
	busy    int // slots running groups
}

// request is one caller's records and, once flushed, their results.
type request struct {
	// span is the caller's trace span: its records carry its traceparent.
	span trace.Span
	recs []*kgo.Record
	errs []error
	done chan struct{} // closed once errs is set
}

// ErrGroupTimeout fails the records of a group whose produce outlived the
// committer's timeout.
var ErrGroupTimeout = errors.New("groupcommit: produce timed out")

// New returns a committer over produce with at most inflight produce calls
// at once; inflight below 1 counts as 1. timeout bounds one group's produce
// (it runs on no request's context, so that one caller going away cannot
// fail the records of the others).
func New(produce ProduceFunc, timeout time.Duration, inflight int) *Committer {
	return &Committer{produce: produce, timeout: timeout, max: max(inflight, 1)}
}

// Produce sends recs in the next group and returns one error per record
// (nil: acknowledged). When ctx ends first it returns ctx's error for every
// record: they may still be produced, exactly as when a produce call is
// cancelled mid-flight.
func (c *Committer) Produce(ctx context.Context, recs ...*kgo.Record) []error {
	if len(recs) == 0 {
		return nil
	}
	r := &request{span: trace.SpanFromContext(ctx), recs: recs, done: make(chan struct{})}
	c.add(r)
	select {
	case <-r.done:
		return r.errs
	case <-ctx.Done():
		errs := make([]error, len(recs))
		for i := range errs {
			errs[i] = ctx.Err()
		}
		return errs
	}
}

// add queues r and takes a free slot for it, if there is one.
func (c *Committer) add(r *request) {
	c.mu.Lock()
	c.waiting = append(c.waiting, r)
	start := c.busy < c.max
	if start {
		c.busy++
	}
	c.mu.Unlock()
	if start {
		go c.drain()
	}
}

// drain produces the waiting requests, one group at a time, until none are
// left, then frees its slot.
func (c *Committer) drain() {
	for {
		c.mu.Lock()
		group := c.waiting
		c.waiting = nil
		if len(group) == 0 {
			c.busy--
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		c.flushRecords(group)
	}
}

// flushRecords produces one group's records and hands every request its own
// results.
func (c *Committer) flushRecords(group []*request) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	answerGroup(group, c.produce(ctx, c.collect(ctx, group)...))
}

// collect gathers the group's records. Each record is produced under the
// group's deadline but in its own request's trace, so the job keeps the
// trace of the request that submitted it (the producer's hooks inject the
// traceparent from the record's context).
func (c *Committer) collect(ctx context.Context, group []*request) []*kgo.Record {
	var recs []*kgo.Record
	for _, r := range group {
		rctx := trace.ContextWithSpan(ctx, r.span)
		for _, rec := range r.recs {
			if rec.Context == nil {
				rec.Context = rctx
			}
		}
		recs = append(recs, r.recs...)
	}
	return recs
}

// answerGroup hands every request of a produced group its own records'
// results. ProduceSync lists results in the order the records completed,
// not the order they were given: they are matched by record.
func answerGroup(group []*request, results kgo.ProduceResults) {
	errs := make(map[*kgo.Record]error, len(results))
	for _, res := range results {
		errs[res.Record] = res.Err
	}
	for _, r := range group {
		r.errs = make([]error, len(r.recs))
		for i, rec := range r.recs {
			r.errs[i] = resultErr(errs, rec)
		}
		close(r.done)
	}
}

// resultErr is the error of rec: ErrGroupTimeout (joined with the cause)
// when the group outlived its timeout or the producer gave no result.
func resultErr(errs map[*kgo.Record]error, rec *kgo.Record) error {
	err, ok := errs[rec]
	switch {
	case !ok:
		return ErrGroupTimeout
	case errors.Is(err, context.DeadlineExceeded):
		return errors.Join(ErrGroupTimeout, err)
	}
	return err
}
