package eventlog

import (
	"context"
	"log/slog"
	"maps"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Consumer feeds a log from Kafka: every partition of the lifecycle
// topics, read by this process alone (no consumer group, nothing
// committed), so every replica of the service has every event.
type Consumer struct {
	cl  *kgo.Client
	log *Log
	lg  *slog.Logger

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

// NewConsumer returns a consumer of cl (a client consuming the lifecycle
// topics from StartOffset) into l.
func NewConsumer(cl *kgo.Client, l *Log, lg *slog.Logger) *Consumer {
	return &Consumer{cl: cl, log: l, lg: lg, next: map[string]map[int32]int64{}}
}

// Run consumes until ctx is done.
func (c *Consumer) Run(ctx context.Context) error {
	for {
		fs := c.cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return nil
		}
		fs.EachError(func(topic string, p int32, err error) {
			c.lg.Warn("sse-bridge: fetch failed; retrying", "topic", topic, "partition", p, "err", err)
		})
		recs := fs.Records()
		c.log.Append(recs)
		c.advance(recs)
	}
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
