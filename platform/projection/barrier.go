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
// Concurrent waiters share rounds: a round lists the topic's end offsets
// once, then polls the projection's stored offsets (ferry_offsets) until
// they reach them. Waiters arriving while a round runs join the next one,
// which lists the end offsets again after they arrived. So a flood of reads
// costs one ListOffsets and one small query per poll, not one per read.
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
// listed now.
func (b *Barrier) catchUp() error {
	ctx, cancel := context.WithTimeout(context.Background(), b.timeout)
	defer cancel()
	ends, err := b.adm.ListEndOffsets(ctx, b.topic)
	if err != nil {
		return fmt.Errorf("projection: barrier: %w", err)
	}
	if err := ends.Error(); err != nil {
		return fmt.Errorf("projection: barrier: %w", err)
	}
	want := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			want[o.Partition] = o.Offset
		}
	})
	for {
		left, err := b.behind(ctx, want)
		if err != nil || len(left) == 0 {
			return err
		}
		select {
		case <-ctx.Done():
			return ErrBehind
		case <-time.After(b.poll):
		}
	}
}

// behind reads the stored offsets and returns the partitions of want the
// projection has not reached. A partition it never stored an offset for
// counts as reached when the topic holds nothing there any more (its
// records expired before the projection saw them).
func (b *Barrier) behind(ctx context.Context, want map[int32]int64) (map[int32]int64, error) {
	stored, err := StoredOffsets(ctx, b.pool, b.group)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ErrBehind
		}
		return nil, fmt.Errorf("projection: barrier: %w", err)
	}
	left := map[int32]int64{}
	for p, end := range want {
		if stored[b.topic][p] < end {
			left[p] = end
		}
	}
	if len(left) == 0 || !missingAny(stored[b.topic], left) {
		return left, nil
	}
	starts, err := b.adm.ListStartOffsets(ctx, b.topic)
	if err != nil {
		return left, nil // retry on the next poll
	}
	for p, end := range left {
		if _, ok := stored[b.topic][p]; ok {
			continue
		}
		if s, ok := starts.Lookup(b.topic, p); ok && s.Err == nil && s.Offset >= end {
			delete(left, p)
		}
	}
	return left, nil
}

// missingAny reports whether stored lacks one of the partitions of left.
func missingAny(stored map[int32]int64, left map[int32]int64) bool {
	for p := range left {
		if _, ok := stored[p]; !ok {
			return true
		}
	}
	return false
}
