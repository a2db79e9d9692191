package projection

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/platform/kafkax"
)

// ErrBehind is Barrier.Wait's error when the projection did not reach the
// log's end within the barrier's timeout.
var ErrBehind = errors.New("projection: behind the log")

// Barrier lets a reader of a projection read its own writes without a cache
// on the write path: Wait returns once the projection has applied every
// record its topic held when Wait was called. A job acknowledged before a
// read (a 202 before the GET) is in the topic, so after Wait the
// projection has it, or it does not exist.
//
// Concurrent waiters share rounds: a round lists the topic's end (and
// start) offsets once, then polls the projection's stored offsets
// (ferry_offsets) until they reach them. Waiters arriving while a round
// runs join the next one, which lists the offsets again after they arrived.
// So a flood of reads costs two ListOffsets per round and one small query
// per poll, not one per read.
type Barrier struct {
	pool    *pgxpool.Pool
	adm     *kadm.Client
	group   string
	topic   string
	poll    time.Duration
	timeout time.Duration

	mu      sync.Mutex
	next    *round // the round waiters join; nil when none is waiting
	running bool   // a goroutine runs rounds
}

// round is one catch-up shared by its waiters.
type round struct {
	done chan struct{}
	err  error
}

// BarrierConfig configures NewBarrier.
type BarrierConfig struct {
	// Group is the projection's Config.Group: where its offsets are stored.
	Group string
	// Topic is the topic whose records the reader must see: the one its
	// writes are produced to (the api: jobs.enqueued).
	Topic string
	// Poll is how often a round reads the stored offsets. Defaults to 10ms.
	Poll time.Duration
	// Timeout bounds a round: past it the round's waiters get ErrBehind.
	// Defaults to 5s.
	Timeout time.Duration
}

// NewBarrier returns a barrier for the projection that stores its offsets
// in pool under cfg.Group; cl lists the topic's offsets.
func NewBarrier(pool *pgxpool.Pool, cl *kgo.Client, cfg BarrierConfig) *Barrier {
	if cfg.Poll <= 0 {
		cfg.Poll = 10 * time.Millisecond
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	return &Barrier{pool: pool, adm: kadm.NewClient(cl), group: cfg.Group, topic: cfg.Topic, poll: cfg.Poll, timeout: cfg.Timeout}
}

// Wait returns nil once the projection has applied every record of the
// topic written before the call, ErrBehind when it did not within the
// barrier's timeout, or ctx's error when ctx ends first.
func (b *Barrier) Wait(ctx context.Context) error {
	b.mu.Lock()
	r := b.next
	if r == nil {
		r = &round{done: make(chan struct{})}
		b.next = r
	}
	if !b.running {
		b.running = true
		go b.run()
	}
	b.mu.Unlock()
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run runs rounds, one at a time, while waiters join them.
func (b *Barrier) run() {
	for {
		b.mu.Lock()
		r := b.next
		b.next = nil
		if r == nil {
			b.running = false
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		r.err = b.catchUp()
		close(r.done)
	}
}

// catchUp waits until the stored offsets reach the topic's end offsets as
// listed now: until the projection has nothing left to process of what the
// topic held (kafkax.Unprocessed, the rule of the consumer lag gauge too).
func (b *Barrier) catchUp() error {
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	defer cancel()
	ends, err := b.adm.ListEndOffsets(ctx, b.topic)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return fmt.Errorf("projection: barrier: %w", err)
	}
	starts, err := b.adm.ListStartOffsets(ctx, b.topic)
	if err != nil {
		return fmt.Errorf("projection: barrier: %w", err)
	}
	tick := time.NewTicker(b.poll)
	defer tick.Stop()
	for {
		stored, err := StoredOffsets(ctx, b.pool, b.group)
		switch {
		case ctx.Err() != nil:
			return ErrBehind
		case err != nil:
			return fmt.Errorf("projection: barrier: %w", err)
		case len(kafkax.Unprocessed(ends, starts, stored)) == 0:
			return nil
		}
		select {
		case <-ctx.Done():
			return ErrBehind
		case <-tick.C:
		}
	}
}
