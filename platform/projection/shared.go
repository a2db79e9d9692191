package projection

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/platform/kafkax"
)

// SharedGroup is the default consumer group of a Shared reader.
const SharedGroup = "ferry-projections"

// Shared runs several projections of one process from one Kafka client:
// one consumer group over the union of their topics, so the broker answers
// one fetch and the client decompresses each record once for all of them,
// where separate Runs fetch every record once per projection.
//
// Each projection keeps everything Run gives it: it applies its records in
// its own Postgres transactions with its own stored offsets (ferry_offsets
// under its own Config.Group, never the shared group's), parks its own
// poison records, has its quarantine.Watch and its lag gauge. A deployment
// can therefore switch a projection between a Shared reader and its own Run
// with neither loss nor double, as long as the two never run at once.
//
// On assignment the reader seeks each partition to the lowest stored next
// offset of the projections that read its topic, and each projection skips
// the records below its own. Each projection applies in its own goroutine
// from a buffer of Config.Buffer batches, so a slow projection does not
// hold the others back until its buffer is full; then the reader waits for
// it (the others drain theirs and idle). A projection retrying a transient
// failure for longer than its buffer lasts thus stops the others too: to
// let them go on the reader would have to read the log again for it alone,
// which is the cost this reader removes. Poison records are parked after
// quarantine.MaxTries, so only a failure that is not the records' fault
// (Postgres down: it stops every projection anyway) holds them long.
//
// Add every projection, then Run the reader.
type Shared struct {
	pool *pgxpool.Pool
	cfg  SharedConfig

	mu      sync.Mutex
	members []*member
	started bool
	stopped chan struct{} // closed when Run returns, with err set
	err     error
}

// SharedConfig configures a Shared reader.
type SharedConfig struct {
	// Group is the reader's own consumer group; its Kafka offsets are
	// never used (every projection resumes from its stored ones).
	// Defaults to SharedGroup.
	Group string
	Kafka kafkax.Config
	// FetchMinBytes and FetchMaxWait: as in Config, for the one reader.
	FetchMinBytes int32
	FetchMaxWait  time.Duration
	// Buffer is how many batches a projection may have waiting before the
	// reader waits for it. Defaults to 4.
	Buffer int
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// NewShared returns a reader for the projections added to it.
func NewShared(pool *pgxpool.Pool, cfg SharedConfig) *Shared {
	if cfg.Group == "" {
		cfg.Group = SharedGroup
	}
	if cfg.Buffer <= 0 {
		cfg.Buffer = 4
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Shared{pool: pool, cfg: cfg, stopped: make(chan struct{})}
}

// Add registers a projection (cfg.Kafka, FetchMinBytes and FetchMaxWait
// are the reader's, not its own) and returns what its service runs in
// place of Run: it blocks until ctx is done and returns nil, or returns
// the reader's error if the reader stops first. Add fails once Run has
// started or for a group added twice.
func (s *Shared) Add(cfg Config, apply ApplyFunc) (func(context.Context) error, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return nil, fmt.Errorf("projection: %s added after the shared reader started", cfg.Group)
	}
	for _, m := range s.members {
		if m.group == cfg.Group {
			return nil, fmt.Errorf("projection: %s added twice to the shared reader", cfg.Group)
		}
	}
	s.members = append(s.members, newMember(withDefaults(cfg), apply, s.cfg.Buffer))
	return s.wait, nil
}

// wait is a member's stand-in for Run.
func (s *Shared) wait(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case <-s.stopped:
		if s.err != nil {
			return s.err
		}
		<-ctx.Done()
		return nil
	}
}

// Run reads for every added projection until ctx is done. It returns only
// on ctx cancellation or a setup error.
func (s *Shared) Run(ctx context.Context) (err error) {
	s.mu.Lock()
	if s.started {
		s.mu.Unlock()
		return errors.New("projection: the shared reader runs once")
	}
	s.started = true
	members := s.members
	s.mu.Unlock()
	defer func() { s.err = err; close(s.stopped) }()
	if len(members) == 0 {
		<-ctx.Done()
		return nil
	}
	_, maxWait := fetchDefaults(s.cfg.FetchMinBytes, s.cfg.FetchMaxWait)
	largest := 0 // the largest batch of a member: what a partition may hold before it is paused
	for _, m := range members {
		largest = max(largest, m.cfg.MaxBatch)
	}
	r := &reader{pool: s.pool, cfg: s.cfg, members: members, align: newAligner(alignHold(maxWait), largest)}
	return r.run(ctx)
}

