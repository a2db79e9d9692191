// Package groupcommit produces the records of concurrent submissions
// together: requests that arrive while a produce is in flight wait and go
// out in the next one, as one ProduceSync of all their records (a group
// commit). Each request still learns the outcome of exactly its own
// records, only once they are acknowledged (or failed), so durability is
// the producer's (acks=all, idempotent): nothing changes but the number of
// produce calls and of the side writes done beside them.
//
// When no produce is in flight a request's records go out at once: the
// group commit adds no wait to an idle broker.
//
// Each request may carry a side value; beside each produce, alongside (when
// set) runs once with the side values of the whole group, concurrently with
// the produce: the api caches the group's just-submitted job resources in
// Redis there, one pipeline per group instead of one round trip per request.
// A request is answered once its records are acknowledged and its group's
// side write is done; the next group's produce does not wait for that side
// write, only for the produce before it.
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

// Committer groups concurrent produces of requests carrying side values of
// type S. The zero value is not usable; see New.
type Committer[S any] struct {
	produce   ProduceFunc
	alongside func(ctx context.Context, sides []S)
	timeout   time.Duration

	mu      sync.Mutex
	waiting []*request[S]
	busy    bool // a flush goroutine runs
}

// request is one caller's records and, once flushed, their results.
type request[S any] struct {
	// span is the caller's trace span: its records carry its traceparent.
	span trace.Span
	recs []*kgo.Record
	side S
	errs []error
	done chan struct{}
}

// ErrGroupTimeout fails the records of a group whose produce outlived the
// committer's timeout.
var ErrGroupTimeout = errors.New("groupcommit: produce timed out")

// New returns a committer over produce. alongside, if not nil, runs once
// per group with the side values of all its requests, concurrently with
// their produce (so whether or not the records get acknowledged); it must
// not keep the slice. timeout bounds one group's produce (it runs
// on no request's context, so that one caller going away cannot fail the
// records of the others).
func New[S any](produce ProduceFunc, alongside func(ctx context.Context, sides []S), timeout time.Duration) *Committer[S] {
	return &Committer[S]{produce: produce, alongside: alongside, timeout: timeout}
}

// Produce sends recs, with side, in the next group and returns one error per record
// (nil: acknowledged). When ctx ends first it returns ctx's error for every
// record: they may still be produced, exactly as when a produce call is
// cancelled mid-flight.
func (c *Committer[S]) Produce(ctx context.Context, side S, recs ...*kgo.Record) []error {
	if len(recs) == 0 {
		return nil
	}
	r := &request[S]{span: trace.SpanFromContext(ctx), recs: recs, side: side, done: make(chan struct{})}
	c.mu.Lock()
	c.waiting = append(c.waiting, r)
	if !c.busy {
		c.busy = true
		go c.flushLoop()
	}
	c.mu.Unlock()
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

// flushLoop flushes the waiting requests, one group at a time, until none
// are left.
func (c *Committer[S]) flushLoop() {
	for {
		c.mu.Lock()
		group := c.waiting
		c.waiting = nil
		if len(group) == 0 {
			c.busy = false
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		c.flush(group)
	}
}

// flush produces one group and has every request answered with its own
// results once the group's side write is done too. It returns as soon as
// the produce does: the next group's produce need not wait for this one's
// side write, only its requests' answers do.
func (c *Committer[S]) flush(group []*request[S]) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	recs, sides := c.collect(ctx, group)
	sideDone := make(chan struct{})
	if c.alongside != nil {
		go func() {
			defer close(sideDone)
			c.alongside(ctx, sides)
		}()
	} else {
		close(sideDone)
	}
	results := c.produce(ctx, recs...)
	answer := func() {
		<-sideDone
		answerGroup(group, results)
		cancel() // after the answers: releasing the deadline is no request's business
	}
	select {
	case <-sideDone:
		answer()
	default:
		go answer()
	}
}

// collect gathers the group's records and side values. Each record is
// produced under the group's deadline but in its own request's trace, so
// the job keeps the trace of the request that submitted it (the producer's
// hooks inject the traceparent from the record's context).
func (c *Committer[S]) collect(ctx context.Context, group []*request[S]) ([]*kgo.Record, []S) {
	var recs []*kgo.Record
	sides := make([]S, len(group))
	for i, r := range group {
		rctx := trace.ContextWithSpan(ctx, r.span)
		for _, rec := range r.recs {
			if rec.Context == nil {
				rec.Context = rctx
			}
		}
		recs, sides[i] = append(recs, r.recs...), r.side
	}
	return recs, sides
}

// answerGroup hands every request of a produced group its own records'
// results. ProduceSync lists results in the order the records completed,
// not the order they were given: they are matched by record.
func answerGroup[S any](group []*request[S], results kgo.ProduceResults) {
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
