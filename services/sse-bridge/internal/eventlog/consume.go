package eventlog

import (
	"context"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ferryhq/ferry/platform/kafkax"
)

// Consumer feeds a log from Kafka: every partition of the lifecycle
// topics, read by this process alone (no consumer group, nothing
// committed), so every replica of the service has every event.
type Consumer struct {
	cl     *kgo.Client
	topics []string
	log    *Log
	lg     *slog.Logger

	mu   sync.Mutex
	next map[string]map[int32]int64 // next offset per topic and partition
}

// StartOffset is where a new consumer starts in each partition: perPartition
// records before its end, so the log begins with the recent past (a job
// stream opened after a restart still replays the job's history) at a
// bounded cost, instead of re-reading the topics' whole retention.
func StartOffset(perPartition int) kgo.Offset {
	return kgo.NewOffset().AtEnd().Relative(-int64(max(perPartition, 1)))
}

// NewConsumer returns a consumer of cl (a client consuming topics, the
// lifecycle topics, from StartOffset) into l.
func NewConsumer(cl *kgo.Client, topics []string, l *Log, lg *slog.Logger) *Consumer {
	return &Consumer{cl: cl, topics: topics, log: l, lg: lg, next: map[string]map[int32]int64{}}
}

// readBackTimeout bounds how long the read-back waits for partitions to
// deliver up to their end at start; what it has by then is logged anyway.
const readBackTimeout = 5 * time.Second

// Run logs the read-back as one batch, then consumes until ctx is done.
func (c *Consumer) Run(ctx context.Context) error {
	c.readBack(ctx)
	for {
		recs := c.poll(ctx)
		if ctx.Err() != nil {
			return nil
		}
		c.log.Append(recs)
		c.advance(recs)
	}
}

// poll returns the next fetched records, warning of failed fetches (the
// client retries them) unless ctx ended.
func (c *Consumer) poll(ctx context.Context) []*kgo.Record {
	fs := c.cl.PollFetches(ctx)
	fs.EachError(func(topic string, p int32, err error) {
		if ctx.Err() == nil {
			c.lg.Warn("sse-bridge: fetch failed; retrying", "topic", topic, "partition", p, "err", err)
		}
	})
	return fs.Records()
}

// advance records how far the log has read, for the lag gauge.
func (c *Consumer) advance(recs []*kgo.Record) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range recs {
		ps := c.next[r.Topic]
		if ps == nil {
			ps = map[int32]int64{}
			c.next[r.Topic] = ps
		}
		ps[r.Partition] = max(ps[r.Partition], r.Offset+1)
	}
}

// Positions returns the next offset the consumer reads per topic and
// partition (a kafkax.CommittedFunc for kafkax.WatchLag).
func (c *Consumer) Positions(context.Context) (map[string]map[int32]int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]map[int32]int64, len(c.next))
	for t, ps := range c.next {
		out[t] = maps.Clone(ps)
	}
	return out, nil
}

// readBack polls every partition up to its end when the consumer starts
// and logs all of it as one batch. A job's events travel on different
// topics, which the read-back reaches in no useful order; logged fetch by
// fetch, a completed read before the job's progress would end the job and
// the progress would be dropped (nothing is logged after a job's final
// event). One batch is ordered by event time (decodeBatch), so a job
// stream replays the job's history as it happened.
func (c *Consumer) readBack(ctx context.Context) {
	left, err := c.readBackEnds(ctx)
	if err != nil {
		c.lg.Warn("sse-bridge: listing the lifecycle partitions' offsets; logging the read-back as it comes", "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, readBackTimeout)
	defer cancel()
	var batch []*kgo.Record
	for len(left) > 0 && ctx.Err() == nil {
		for _, r := range c.poll(ctx) {
			batch = append(batch, r)
			tp := partition{r.Topic, r.Partition}
			if end, ok := left[tp]; ok && r.Offset+1 >= end {
				delete(left, tp)
			}
		}
	}
	c.log.Append(batch)
	c.advance(batch)
}

// partition is one partition of a topic.
type partition struct {
	topic string
	p     int32
}

// readBackEnds returns the end offset of each partition of c's topics that
// holds records (kafkax.Unprocessed by a consumer that read nothing yet),
// when the read-back starts.
func (c *Consumer) readBackEnds(ctx context.Context) (map[partition]int64, error) {
	adm := kadm.NewClient(c.cl)
	ends, err := adm.ListEndOffsets(ctx, c.topics...)
	if err != nil {
		return nil, err
	}
	starts, err := adm.ListStartOffsets(ctx, c.topics...)
	if err != nil {
		return nil, err
	}
	left := map[partition]int64{}
	for t, ps := range kafkax.Unprocessed(ends, starts, nil) {
		for p := range ps {
			end, _ := ends.Lookup(t, p)
			left[partition{t, p}] = end.Offset
		}
	}
	return left, nil
}