// member is one projection of a Shared reader.
type member struct {
	group  string
	cfg    Config
	apply  ApplyFunc
	topics map[string]bool
	in     chan batch
	// next is, per topic and partition, the offset of the first record
	// the projection has not been given: records below it are skipped.
	// Set from its stored offsets on assignment; guarded by reader.mu.
	next map[string]map[int32]int64
}

func newMember(cfg Config, apply ApplyFunc, buffer int) *member {
	m := &member{group: cfg.Group, cfg: cfg, apply: apply, topics: map[string]bool{},
		in: make(chan batch, buffer), next: map[string]map[int32]int64{}}
	for _, t := range cfg.Topics {
		m.topics[t] = true
	}
	return m
}

// take returns the records of recs that are m's and not yet given to it,
// and moves m's next offsets past them. Called with reader.mu held.
func (m *member) take(recs []*kgo.Record) []*kgo.Record {
	var out []*kgo.Record
	for _, r := range recs {
		if !m.topics[r.Topic] {
			continue
		}
		parts := m.next[r.Topic]
		if parts == nil {
			parts = map[int32]int64{}
			m.next[r.Topic] = parts
		}
		if r.Offset < parts[r.Partition] {
			continue
		}
		parts[r.Partition] = r.Offset + 1
		out = append(out, r)
	}
	return out
}

// batch is what a member applies in one transaction: records with the
// events of the polls they came from, decoded once for all members
// (Decode).
type batch struct {
	recs  []*kgo.Record
	polls []*decodes
}

// reader is a running Shared reader.
type reader struct {
	pool    *pgxpool.Pool
	cfg     SharedConfig
	members []*member
	mu      sync.Mutex // guards the members' next offsets
	pending pending
	align   *aligner // keeps the topics level in time (align.go)
}

