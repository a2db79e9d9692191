package kafkax

import (
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// MarkedGroup is [Group] for consumers that commit only the records they
// mark with kgo.MarkCommitRecords (kgo.AutoCommitMarks): marked offsets are
// committed every second, on revoke and on close, and the caller may commit
// them at once with CommitMarkedOffsets. The worker uses it to commit a
// dispatch as soon as its handler has started.
func MarkedGroup(group string, topics ...string) []kgo.Opt {
	return []kgo.Opt{
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.AutoCommitMarks(),
		kgo.AutoCommitInterval(time.Second),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.FetchMaxWait(250 * time.Millisecond),
		kgo.SessionTimeout(10 * time.Second),
		kgo.HeartbeatInterval(1 * time.Second),
		kgo.RebalanceTimeout(20 * time.Second),
	}
}
