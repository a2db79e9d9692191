package kafkax

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"
)

// explicitKey marks, in a record's Context, a record whose Partition was
// chosen by its producer (ToPartition).
type explicitKey struct{}

// ToPartition makes rec go to partition p of its topic instead of the one
// its key hashes to: the scheduler sends a dispatch to a partition owned by
// a worker that handles the job's type. Call it after anything else that
// sets rec.Context (tracing); a p beyond the topic's partitions falls back
// to the key's hash.
func ToPartition(rec *kgo.Record, p int32) {
	ctx := rec.Context
	if ctx == nil {
		ctx = context.Background()
	}
	rec.Context = context.WithValue(ctx, explicitKey{}, true)
	rec.Partition = p
}

func explicit(r *kgo.Record) bool {
	if r.Context == nil {
		return false
	}
	v, _ := r.Context.Value(explicitKey{}).(bool)
	return v
}

// partitioner is every producer's partitioner: records marked by
// ToPartition go to their Partition; all others are partitioned by key
// (base: sticky when they have none).
type partitioner struct{ base kgo.Partitioner }

func (p partitioner) ForTopic(t string) kgo.TopicPartitioner {
	return topicPartitioner{base: p.base.ForTopic(t)}
}

type topicPartitioner struct{ base kgo.TopicPartitioner }

func (tp topicPartitioner) RequiresConsistency(r *kgo.Record) bool {
	return explicit(r) || tp.base.RequiresConsistency(r)
}

func (tp topicPartitioner) Partition(r *kgo.Record, n int) int {
	if explicit(r) && r.Partition >= 0 && int(r.Partition) < n {
		return int(r.Partition)
	}
	return tp.base.Partition(r, n)
}

// OnNewBatch passes the batch boundary on to a sticky base.
func (tp topicPartitioner) OnNewBatch() {
	if nb, ok := tp.base.(kgo.TopicPartitionerOnNewBatch); ok {
		nb.OnNewBatch()
	}
}