// run polls and hands out records until ctx is done, with each member's
// applying goroutine and watchers beside it.
func (r *reader) run(ctx context.Context) error {
	cl, err := kafkax.NewClient(r.cfg.Kafka, r.clientOpts(ctx)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	bgCtx, stopBg := context.WithCancel(ctx)
	var bg sync.WaitGroup
	for _, m := range r.members {
		bg.Go(func() { watch(bgCtx, r.pool, cl, m.cfg, m.apply) })
		bg.Go(func() { r.project(bgCtx, m) })
	}
	defer func() { stopBg(); bg.Wait() }()
	for {
		recs := r.align.poll(ctx, cl, r.cfg.Group, r.cfg.Logger)
		if ctx.Err() != nil {
			cl.AllowRebalance()
			return nil
		}
		r.hand(ctx, recs)
		cl.AllowRebalance()
	}
}

// clientOpts are the reader's consumer options: a group over every
// member's topics, offsets from Postgres, and rebalances that wait until
// every batch handed out is applied.
func (r *reader) clientOpts(ctx context.Context) []kgo.Opt {
	var topics []string
	seen := map[string]bool{}
	for _, m := range r.members {
		for _, t := range m.cfg.Topics {
			if !seen[t] {
				seen[t] = true
				topics = append(topics, t)
			}
		}
	}
	minBytes, maxWait := fetchDefaults(r.cfg.FetchMinBytes, r.cfg.FetchMaxWait)
	opts := append(kafkax.Group(r.cfg.Group, topics...),
		kgo.BlockRebalanceOnPoll(),
		kgo.FetchMinBytes(minBytes),
		kgo.FetchMaxWait(maxWait),
		kgo.AdjustFetchOffsetsFn(r.seek),
	)
	return append(opts, rebalanceLogs(r.cfg.Group, r.cfg.Logger, func(cl *kgo.Client, ps map[string][]int32) {
		r.pending.wait(ctx)
		r.align.forget(cl, ps)
	})...)
}

// hand gives each member its records of recs, in batches of at most its
// MaxBatch, waiting while its buffer is full.
func (r *reader) hand(ctx context.Context, recs []*kgo.Record) {
	if len(recs) == 0 {
		return
	}
	ds := newDecodes(recs)
	for _, m := range r.members {
		r.mu.Lock()
		mine := m.take(recs)
		r.mu.Unlock()
		for len(mine) > 0 {
			n := min(len(mine), m.cfg.MaxBatch)
			r.pending.add()
			select {
			case m.in <- batch{mine[:n:n], []*decodes{ds}}:
			case <-ctx.Done():
				r.pending.done()
				return
			}
			mine = mine[n:]
		}
	}
}

// project applies m's batches until ctx is done. The batches that waited
// in m's buffer are applied together, up to m's MaxBatch, as Run applies
// all its client fetched while it applied the last batch: fewer, larger
// transactions, with more of a job's events folded into one row write.
func (r *reader) project(ctx context.Context, m *member) {
	settler := newSettler(r.pool, m.group, m.apply, m.cfg.Logger)
	tr := newTracer(m.group)
	var next *batch // handed, not applied: it did not fit the last transaction
	for {
		if next == nil {
			select {
			case <-ctx.Done():
				r.drop(m)
				return
			case b := <-m.in:
				next = &b
			}
		} else if ctx.Err() != nil {
			r.pending.done()
			r.drop(m)
			return
		}
		b, n, rest := m.gather(*next)
		next = rest
		spans := tr.start(b.recs)
		err := settler.Settle(withDecodes(ctx, b.polls), b.recs)
		tr.end(spans, err)
		for range n {
			r.pending.done()
		}
	}
}

// gather appends to b the batches waiting in m's buffer while they fit in
// m's MaxBatch. It returns b, how many handed batches it holds, and the
// first batch that did not fit, if any.
func (m *member) gather(b batch) (batch, int, *batch) {
	n := 1
	for len(b.recs) < m.cfg.MaxBatch {
		select {
		case more := <-m.in:
			if len(b.recs)+len(more.recs) > m.cfg.MaxBatch {
				return b, n, &more
			}
			b.recs = append(slices.Clip(b.recs), more.recs...)
			b.polls = append(slices.Clip(b.polls), more.polls...)
			n++
		default:
			return b, n, nil
		}
	}
	return b, n, nil
}

// drop forgets the batches left in m's buffer when the reader stops: they
// are read again, from the stored offsets, by the group's next owner.
func (r *reader) drop(m *member) {
	for {
		select {
		case <-m.in:
			r.pending.done()
		default:
			return
		}
	}
}

// seek is the reader's AdjustFetchOffsetsFn: it starts each assigned
// partition at the lowest stored next offset of the members reading it
// (the start when one has none) and sets each member's next offsets to its
// stored ones. No member has a batch of these partitions in hand: they
// are new to the reader, or their revocation waited for every batch.
func (r *reader) seek(ctx context.Context, assigned map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	stored := make([]map[string]map[int32]int64, len(r.members))
	for i, m := range r.members {
		s, err := StoredOffsets(ctx, r.pool, m.group)
		if err != nil {
			return nil, err
		}
		stored[i] = s
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]map[int32]kgo.Offset, len(assigned))
	for t, parts := range assigned {
		out[t] = make(map[int32]kgo.Offset, len(parts))
		for p := range parts {
			out[t][p] = r.startOf(t, p, stored)
		}
	}
	return out, nil
}

// startOf sets the next offsets of t/p of the members reading t from
// stored and returns where the reader starts t/p. Called with r.mu held.
func (r *reader) startOf(t string, p int32, stored []map[string]map[int32]int64) kgo.Offset {
	lowest, fromStart := int64(-1), false
	for i, m := range r.members {
		if !m.topics[t] {
			continue
		}
		if m.next[t] == nil {
			m.next[t] = map[int32]int64{}
		}
		o, ok := stored[i][t][p]
		m.next[t][p] = o // 0 when never stored: everything is new to it
		if !ok {
			fromStart = true
		} else if lowest < 0 || o < lowest {
			lowest = o
		}
	}
	if fromStart || lowest < 0 {
		return kgo.NewOffset().AtStart()
	}
	return kgo.NewOffset().At(lowest).WithEpoch(-1)
}

// pending counts the batches handed to members and not yet applied, so a
// rebalance can wait until none is in hand.
type pending struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed while n == 0; nil means closed
}

func (p *pending) add() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n == 0 {
		p.idle = make(chan struct{})
	}
	p.n++
}

func (p *pending) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n--
	if p.n == 0 {
		close(p.idle)
	}
}

// wait returns once no batch is in hand, or ctx is done.
func (p *pending) wait(ctx context.Context) {
	p.mu.Lock()
	idle := p.idle
	p.mu.Unlock()
	if idle == nil {
		return
	}
	select {
	case <-idle:
	case <-ctx.Done():
	}
}
